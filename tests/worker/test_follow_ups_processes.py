"""Reminders and escalation through real trouble: processes killed and restarted, a database server stopped.

Two `approvals worker`s scan one database every 0.2 s; calls are asked before, during and after
one is killed and restarted. Every call gets exactly one `call.reminded` and one
`call.escalated`, whichever process made them, and the audit chain holds. A PostgreSQL cluster
of the test's own is stopped while calls fall due: the scanner waits it out.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from approvals.channels.settings import FollowUpDefaults
from approvals.store import Database, Store
from approvals.store.audit import verify_audit_chain
from approvals.store.migrate import upgrade
from approvals.worker.follow_ups import run_follow_ups

from ..pg_cluster import own_cluster
from ..store.test_outages import retrying
from .test_follow_ups import ask, events

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
FOLLOW_UPS = {
    "APPROVALS_FOLLOW_UP_INTERVAL": "0.2",
    "APPROVALS_REMIND_BEFORE": "28s",  # calls get 30 s: reminded 2 s after they are asked
    "APPROVALS_ESCALATE_AFTER": "2s",
    "APPROVALS_ESCALATE_TO": '["ops"]',
}


@contextmanager
def worker(url: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`approvals worker --demo` on `url`, stopped with SIGTERM at the end (unless the test killed it)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("APPROVALS_")}
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "approvals.cli", "worker", "--demo", "--database-url", url],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**env, **FOLLOW_UPS, "PYTHONPATH": str(ROOT)},
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
                process.wait()


async def started(process: subprocess.Popen[bytes], log: Path, times: int = 1) -> None:
    with anyio.fail_after(60):
        while (text := await anyio.Path(log).read_text()).count("waiting for ready runs") < times:
            assert process.poll() is None, text
            await anyio.sleep(0.1)


async def test_two_worker_processes_and_a_restart_remind_and_escalate_each_call_once(
    db_url: str, tmp_path: Path
) -> None:
    database = Database(db_url)
    store = Store(database)
    logs = tmp_path / "first.log", tmp_path / "second.log"
    try:
        with worker(db_url, logs[1]) as second:
            with worker(db_url, logs[0]) as first:
                await started(first, logs[0])
                await started(second, logs[1])
                asked = [await ask(store, ttl=30) for _ in range(8)]
                await anyio.sleep(2.5)  # both scanning: the first calls fall due now
                first.kill()  # SIGKILL, perhaps mid-scan
                first.wait()
                asked += [await ask(store, ttl=30) for _ in range(8)]
            with worker(db_url, logs[0]) as restarted:
                await started(restarted, logs[0], times=2)
                asked += [await ask(store, ttl=30) for _ in range(8)]
                ids = {call.id for call in asked}
                with anyio.fail_after(25):
                    while True:
                        reminded = Counter(e.subject_id for e in await events(store, "call.reminded"))
                        escalated = Counter(e.subject_id for e in await events(store, "call.escalated"))
                        if set(reminded) >= ids and set(escalated) >= ids:
                            break
                        await anyio.sleep(0.2)
                await anyio.sleep(1)  # a few more scans by both: still once each
                assert restarted.poll() is None and second.poll() is None
        reminded = Counter(e.subject_id for e in await events(store, "call.reminded"))
        escalated = Counter(e.subject_id for e in await events(store, "call.escalated"))
        assert reminded == escalated == Counter(ids)
        async with database.read() as session:
            assert (await verify_audit_chain(session)).ok
        output = logs[0].read_text() + logs[1].read_text()
        assert "Traceback" not in output, output
    finally:
        await database.dispose()


async def test_the_scanner_waits_out_a_postgresql_outage_and_says_so_once_each_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server stops while calls fall due; once it is back they are escalated, once, and the log says it all
    in two lines."""
    with own_cluster() as cluster:
        url = cluster.database()
        upgrade(url)
        database = Database(url)
        store = Store(database)
        quick = FollowUpDefaults(remind_before=None, escalate_after=2.0, escalate_to=("ops",))
        stop = anyio.Event()
        try:
            with caplog.at_level(logging.INFO, logger="approvals.follow_ups"), anyio.fail_after(90):
                async with anyio.create_task_group() as group:
                    await group.start(
                        lambda task_status: run_follow_ups(store, quick, stop, interval=0.1, task_status=task_status)
                    )
                    calls = [await ask(store, ttl=None) for _ in range(3)]
                    cluster.stop()
                    await anyio.sleep(3)  # the calls fall due while the scans fail
                    cluster.start()
                    while len(await retrying(lambda: events(store, "call.escalated"))) < len(calls):
                        await anyio.sleep(0.1)
                    await anyio.sleep(0.5)
                    stop.set()
            escalated = Counter(e.subject_id for e in await events(store, "call.escalated"))
            assert escalated == Counter(call.id for call in calls)
        finally:
            await database.dispose()
    lines = [record.getMessage() for record in caplog.records if record.name == "approvals.follow_ups"]
    assert len([line for line in lines if "retrying with backoff" in line]) == 1, lines
    assert len([line for line in lines if "works again after" in line]) == 1, lines
    assert not [record for record in caplog.records if record.exc_info], lines
