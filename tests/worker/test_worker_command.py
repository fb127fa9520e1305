"""`approvals worker` delivers webhooks too, beside its runs, and hands the URLs back when it stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio

from approvals.calls.actors import SYSTEM_ACTOR_ID
from approvals.channels.webhooks import endpoint_key
from approvals.store import Database, Store
from approvals.store.models import WebhookCursorRow
from approvals.store.outbox import WebhookCursors

from ..eventually import eventually_sync
from ..web.test_webhooks import SECRET, Receiver, serving

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def on(db_url: str, action: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        database = Database(db_url)
        try:
            return await action(Store(database))
        finally:
            await database.dispose()

    return anyio.run(main)


def wait_for(check: Callable[[], bool], process: subprocess.Popen[str], seconds: float = 60.0) -> None:
    """`check` holds; fail at once if the worker exited."""

    def holds() -> bool:
        assert process.poll() is None, "the worker exited"
        return check()

    eventually_sync(holds, "the worker", seconds=seconds)


async def a_failed_run_event(store: Store) -> None:
    """The audit event a run that failed writes, all a webhook is made of."""
    async with store.runs.transaction() as tx:
        tx.audit(
            SYSTEM_ACTOR_ID, "run.failed", "run", "r-1", run_id="r-1", agent_name="shop", details={"error": "boom"}
        )


def test_the_worker_delivers_webhooks_and_hands_them_back_when_it_stops(db_url: str, tmp_path: Path) -> None:
    with serving(Receiver()) as receiver:
        endpoint = endpoint_key(receiver.url)

        def cursor() -> WebhookCursorRow | None:
            return on(db_url, lambda store: WebhookCursors(store.outbound).get(endpoint))

        env = {k: v for k, v in os.environ.items() if not k.startswith("APPROVALS_")}
        env.update(
            APPROVALS_WEBHOOK_URLS=json.dumps([receiver.url]), APPROVALS_WEBHOOK_SECRET=SECRET, PYTHONUNBUFFERED="1"
        )
        command = [sys.executable, "-m", "approvals.cli", "worker", "--demo", "--database-url", db_url]
        with subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as worker:
            assert worker.stdout is not None
            assert "waiting for ready runs" in worker.stdout.readline()
            assert "delivering webhooks to 1 URL(s)" in worker.stdout.readline()
            wait_for(lambda: cursor() is not None, worker)  # events from now on are delivered
            on(db_url, a_failed_run_event)
            wait_for(lambda: len(receiver.accepted) == 1, worker)
            held = cursor()
            assert held is not None and held.lease_owner is not None
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0, worker.stdout.read()
    [event] = receiver.events()
    assert (event["event"], event["run_id"], event["error"]) == ("run.failed", "r-1", "boom")
    assert receiver.attempts[0].signed
    released = cursor()
    assert released is not None and released.lease_owner is None  # handed back: another process takes over at once
    assert released.last_event_id >= event["id"]
