"""Webhooks against a real HTTP receiver on 127.0.0.1 that checks signatures, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from approvals.calls.verdicts import Approve, Deny
from approvals.channels.webhook_signature import verify_webhook
from approvals.channels.webhooks import endpoint_key
from approvals.policy.follow_ups import Step
from approvals.store import SYSTEM, Actor, Database, Store
from approvals.store.models import WebhookCursorRow
from approvals.store.outbox import WebhookCursors
from approvals.store.run_plan import utcnow
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings
from approvals_web.webhooks import deliver_webhooks

from ..eventually import eventually, eventually_sync
from ..processes import free_port, wait_until_answering
from ..processes import stop as stop_process
from ..store.agents import email_agent, shop_agent
from .conftest import WebApp

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-for-tests"
ROOT = Path(__file__).resolve().parents[2]
SERVICE = Actor("svc", "reviewer")


@dataclasses.dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    signed: bool
    """The signature matched the body and timestamp under the shared secret."""
    status: int
    """What the receiver answered."""

    @property
    def event(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data


class Receiver:
    """A webhook receiver in a thread: records every attempt, answers with `statuses` (then 204)."""

    def __init__(self, statuses: Callable[[int], int] = lambda attempt: 204, delay: float = 0.0) -> None:
        self.attempts: list[Delivery] = []
        self.answered = 0
        """Requests it has finished answering (a slow one holds the others open meanwhile)."""
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                timestamp = self.headers.get("X-Approvals-Timestamp", "")
                expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(expected, self.headers.get("X-Approvals-Signature", ""))
                with receiver.lock:
                    status = statuses(len(receiver.attempts) + 1)
                    receiver.attempts.append(Delivery(dict(self.headers.items()), body, signed, status))
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.lock:
                    receiver.answered += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/approvals?token=secret-in-url"

    @property
    def accepted(self) -> list[Delivery]:
        """Deliveries answered with success, by distinct delivery id, in order."""
        with self.lock:
            attempts = [d for d in self.attempts if 200 <= d.status < 300]
        seen: dict[str, Delivery] = {}
        for delivery in attempts:
            seen.setdefault(delivery.headers["X-Approvals-Delivery"], delivery)
        return list(seen.values())

    def accepted_ids(self) -> list[int]:
        """Delivery ids of every success, duplicates included, in the order they arrived."""
        with self.lock:
            return [int(d.headers["X-Approvals-Delivery"]) for d in self.attempts if 200 <= d.status < 300]

    def events(self) -> list[dict[str, Any]]:
        return [d.event for d in self.accepted]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving(Receiver()) as running:
        yield running


class serving:  # noqa: N801 - used like a function: `with serving(Receiver(...)) as r`
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.receiver.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self.receiver

    def __exit__(self, *exc: object) -> None:
        self.receiver.server.shutdown()
        self.receiver.server.server_close()


@asynccontextmanager
async def delivering(web: WebApp, urls: list[str], secret: str | None = SECRET, **options: Any) -> AsyncIterator[None]:
    """Run the deliverer for `urls` beside the app until the block ends."""
    context = web.app.state.context
    settings = context.settings.model_copy(update={"webhook_urls": urls, "webhook_secret": secret})
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        await group.start(
            functools.partial(deliver_webhooks, dataclasses.replace(context, settings=settings), stop, **options)
        )
        yield
        stop.set()


async def failed_run(store: Store, error: str) -> str:
    """A run that fails at once: one `run.failed` event."""
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE)
    assert await store.runs.claim("w1", run_id=run_id) is not None
    await store.runs.finish(run_id, "w1", [], error=error)
    return run_id


async def cursor_of(web: WebApp, url: str) -> WebhookCursorRow | None:
    return await WebhookCursors(web.store.outbound).get(endpoint_key(url))


async def paused_run(web: WebApp, tmp_path: Path, agent: str = "shop") -> str:
    run_id = await web.store.runs.start_run(agent, "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    assert (await web.app.state.context.service.resume_now(run_id)).status == "awaiting_approval"
    return run_id


async def test_pending_calls_and_a_completed_run_are_posted_once_each_and_signed(
    web: WebApp, tmp_path: Path, receiver: Receiver
) -> None:
    earlier = await paused_run(web, tmp_path, agent="mailer")  # before the deliverer starts: not sent
    async with delivering(web, [receiver.url], backoff=0.05):
        run_id = await paused_run(web, tmp_path)
        await eventually(lambda: len(receiver.accepted) == 2)
        calls = {c.tool_name: c for c in await web.store.calls.run_calls(run_id)}
        pending = sorted(receiver.events(), key=lambda e: e["tool"])
        assert [(e["event"], e["tool"], e["call_id"]) for e in pending] == [
            ("call.pending", "delete_customer", calls["delete_customer"].id),
            ("call.pending", "refund", calls["refund"].id),
        ]
        assert all(e["run_id"] == run_id and e["agent"] == "shop" for e in pending)
        assert pending[1]["args"] == {"order_id": "A-1", "amount": "450"}
        assert pending[1]["args_digest"] == calls["refund"].args_digest

        await web.store.calls.decide(calls["refund"].id, Approve(), actor=Actor("alice", "reviewer"))
        await web.store.calls.decide(calls["delete_customer"].id, Approve(), actor=Actor("alice", "reviewer"))
        await web.store.calls.decide(calls["delete_customer"].id, Approve(), actor=Actor("bob", "reviewer"))
        assert (await web.app.state.context.service.resume_now(run_id)).status == "completed"
        await eventually(lambda: len(receiver.accepted) == 3)
        completed = receiver.events()[2]
        assert completed["event"] == "run.completed" and completed["run_id"] == run_id
        assert "refunded 450" in completed["output"]
        await anyio.sleep(0.5)  # decisions and the resume woke the deliverer several times more
    assert len(receiver.attempts) == 3  # nothing sent twice, nothing retried
    assert all(d.signed for d in receiver.attempts)
    assert earlier not in {e["run_id"] for e in receiver.events()}
    first = receiver.attempts[0].headers
    assert first["Content-Type"] == "application/json" and first["X-Approvals-Event"] == "call.pending"
    assert int(first["X-Approvals-Timestamp"]) == pytest.approx(time.time(), abs=60)


async def test_a_failed_run_is_posted(web: WebApp, receiver: Receiver) -> None:
    async with delivering(web, [receiver.url]):
        run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE)
        assert await web.store.runs.claim("w1", run_id=run_id) is not None
        await web.store.runs.finish(run_id, "w1", [], error="the model went away")
        await eventually(lambda: len(receiver.accepted) == 1)
    [failed] = receiver.events()
    assert failed == {
        **failed,
        "event": "run.failed",
        "run_id": run_id,
        "agent": "shop",
        "error": "the model went away",
    }
    assert receiver.attempts[0].signed


async def test_a_failing_receiver_gets_retries_with_backoff_until_it_accepts(web: WebApp, tmp_path: Path) -> None:
    with serving(Receiver(statuses=lambda attempt: 503 if attempt <= 2 else 204)) as flaky:
        async with delivering(web, [flaky.url], backoff=0.2):
            run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE)
            await web.store.runs.claim("w1", run_id=run_id)
            started = time.monotonic()
            await web.store.runs.finish(run_id, "w1", [], error="boom")
            await eventually(lambda: len(flaky.attempts) == 3)
            took = time.monotonic() - started
    ids = {d.headers["X-Approvals-Delivery"] for d in flaky.attempts}
    assert len(ids) == 1  # the same delivery, tried three times
    assert all(d.signed and d.body == flaky.attempts[0].body for d in flaky.attempts)
    assert took >= 0.2 + 0.4 - 0.05  # backoff doubled between tries


async def test_a_dead_receiver_is_retried_without_end_and_holds_up_only_its_own_url(web: WebApp) -> None:
    with serving(Receiver(statuses=lambda attempt: 500)) as broken, serving(Receiver()) as healthy:
        async with delivering(web, [broken.url, healthy.url], backoff=0.01, max_backoff=0.05):
            first = await failed_run(web.store, "first")
            await failed_run(web.store, "second")
            await eventually(lambda: len(broken.attempts) >= 8 and len(healthy.accepted) == 2)
            cursor = await cursor_of(web, broken.url)
    assert [e["error"] for e in healthy.events()] == ["first", "second"]
    tried = {d.event["run_id"] for d in broken.attempts}
    assert tried == {first}  # its second event waits behind the first, in order
    assert cursor is not None and cursor.failures >= 7 and cursor.last_error == "HTTP 500"  # 8 tries, 1 maybe in flight
    assert cursor.last_event_id < int(broken.attempts[0].headers["X-Approvals-Delivery"])


async def test_a_receiver_that_refuses_an_event_is_not_retried(web: WebApp) -> None:
    with serving(Receiver(statuses=lambda attempt: 400 if attempt == 1 else 204)) as refusing:
        async with delivering(web, [refusing.url], backoff=0.01):
            refused = await failed_run(web.store, "boom")
            await eventually(lambda: len(refusing.attempts) == 1)
            await failed_run(web.store, "later")  # the cursor moved past the refused event
            await eventually(lambda: len(refusing.attempts) == 2)
            await anyio.sleep(0.3)
            cursor = await cursor_of(web, refusing.url)
    assert len(refusing.attempts) == 2
    assert [d.event["error"] for d in refusing.attempts] == ["boom", "later"]
    refused_id = int(refusing.attempts[0].headers["X-Approvals-Delivery"])
    assert cursor is not None and cursor.last_error == f"event {refused_id} (run.failed) refused: HTTP 400"
    [record] = [e for e in (await web.store.audit.audit_events(run_id=refused)).items if e.action == "webhook.refused"]
    assert record.details == {
        "event": "run.failed",
        "event_id": refused_id,
        "site": "http://127.0.0.1",
        "problem": "HTTP 400",
    }
    assert (await web.store.audit.verify_audit()).ok


async def test_an_unreachable_receiver_does_not_stop_delivery_elsewhere(web: WebApp, receiver: Receiver) -> None:
    with serving(Receiver()) as gone:
        url = gone.url
    async with delivering(web, [url, receiver.url], backoff=0.01):
        run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE)
        await web.store.runs.claim("w1", run_id=run_id)
        await web.store.runs.finish(run_id, "w1", [], error="boom")
        await eventually(lambda: len(receiver.accepted) == 1)


async def test_a_slow_receiver_blocks_neither_other_receivers_nor_requests(web: WebApp, receiver: Receiver) -> None:
    with serving(Receiver(delay=60.0)) as slow:  # answers long after the test has ended (a daemon thread)
        async with delivering(web, [slow.url, receiver.url], shutdown_grace=0.1):
            run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE)
            await web.store.runs.claim("w1", run_id=run_id)
            await web.store.runs.finish(run_id, "w1", [], error="boom")
            await eventually(lambda: len(receiver.accepted) == 1 and len(slow.attempts) == 1)
            async with web.api("viewer") as api:
                assert (await api.get(f"/api/runs/{run_id}")).json()["status"] == "failed"
            assert slow.answered == 0  # delivered and answered while the slow receiver still holds its request


async def test_without_a_secret_events_are_sent_unsigned(web: WebApp, receiver: Receiver) -> None:
    async with delivering(web, [receiver.url], secret=None):
        run_id = await web.store.runs.start_run("shop", "go", actor=SERVICE)
        await web.store.runs.claim("w1", run_id=run_id)
        await web.store.runs.finish(run_id, "w1", [], error="boom")
        await eventually(lambda: len(receiver.accepted) == 1)
    assert "X-Approvals-Signature" not in receiver.attempts[0].headers


async def test_the_app_delivers_webhooks_when_urls_are_configured(
    db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    settings = Settings(
        database_url=db_url, worker=True, secret_key="s", webhook_urls=[receiver.url], webhook_secret=SECRET
    )
    app = create_app(settings, registry=AgentRegistry([shop_agent, email_agent]))
    async with app.router.lifespan_context(app):
        await anyio.sleep(0.3)  # the deliverer has read the log's head
        store = app.state.context.store
        run_id = await store.runs.start_run("mailer", "go", actor=SYSTEM, deps={"log": str(tmp_path / "log")})
        await eventually(lambda: len(receiver.accepted) == 1)  # the in-process worker paused it
    [pending] = receiver.events()
    assert pending["event"] == "call.pending" and pending["run_id"] == run_id and pending["tool"] == "send_email"
    assert pending["args"] == {"to": "ann@example.com", "body": "Hello"}
    assert receiver.attempts[0].signed


async def test_cancelled_runs_and_calls_whose_outcome_is_unknown_are_posted(
    web: WebApp, tmp_path: Path, receiver: Receiver
) -> None:
    crashed, interrupted, cancelled = [await paused_run(web, tmp_path) for _ in range(3)]
    for run_id in (crashed, interrupted):
        calls = {c.tool_name: c for c in await web.store.calls.run_calls(run_id)}
        await web.store.calls.decide(calls["refund"].id, Approve(), actor=Actor("alice", "reviewer"))
        await web.store.calls.decide(calls["delete_customer"].id, Deny(reason="no"), actor=Actor("alice", "reviewer"))
    refund = {
        r: next(c for c in await web.store.calls.run_calls(r) if c.tool_name == "refund")
        for r in (crashed, interrupted)
    }

    async with delivering(web, [receiver.url], backoff=0.05):
        # a worker dies while the refund runs: whoever claims the run next cannot know whether it happened
        assert await web.store.runs.claim("w1", run_id=crashed, lease_seconds=0.2) is not None
        await anyio.sleep(0.3)
        assert await Store(web.store.db).runs.claim("rescuer", run_id=crashed) is None
        # a run fails while its refund runs
        assert await web.store.runs.claim("w2", run_id=interrupted) is not None
        await web.store.runs.finish(interrupted, "w2", [], error="the worker lost its model")
        await web.store.runs.cancel_run(cancelled, actor=Actor("ada", "admin"), reason="the customer withdrew")
        await eventually(lambda: len(receiver.accepted) == 4)

    unknown_1, unknown_2, failed, stopped = receiver.events()
    assert unknown_1 == {
        **unknown_1,
        "event": "call.outcome_unknown",
        "run_id": crashed,
        "agent": "shop",
        "call_id": refund[crashed].id,
        "tool": "refund",
    }
    assert "may or may not have happened" in unknown_1["reason"]
    assert unknown_2 == {
        **unknown_2,
        "event": "call.outcome_unknown",
        "run_id": interrupted,
        "call_id": refund[interrupted].id,
        "tool": "refund",
        "error": "the worker lost its model",
    }
    assert (failed["event"], failed["run_id"]) == ("run.failed", interrupted)
    assert stopped == {
        **stopped,
        "event": "run.cancelled",
        "run_id": cancelled,
        "agent": "shop",
        "reason": "the customer withdrew",
        "cancelled_by": "ada",
    }
    assert [d.headers["X-Approvals-Event"] for d in receiver.accepted] == [
        "call.outcome_unknown",
        "call.outcome_unknown",
        "run.failed",
        "run.cancelled",
    ]
    assert all(d.signed for d in receiver.attempts)


async def test_a_receiver_that_was_down_gets_everything_afterwards_in_order(web: WebApp, receiver: Receiver) -> None:
    down = True
    with serving(Receiver(statuses=lambda attempt: 503 if down else 204)) as flaky:
        async with delivering(web, [flaky.url, receiver.url], backoff=0.02, max_backoff=0.1):
            runs = [await failed_run(web.store, f"error {i}") for i in range(5)]
            await eventually(lambda: len(receiver.accepted) == 5 and len(flaky.attempts) >= 12)  # down for long
            assert flaky.accepted == []
            tried_while_down = {d.headers["X-Approvals-Delivery"] for d in flaky.attempts}
            assert len(tried_while_down) == 1  # the first event, again and again: the others wait behind it
            down = False
            await eventually(lambda: len(flaky.accepted) == 5)
            await anyio.sleep(0.3)
    assert [e["run_id"] for e in flaky.events()] == runs == [e["run_id"] for e in receiver.events()]
    assert flaky.accepted_ids() == sorted(set(flaky.accepted_ids()))  # each once, in the log's order
    tried = [int(d.headers["X-Approvals-Delivery"]) for d in flaky.attempts]
    assert tried == sorted(tried)  # nothing later was tried before an earlier one got through


async def test_events_while_no_app_runs_are_delivered_after_a_restart(
    db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    settings = Settings(
        database_url=db_url, worker=False, secret_key="s", webhook_urls=[receiver.url], webhook_secret=SECRET
    )
    database = Database(db_url)
    store = Store(database)
    try:
        before = await failed_run(store, "before the URL was configured")  # not sent: the URL did not exist yet
        async with running_app(settings) as app:
            await eventually_has_cursor(app.state.context.store, receiver.url)
            during = await failed_run(app.state.context.store, "while the app ran")
            await eventually(lambda: len(receiver.accepted) == 1)
        while_down = [await failed_run(store, f"while nothing ran {i}") for i in range(3)]
        await anyio.sleep(0.2)
        assert len(receiver.accepted) == 1
        async with running_app(settings):
            await eventually(lambda: len(receiver.accepted) == 4, seconds=30)
            await anyio.sleep(0.3)
    finally:
        await database.dispose()
    assert [e["run_id"] for e in receiver.events()] == [during, *while_down]
    assert before not in {e["run_id"] for e in receiver.events()}
    assert len(receiver.attempts) == 4


async def test_two_app_instances_on_one_database_deliver_each_event_once_in_total(
    db_url: str, receiver: Receiver
) -> None:
    settings = Settings(
        database_url=db_url, worker=False, secret_key="s", webhook_urls=[receiver.url], webhook_secret=SECRET
    )
    first_stop, second_stop = anyio.Event(), anyio.Event()
    stores: list[Store] = []

    async def serve(stop: anyio.Event, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with running_app(settings) as app:
            stores.append(app.state.context.store)
            await eventually_has_cursor(app.state.context.store, receiver.url)
            task_status.started()
            await stop.wait()

    async with anyio.create_task_group() as group:
        await group.start(serve, first_stop)
        await group.start(serve, second_stop)
        runs = [await failed_run(stores[i % 2], f"error {i}") for i in range(6)]
        await eventually(lambda: len(receiver.accepted) == 6, seconds=30)
        first_stop.set()  # one app stops (maybe the one delivering): the other carries on
        runs += [await failed_run(stores[1], f"later {i}") for i in range(3)]
        await eventually(lambda: len(receiver.accepted) == 9, seconds=30)
        await anyio.sleep(1.0)
        second_stop.set()
    assert [e["run_id"] for e in receiver.events()] == runs
    assert len(receiver.attempts) == 9  # once each, in total


async def test_a_dead_deliverers_lease_is_taken_over_only_when_it_expires(web: WebApp, receiver: Receiver) -> None:
    cursors = WebhookCursors(web.store.outbound)
    endpoint = endpoint_key(receiver.url)
    await cursors.open(endpoint, "http://127.0.0.1")
    assert await cursors.take(endpoint, "a-process-that-dies") is not None  # held for 30 s, never released
    run_id = await failed_run(web.store, "boom")
    async with delivering(web, [receiver.url], poll_interval=0.05):
        await anyio.sleep(0.5)
        assert receiver.attempts == []  # the holder's lease still runs
        async with web.store.db.write() as session:  # time passes: the dead holder's lease runs out
            await session.execute(
                update(WebhookCursorRow)
                .where(WebhookCursorRow.endpoint == endpoint)
                .values(lease_expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
            )
        await eventually(lambda: len(receiver.accepted) == 1)
        cursor = await cursors.get(endpoint)
        assert cursor is not None and cursor.lease_owner not in (None, "a-process-that-dies")
    assert receiver.events()[0]["run_id"] == run_id
    cursor = await cursors.get(endpoint)
    assert cursor is not None and cursor.lease_owner is None  # handed back on stop
    assert cursor.last_event_id >= receiver.events()[0]["id"]


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings, registry=AgentRegistry([shop_agent, email_agent]))
    async with app.router.lifespan_context(app):
        yield app


async def eventually_has_cursor(store: Store, url: str) -> None:
    """The app's deliverer has given the URL its cursor: events from now on are delivered."""
    cursors = WebhookCursors(store.outbound)
    with anyio.fail_after(10):
        while await cursors.get(endpoint_key(url)) is None:
            await anyio.sleep(0.02)


class Served:
    """`approvals serve` in its own process, delivering webhooks to `url` from the database at `db_url`."""

    def __init__(self, name: str, db_url: str, url: str, tmp_path: Path) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("APPROVALS_")}
        self.env.update(
            APPROVALS_DATABASE_URL=db_url,
            APPROVALS_WEBHOOK_URLS=json.dumps([url]),
            APPROVALS_WEBHOOK_SECRET=SECRET,
            APPROVALS_SECRET_KEY="served-secret",
            PYTHONUNBUFFERED="1",
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port = free_port()
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "approvals.cli", "serve", "--port", str(port), "--no-worker"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_answering(self.process, f"http://127.0.0.1:{port}/login", self.log, seconds=120)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process)
            log = self.log.read_text()
            assert log.rstrip().endswith(f"Finished server process [{self.process.pid}]"), log[-3000:]  # a clean stop
        self.process = None


def make_failed_runs(db_url: str, errors: list[str]) -> list[str]:
    """Runs that fail at once, made by this (test) process: the served ones hear of them by notification or poll."""

    async def make() -> list[str]:
        database = Database(db_url)
        try:
            return [await failed_run(Store(database), error) for error in errors]
        finally:
            await database.dispose()

    return anyio.run(make)


def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> None:
    eventually_sync(check, "the served processes' deliveries", seconds=seconds)


def test_two_served_processes_with_a_restart_deliver_every_event_once_in_order(
    db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    first, second = (Served(name, db_url, receiver.url, tmp_path) for name in ("first", "second"))
    try:
        first.start()
        second.start()
        runs = make_failed_runs(db_url, ["both up 1", "both up 2"])
        wait_for(lambda: len(receiver.accepted) == 2)

        first.stop()  # a restart in the middle: events while it is down go through the other process
        runs += make_failed_runs(db_url, ["first down 1", "first down 2"])
        first.start()
        wait_for(lambda: len(receiver.accepted) == 4)

        second.stop()  # whichever delivered, the one left takes over
        runs += make_failed_runs(db_url, ["second down"])
        wait_for(lambda: len(receiver.accepted) == 5)

        first.stop()  # nothing runs: these wait in the log
        runs += make_failed_runs(db_url, ["none up 1", "none up 2"])
        second.start()
        first.start()
        wait_for(lambda: len(receiver.accepted) == 7)
        time.sleep(1.0)
    finally:
        first.stop()
        second.stop()
    assert [e["run_id"] for e in receiver.events()] == runs
    assert receiver.accepted_ids() == sorted(set(receiver.accepted_ids()))  # once each, in order
    assert len(receiver.attempts) == 7 and all(d.signed for d in receiver.attempts)


async def test_database_errors_while_delivering_lose_nothing_and_mark_nothing_undelivered(
    web: WebApp, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = {"events_after": 1, "advance": 1}

    def just_delivered(args: tuple[Any, ...]) -> bool:
        """The cursor is to move to the event the receiver just accepted (not over events that make no webhook)."""
        return bool(receiver.accepted_ids()) and args[1] == receiver.accepted_ids()[-1]

    def failing_once(name: str, when: Callable[[tuple[Any, ...]], bool] = lambda args: True) -> Callable[..., Any]:
        original = getattr(WebhookCursors, name)

        async def method(self: WebhookCursors, *args: Any, **kwargs: Any) -> Any:
            if failures[name] > 0 and when(args):
                failures[name] -= 1
                raise OperationalError("SELECT 1", {}, Exception("the database went away"))
            return await original(self, *args, **kwargs)

        return method

    async with delivering(web, [receiver.url], poll_interval=0.05):
        monkeypatch.setattr(WebhookCursors, "events_after", failing_once("events_after"))
        monkeypatch.setattr(WebhookCursors, "advance", failing_once("advance", when=just_delivered))
        runs = [await failed_run(web.store, f"error {i}") for i in range(3)]
        await eventually(lambda: len(receiver.accepted) == 3)
        await anyio.sleep(0.3)
        cursor = await cursor_of(web, receiver.url)
    assert failures == {"events_after": 0, "advance": 0}
    assert [e["run_id"] for e in receiver.events()] == runs
    ids = receiver.accepted_ids()
    assert ids[0] == ids[1] and ids[1:] == sorted(set(ids))  # the first, sent again: its cursor write failed
    assert cursor is not None and cursor.last_event_id >= ids[-1]


async def test_a_url_with_a_secret_of_its_own_gets_deliveries_signed_with_it(
    web: WebApp, tmp_path: Path, receiver: Receiver
) -> None:
    context = web.app.state.context
    settings = context.settings.model_copy(
        update={"webhook_urls": [receiver.url], "webhook_secret": SECRET, "webhook_secrets": {receiver.url: "own"}}
    )
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        await group.start(functools.partial(deliver_webhooks, dataclasses.replace(context, settings=settings), stop))
        await paused_run(web, tmp_path)
        await eventually(lambda: len(receiver.accepted) >= 1)
        stop.set()
    delivery = receiver.accepted[0]
    assert not delivery.signed, "not with the shared secret"
    verify_webhook(delivery.body, delivery.headers, "own")


async def test_readyz_reports_webhook_delivery_and_a_failing_receiver_leaves_the_app_ready(db_url: str) -> None:
    with serving(Receiver(statuses=lambda attempt: 503)) as broken:
        settings = Settings(
            database_url=db_url, worker=False, secret_key="s", webhook_urls=[broken.url], webhook_secret=SECRET
        )
        async with running_app(settings) as app:
            await eventually_has_cursor(app.state.context.store, broken.url)
            await failed_run(app.state.context.store, "boom")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                with anyio.fail_after(30):
                    while (ready := await client.get("/readyz")).json()["deliverer"]["failing"] != 1:
                        await anyio.sleep(0.05)
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready"
    assert body["deliverer"]["destinations"] == 1 and body["deliverer"]["states"] == {"retrying": 1}
    assert body["background"]["webhooks"]["state"] == "running"
    # no sites, no error texts ("503" as a word: a timestamp's microseconds may hold those digits)
    assert "127.0.0.1" not in ready.text and not re.search(r"\b503\b", ready.text)


async def test_reminders_and_escalations_are_webhook_events_too(
    web: WebApp, tmp_path: Path, receiver: Receiver
) -> None:
    """An on-call pager can follow calls nobody decides: `call.reminded`, then `call.escalated` with its groups."""
    async with delivering(web, [receiver.url], backoff=0.05):
        run_id = await paused_run(web, tmp_path, agent="mailer")
        [call] = await web.store.calls.run_calls(run_id)
        await eventually(lambda: len(receiver.accepted) == 1)
        assert await web.store.outbound.follow_up(call.id, Step.REMIND, due_at=utcnow())
        assert await web.store.outbound.follow_up(call.id, Step.ESCALATE, due_at=utcnow(), groups=["oncall"])
        await eventually(lambda: len(receiver.accepted) == 3)
    reminded, escalated = receiver.events()[1:]
    assert (reminded["event"], reminded["call_id"], reminded["tool"]) == ("call.reminded", call.id, call.tool_name)
    assert (escalated["event"], escalated["call_id"], escalated["groups"]) == ("call.escalated", call.id, ["oncall"])
    assert all(d.signed for d in receiver.attempts)
