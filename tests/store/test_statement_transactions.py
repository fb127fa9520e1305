"""`StoreBase.run_statements`: a transaction of plain statements (on SQLite, on the caller's thread when it can).

What the hot path relies on: all or nothing with its audit events, a cancelled caller
that still sees its transaction through, writers in one process that take turns
without "database is locked", a write that waits for another process in a worker
thread rather than on the event loop, and checkpoints kept out of commits.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from sqlalchemy import func, select, text, update

from approvals.store import SYSTEM, Store
from approvals.store.audit import run_event
from approvals.store.backends.sqlite_writes import CHECKPOINT_EVERY
from approvals.store.models import AuditEventRow, RunRow
from approvals.store.run_sql import Tx

pytestmark = pytest.mark.anyio


async def audit_count(store: Store) -> int:
    async with store.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(AuditEventRow)) or 0)


async def prompt_of(store: Store, run_id: str) -> str | None:
    async with store.db.read() as session:
        prompt: str | None = await session.scalar(select(RunRow.prompt).where(RunRow.id == run_id))
        return prompt


def set_prompt(tx: Tx, run_id: str, prompt: str) -> None:
    tx.session.execute(update(RunRow).where(RunRow.id == run_id).values(prompt=prompt))
    tx.record(run_event(SYSTEM.id, "test.prompt", run_id, "agent", {"prompt": prompt}))


async def test_a_body_that_raises_writes_nothing_not_even_its_audit_events(store: Store) -> None:
    run_id = await store.runs.start_run("agent", "before", actor=SYSTEM)
    events = await audit_count(store)

    def fails(tx: Tx) -> None:
        set_prompt(tx, run_id, "after")
        raise RuntimeError("the body failed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        await store.runs.run_statements(fails)
    assert await prompt_of(store, run_id) == "before"
    assert await audit_count(store) == events
    await store.runs.run_statements(lambda tx: set_prompt(tx, run_id, "later"))  # nothing left locked
    assert await prompt_of(store, run_id) == "later"
    assert (await store.audit.verify_audit()).ok


async def test_a_cancelled_caller_waits_for_its_transaction_to_commit(store: Store) -> None:
    run_id = await store.runs.start_run("agent", "before", actor=SYSTEM)
    started = threading.Event()
    postgres = store.db.is_postgres

    def slow(tx: Tx) -> None:
        set_prompt(tx, run_id, "committed")
        started.set()
        if postgres:  # a statement the server takes a while over: the event loop runs meanwhile
            tx.session.execute(text("SELECT pg_sleep(0.5)"))
        else:  # the body runs in a worker thread (below)
            time.sleep(0.5)

    async with contextlib.AsyncExitStack() as stack:
        if store.db.is_sqlite:  # so the write cannot start at once and goes to a worker thread
            release = await stack.enter_async_context(another_process_writing(store))
        async with anyio.create_task_group() as group:
            group.start_soon(store.runs.run_statements, slow)
            if store.db.is_sqlite:
                await anyio.sleep(0.2)
                await release()
            await anyio.to_thread.run_sync(started.wait, 10)
            assert await prompt_of(store, run_id) == "before"  # cancelled mid-transaction
            group.cancel_scope.cancel()
    assert await prompt_of(store, run_id) == "committed"
    assert (await store.audit.verify_audit()).ok


@asynccontextmanager
async def another_process_writing(store: Store) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Another process holds SQLite's write lock until the function this yields is awaited."""
    holder = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.readline(); c.execute('COMMIT')"
    )
    async with await anyio.open_process([sys.executable, "-c", holder, str(store.db.url.database)]) as process:
        assert process.stdout is not None and process.stdin is not None
        assert b"locked" in await process.stdout.receive()

        async def release() -> None:
            assert process.stdin is not None
            await process.stdin.send(b"\n")
            assert await process.wait() == 0

        yield release


def sqlite_only(store: Store) -> None:
    if not store.db.is_sqlite:
        pytest.skip("SQLite's write path")


def prompt_setter(run_id: str, threads: list[int]) -> Callable[[Tx], None]:
    """A write that sets the run's prompt to "after" and notes the thread it ran on."""

    def write(tx: Tx) -> None:
        threads.append(threading.get_ident())
        set_prompt(tx, run_id, "after")

    return write


async def test_a_write_runs_on_the_callers_thread_when_the_lock_is_free(store: Store) -> None:
    sqlite_only(store)
    run_id = await store.runs.start_run("agent", "before", actor=SYSTEM)
    threads: list[int] = []
    await store.runs.run_statements(prompt_setter(run_id, threads))
    assert threads == [threading.get_ident()]
    assert await prompt_of(store, run_id) == "after"


async def test_a_write_waits_in_a_worker_thread_while_another_process_writes(store: Store) -> None:
    sqlite_only(store)
    run_id = await store.runs.start_run("agent", "before", actor=SYSTEM)
    threads: list[int] = []
    async with another_process_writing(store) as release, anyio.create_task_group() as group:
        group.start_soon(store.runs.run_statements, prompt_setter(run_id, threads))
        await anyio.sleep(0.3)
        assert threads == []  # waiting for the lock, without holding up the event loop
        assert await prompt_of(store, run_id) == "before"
        await release()
    assert len(threads) == 1 and threads[0] != threading.get_ident()
    assert await prompt_of(store, run_id) == "after"


async def test_commits_never_checkpoint_and_every_hundredth_checkpoints_in_a_worker_thread(store: Store) -> None:
    """A checkpoint syncs the disk: never inside a commit (which may run on the event loop's thread)."""
    sqlite_only(store)
    writer = store.db.sqlite_writer
    assert writer is not None
    path = Path(str(store.db.url.database))
    run_id = await store.runs.start_run("agent", "0", actor=SYSTEM)
    await anyio.to_thread.run_sync(writer._checkpoint)
    checkpointed_in: list[int] = []
    checkpoint = writer._checkpoint

    def watched_checkpoint() -> None:
        checkpointed_in.append(threading.get_ident())
        checkpoint()

    writer._checkpoint = watched_checkpoint  # type: ignore[method-assign]
    page = "x" * 50_000  # a dozen pages a commit: SQLite's own checkpoint would come after about 80
    to_go = CHECKPOINT_EVERY - writer._commits % CHECKPOINT_EVERY
    database_file = await anyio.Path(path).read_bytes()
    for n in range(to_go - 1):
        await store.runs.run_statements(functools.partial(set_prompt, run_id=run_id, prompt=f"{n}{page}"))
    assert checkpointed_in == []
    assert await anyio.Path(path).read_bytes() == database_file  # every change is still only in the log
    await store.runs.run_statements(lambda tx: set_prompt(tx, run_id, f"last{page}"))
    assert len(checkpointed_in) == 1 and checkpointed_in[0] != threading.get_ident()
    assert await anyio.Path(path).read_bytes() != database_file
    assert (await prompt_of(store, run_id) or "").startswith("last")


async def test_writers_in_one_process_take_turns(store: Store) -> None:
    run_id = await store.runs.start_run("agent", "0", actor=SYSTEM)

    def increment(tx: Tx) -> None:
        current = tx.session.scalar(select(RunRow.prompt).where(RunRow.id == run_id).with_for_update())
        set_prompt(tx, run_id, str(int(current or 0) + 1))

    async with anyio.create_task_group() as group:
        for _ in range(40):
            group.start_soon(store.runs.run_statements, increment)
    assert await prompt_of(store, run_id) == "40"
    assert (await store.audit.verify_audit()).ok
