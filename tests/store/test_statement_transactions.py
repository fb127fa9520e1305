"""`Store.run_statements`: a transaction of plain statements (one worker-thread hop on SQLite).

What the hot path relies on: all or nothing with its audit events, a cancelled caller
that still sees its transaction through, and writers in one process that take turns
without "database is locked".
"""

from __future__ import annotations

import threading

import anyio
import pytest
from sqlalchemy import func, select, update

from approvals.store import SYSTEM, Store
from approvals.store._run_writes import Tx
from approvals.store.audit import run_event
from approvals.store.models import AuditEventRow, RunRow

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
    run_id = await store.start_run("agent", "before", actor=SYSTEM)
    events = await audit_count(store)

    def fails(tx: Tx) -> None:
        set_prompt(tx, run_id, "after")
        raise RuntimeError("the body failed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        await store.run_statements(fails)
    assert await prompt_of(store, run_id) == "before"
    assert await audit_count(store) == events
    await store.run_statements(lambda tx: set_prompt(tx, run_id, "later"))  # nothing left locked
    assert await prompt_of(store, run_id) == "later"
    assert (await store.verify_audit()).ok


async def test_a_cancelled_caller_waits_for_its_transaction_to_commit(store: Store) -> None:
    run_id = await store.start_run("agent", "before", actor=SYSTEM)
    started, release = threading.Event(), threading.Event()

    def slow(tx: Tx) -> None:
        set_prompt(tx, run_id, "committed")
        started.set()
        release.wait(10)

    async with anyio.create_task_group() as group:
        group.start_soon(store.run_statements, slow)
        await anyio.to_thread.run_sync(started.wait, 10)
        group.cancel_scope.cancel()
        release.set()
    assert await prompt_of(store, run_id) == "committed"
    assert (await store.verify_audit()).ok


async def test_writers_in_one_process_take_turns(store: Store) -> None:
    run_id = await store.start_run("agent", "0", actor=SYSTEM)

    def increment(tx: Tx) -> None:
        current = tx.session.scalar(select(RunRow.prompt).where(RunRow.id == run_id).with_for_update())
        set_prompt(tx, run_id, str(int(current or 0) + 1))

    async with anyio.create_task_group() as group:
        for _ in range(40):
            group.start_soon(store.run_statements, increment)
    assert await prompt_of(store, run_id) == "40"
    assert (await store.verify_audit()).ok
