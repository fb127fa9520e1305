"""Workers and writes through real outages: killed connections, a restarted server, a read-only or full disk.

The outages are real: connections terminated by PostgreSQL (`pg_terminate_backend`), a
PostgreSQL cluster of the test's own stopped and started again, a SQLite file on a small
filesystem remounted read-only or filled up. The shared PostgreSQL cluster is never
stopped; only connections to a test's own database are terminated.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import anyio
import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from approvals.calls.verdicts import Approve
from approvals.store import Actor, Database, Store
from approvals.store.errors import is_transient
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, run_worker

from ..eventually import eventually
from ..pg_cluster import own_cluster
from .agents import email_agent, shop_agent
from .outage_agents import garbage_agent, gated_agent, nul_result_agent

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def registry() -> AgentRegistry:
    return AgentRegistry([shop_agent, email_agent, gated_agent, garbage_agent, nul_result_agent])


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 60) -> None:
    """Poll `check` until it is true; transient database errors count as "not yet"."""

    async def holds() -> bool:
        try:
            return await check()
        except Exception as exc:
            if not is_transient(exc):
                raise
            return False

    await eventually(holds, what, seconds=seconds, interval=0.05)


async def retrying(operation: Callable[[], Awaitable[T]], seconds: float = 60) -> T:
    """`operation()`, tried again while the database is unavailable."""
    with anyio.fail_after(seconds):
        while True:
            try:
                return await operation()
            except Exception as exc:
                if not is_transient(exc):
                    raise
            await anyio.sleep(0.1)


async def log_has(path: Path, text: str) -> bool:
    log = anyio.Path(path)
    return await log.exists() and text in await log.read_text()


async def status_is(store: Store, run_id: str, *statuses: str) -> bool:
    return (await store.runs.get_run(run_id)).status in statuses


@asynccontextmanager
async def worker(store: Store, **options: Any) -> AsyncIterator[None]:
    """`run_worker` in this process until the block ends; a worker that dies fails the test."""
    stop = anyio.Event()
    options = {"poll_interval": 3600, "expire_interval": 3600, **options}
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: run_worker(store, registry(), stop=stop, **options))
        await anyio.sleep(0.3)  # listening
        yield
        stop.set()


async def worker_met_outage(caplog: pytest.LogCaptureFixture, loop: str) -> None:
    """Wait until the worker's `loop` has failed against the database (it says so once)."""
    failed = f"{loop} failed"
    await eventually(lambda: any(r.getMessage().startswith(failed) for r in caplog.records), failed)


async def paused_mail_run(store: Store, tmp_path: Path) -> str:
    run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await until(lambda: status_is(store, run_id, "awaiting_approval"), "the run to pause")
    return run_id


# --- PostgreSQL: connections killed, the server restarted --------------------------------------


async def test_a_worker_outlives_its_connections_being_terminated(db_url: str, tmp_path: Path) -> None:
    database = Database(db_url)
    if database.is_sqlite:
        await database.dispose()
        pytest.skip("SQLite has no server connections to terminate")
    store = Store(database)
    reviewer_db = Database(db_url)
    reviewer = Store(reviewer_db)
    try:
        async with worker(store):
            run_id = await paused_mail_run(store, tmp_path)
            with psycopg.connect(db_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert killed is not None and killed[0] >= 2, "the worker's pooled and LISTEN connections"
            [call] = await retrying(lambda: reviewer.calls.run_calls(run_id))
            await retrying(lambda: reviewer.calls.decide(call.id, Approve(), actor=ALICE))
            # the poll interval is an hour: only a LISTEN connection opened again can wake the worker
            await until(lambda: status_is(reviewer, run_id, "completed"), "the worker to finish the run", 30)
        assert (tmp_path / "log").read_text().splitlines() == ["email ann@example.com"]
    finally:
        await database.dispose()
        await reviewer_db.dispose()


@contextmanager
def worker_process(url: str, log: Path, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "approvals.cli", "worker", "--database-url", url, "--agent", *extra],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


async def test_a_worker_process_outlives_a_postgresql_restart(tmp_path: Path) -> None:
    with own_cluster() as cluster:
        url = cluster.database()
        upgrade(url)
        log = tmp_path / "worker.log"
        database = Database(url)
        store = Store(database)
        try:
            agent = "tests.store.agents:email_agent"
            with worker_process(url, log, agent, "--poll-interval", "3600") as process:
                first = await paused_mail_run(store, tmp_path)
                cluster.restart()
                [call] = await retrying(lambda: store.calls.run_calls(first))
                await retrying(lambda: store.calls.decide(call.id, Approve(), actor=ALICE))
                await until(lambda: status_is(store, first, "completed"), "the run decided after the restart", 60)
                cluster.stop()
                await anyio.sleep(2)  # the worker sees the server gone
                cluster.start()
                second = await retrying(lambda: paused_mail_run(store, tmp_path))
                assert second
                assert process.poll() is None, log.read_text()
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0, log.read_text()
        finally:
            await database.dispose()
    output = log.read_text()
    assert "retrying with backoff" in output and "works again" in output, output
    assert "Traceback" not in output, output


async def test_a_step_cut_off_by_a_restart_is_stored_once_the_server_is_back(tmp_path: Path) -> None:
    """The tool ran: its result must be stored after the outage, not lost as `outcome_unknown`."""
    with own_cluster() as cluster:
        url = cluster.database()
        upgrade(url)
        database = Database(url)
        store = Store(database)
        deps = {"log": str(tmp_path / "log"), "gate": str(tmp_path / "gate")}
        try:
            async with worker(store, lease_seconds=60):
                run_id = await store.runs.start_run("gated", "refund", actor=SERVICE, deps=deps)
                await until(lambda: status_is(store, run_id, "awaiting_approval"), "the run to pause")
                [call] = await store.calls.run_calls(run_id)
                await store.calls.decide(call.id, Approve(), actor=ALICE)
                await until(lambda: log_has(tmp_path / "log", "started"), "the tool to start")
                cluster.stop()
                (tmp_path / "gate").touch()  # the tool returns while the database is down
                await until(lambda: log_has(tmp_path / "log", "refunded"), "the tool to end")
                await anyio.sleep(1.5)  # the step's write fails, and is retried
                cluster.start()
                await until(lambda: status_is(store, run_id, "completed", "failed"), "the run to end", 60)
            run = await store.runs.get_run(run_id)
            assert run.status == "completed", run.error
            [call] = await store.calls.run_calls(run_id)
            assert (call.status, call.result) == ("succeeded", "refunded A-1")
            assert (tmp_path / "log").read_text().splitlines() == ["started A-1", "refunded A-1"]
        finally:
            await database.dispose()


# --- every database: a dead worker's run, and output that cannot be stored as it is ---------------


async def test_a_dead_workers_run_is_taken_over_when_its_lease_ends(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    ghost = await store.runs.claim("ghost-worker", lease_seconds=2, run_id=run_id)
    assert ghost is not None  # claimed, and its worker "dies": nothing renews or announces anything
    async with worker(store):  # polls once an hour: only the lease's end can wake it
        await until(lambda: status_is(store, run_id, "awaiting_approval"), "another worker to take the run", 30)


async def test_model_output_no_database_can_store_is_repaired_and_the_run_goes_on(store: Store) -> None:
    async with worker(store):
        run_id = await store.runs.start_run("garbage", "go", actor=SERVICE)
        await until(lambda: status_is(store, run_id, "awaiting_approval", "failed"), "the run to pause")
        run = await store.runs.get_run(run_id)
        assert run.status == "awaiting_approval", run.error
        calls = await store.calls.run_calls(run_id)
        assert len(calls) == 3 and len({c.tool_call_id for c in calls}) == 3
        assert all(len(c.tool_call_id) <= 128 for c in calls)
        assert sorted(c.args["text"] for c in calls) == ["a\ufffdb \ufffd", "c\ufffdd", "e"]
        for call in calls:
            await store.calls.decide(call.id, Approve(), actor=ALICE)
        await until(lambda: status_is(store, run_id, "completed", "failed"), "the run to end")
    run = await store.runs.get_run(run_id)
    assert (run.status, run.output) == ("completed", "finished \ufffd with a lone \ufffd surrogate")


async def test_a_step_the_database_refuses_fails_the_run_once_with_its_reason(store: Store) -> None:
    """A tool's result with a NUL: PostgreSQL refuses it for good, so the run fails; SQLite stores it."""
    async with worker(store):
        run_id = await store.runs.start_run("nul-result", "go", actor=SERVICE)
        await until(lambda: status_is(store, run_id, "completed", "failed"), "the run to end")
    run = await store.runs.get_run(run_id)
    if store.db.is_sqlite:
        assert run.status == "completed"
        return
    assert run.status == "failed"
    assert run.error is not None and "refused to store" in run.error and "\\u0000" in run.error, run.error
    assert (run.lease_owner, run.lease_expires_at) == (None, None), "settled, never claimed again"


# --- SQLite on a filesystem of its own: read-only for a while, full for a while ----------------


def fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem has no room left."""
    # unbuffered: a buffered file would flush what the failed write left over again on close, and raise there
    with path.open("wb", buffering=0) as out, pytest.raises(OSError, match="No space left"):
        _write_forever(out)


def _write_forever(out: BinaryIO) -> None:
    while True:
        out.write(b"\0" * 65536)
        out.flush()


async def start_runs_until_refused(store: Store) -> None:
    """Write until the database refuses: a full disk may leave a few free pages in the file and its WAL."""
    for _ in range(500):
        await store.runs.start_run("mailer", "x" * 20_000, actor=SERVICE)


@contextmanager
def small_filesystem(size: str = "8m") -> Iterator[Path]:
    """A tmpfs of its own (needs root; CI runs as root); unmounted at the end."""
    folder = Path(subprocess.check_output(["mktemp", "-d"], text=True).strip())
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=False)
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip("cannot mount a filesystem here (not root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


async def test_sqlite_read_only_for_a_while_then_writable_again(tmp_path: Path) -> None:
    """SQLite opens a read-only file read-only for good: such connections must be replaced once it is writable.

    The file is made read-only between two workers: while any connection of this process
    stays open, SQLite hands the files of closed ones (opened writable) to new connections,
    so a worker polling through `dispose()` could keep writing to a read-only file.
    """
    path = tmp_path / "approvals.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    database = Database(url)
    store = Store(database)
    try:
        async with worker(store):
            run_id = await paused_mail_run(store, tmp_path)
        [call] = await store.calls.run_calls(run_id)
        if (await anyio.run_process(["chattr", "+i", str(path)], check=False)).returncode != 0:
            pytest.skip("cannot make a file immutable here (chattr needs root and ext4)")
        try:
            await database.dispose()  # every connection is opened anew, read-only
            async with worker(store, expire_interval=0.2):
                await anyio.sleep(1)  # the worker's expiry and claims meet it too
                with pytest.raises(OperationalError, match="readonly") as refused:
                    await store.calls.decide(call.id, Approve(), actor=ALICE)
                assert is_transient(refused.value), refused.value
                await anyio.run_process(["chattr", "-i", str(path)])
                attempts = 0
                while (await store.calls.get_call(call.id)).status == "pending":
                    attempts += 1  # a stale connection may be met once; it and those opened before it are replaced
                    assert attempts <= 2, "connections opened while the file was read-only are still in use"
                    with contextlib.suppress(OperationalError):
                        await store.calls.decide(call.id, Approve(), actor=ALICE)
                await until(lambda: status_is(store, run_id, "completed"), "the worker to finish the run", 30)
        finally:
            await anyio.run_process(["chattr", "-i", str(path)])
    finally:
        await database.dispose()


async def test_sqlite_disk_full_for_a_while_then_room_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with small_filesystem("4m") as folder:
        url = f"sqlite:///{folder / 'approvals.db'}"
        upgrade(url)
        database = Database(url)
        store = Store(database)
        try:
            run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE, deps={"log": str(tmp_path / "log")})
            filler = folder / "filler"
            fill(filler)
            with pytest.raises(OperationalError, match="full") as refused:
                await start_runs_until_refused(store)
            assert is_transient(refused.value), refused.value
            async with worker(store, expire_interval=0.2, poll_interval=0.2):
                # its claims of the ready run meet the full disk (it says so), and it backs off
                await worker_met_outage(caplog, "looking for ready runs")
                assert (await store.runs.get_run(run_id)).status == "ready"
                filler.unlink()
                await until(lambda: status_is(store, run_id, "awaiting_approval"), "the worker to take the run")
                [call] = await store.calls.run_calls(run_id)
                await store.calls.decide(call.id, Approve(), actor=ALICE)
                await until(lambda: status_is(store, run_id, "completed"), "the worker to finish the run")
        finally:
            await database.dispose()
