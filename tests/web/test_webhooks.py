"""Webhooks against a real HTTP receiver on 127.0.0.1 that checks signatures, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from approvals.resumer import AgentRegistry
from approvals.store import SYSTEM, Actor, Approve
from web.app import create_app
from web.settings import Settings
from web.webhooks import deliver_webhooks

from ..store.agents import email_agent, shop_agent
from .conftest import WebApp

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-for-tests"
SERVICE = Actor("svc", "reviewer")


@dataclasses.dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    signed: bool
    """The signature matched the body and timestamp under the shared secret."""

    @property
    def event(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data


class Receiver:
    """A webhook receiver in a thread: records every attempt, answers with `statuses` (then 204)."""

    def __init__(self, statuses: Callable[[int], int] = lambda attempt: 204, delay: float = 0.0) -> None:
        self.attempts: list[Delivery] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                timestamp = self.headers.get("X-Approvals-Timestamp", "")
                expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(expected, self.headers.get("X-Approvals-Signature", ""))
                with receiver.lock:
                    receiver.attempts.append(Delivery(dict(self.headers.items()), body, signed))
                    attempt = len(receiver.attempts)
                time.sleep(delay)
                self.send_response(statuses(attempt))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/approvals?token=secret-in-url"

    @property
    def accepted(self) -> list[Delivery]:
        """Deliveries answered with success, by distinct delivery id, in order."""
        with self.lock:
            attempts = list(self.attempts)
        seen: dict[str, Delivery] = {}
        for delivery in attempts:
            seen.setdefault(delivery.headers["X-Approvals-Delivery"], delivery)
        return list(seen.values())

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
        threading.Thread(target=self.receiver.server.serve_forever, daemon=True).start()
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


async def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.02)


async def paused_run(web: WebApp, tmp_path: Path, agent: str = "shop") -> str:
    run_id = await web.store.start_run(agent, "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    assert (await web.app.state.context.service.resume_now(run_id)).status == "awaiting_approval"
    return run_id


async def test_pending_calls_and_a_completed_run_are_posted_once_each_and_signed(
    web: WebApp, tmp_path: Path, receiver: Receiver
) -> None:
    earlier = await paused_run(web, tmp_path, agent="mailer")  # before the deliverer starts: not sent
    async with delivering(web, [receiver.url], backoff=0.05):
        run_id = await paused_run(web, tmp_path)
        await eventually(lambda: len(receiver.accepted) == 2)
        calls = {c.tool_name: c for c in await web.store.run_calls(run_id)}
        pending = sorted(receiver.events(), key=lambda e: e["tool"])
        assert [(e["event"], e["tool"], e["call_id"]) for e in pending] == [
            ("call.pending", "delete_customer", calls["delete_customer"].id),
            ("call.pending", "refund", calls["refund"].id),
        ]
        assert all(e["run_id"] == run_id and e["agent"] == "shop" for e in pending)
        assert pending[1]["args"] == {"order_id": "A-1", "amount": "450"}
        assert pending[1]["args_digest"] == calls["refund"].args_digest

        await web.store.decide(calls["refund"].id, Approve(), actor=Actor("alice", "reviewer"))
        await web.store.decide(calls["delete_customer"].id, Approve(), actor=Actor("alice", "reviewer"))
        await web.store.decide(calls["delete_customer"].id, Approve(), actor=Actor("bob", "reviewer"))
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
        run_id = await web.store.start_run("shop", "go", actor=SERVICE)
        assert await web.store.claim("w1", run_id=run_id) is not None
        await web.store.finish(run_id, "w1", [], error="the model went away")
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
        async with delivering(web, [flaky.url], backoff=0.2, attempts=4):
            run_id = await web.store.start_run("shop", "go", actor=SERVICE)
            await web.store.claim("w1", run_id=run_id)
            started = time.monotonic()
            await web.store.finish(run_id, "w1", [], error="boom")
            await eventually(lambda: len(flaky.attempts) == 3)
            took = time.monotonic() - started
    ids = {d.headers["X-Approvals-Delivery"] for d in flaky.attempts}
    assert len(ids) == 1  # the same delivery, tried three times
    assert all(d.signed and d.body == flaky.attempts[0].body for d in flaky.attempts)
    assert took >= 0.2 + 0.4 - 0.05  # backoff doubled between tries


async def test_retries_are_bounded_and_a_dead_receiver_does_not_hold_up_later_events(web: WebApp) -> None:
    with serving(Receiver(statuses=lambda attempt: 500)) as broken, serving(Receiver()) as healthy:
        async with delivering(web, [broken.url, healthy.url], backoff=0.01, attempts=3):
            for error in ("first", "second"):
                run_id = await web.store.start_run("shop", "go", actor=SERVICE)
                await web.store.claim("w1", run_id=run_id)
                await web.store.finish(run_id, "w1", [], error=error)
            await eventually(lambda: len(broken.attempts) == 6 and len(healthy.accepted) == 2)
            await anyio.sleep(0.3)
    assert len(broken.attempts) == 6  # three tries for each event, then it gave up
    assert [e["error"] for e in healthy.events()] == ["first", "second"]


async def test_a_receiver_that_refuses_an_event_is_not_retried(web: WebApp) -> None:
    with serving(Receiver(statuses=lambda attempt: 400)) as refusing:
        async with delivering(web, [refusing.url], backoff=0.01, attempts=5):
            run_id = await web.store.start_run("shop", "go", actor=SERVICE)
            await web.store.claim("w1", run_id=run_id)
            await web.store.finish(run_id, "w1", [], error="boom")
            await eventually(lambda: len(refusing.attempts) == 1)
            await anyio.sleep(0.3)
    assert len(refusing.attempts) == 1


async def test_an_unreachable_receiver_does_not_stop_delivery_elsewhere(web: WebApp, receiver: Receiver) -> None:
    with serving(Receiver()) as gone:
        url = gone.url
    async with delivering(web, [url, receiver.url], backoff=0.01, attempts=2):
        run_id = await web.store.start_run("shop", "go", actor=SERVICE)
        await web.store.claim("w1", run_id=run_id)
        await web.store.finish(run_id, "w1", [], error="boom")
        await eventually(lambda: len(receiver.accepted) == 1)


async def test_a_slow_receiver_blocks_neither_other_receivers_nor_requests(web: WebApp, receiver: Receiver) -> None:
    with serving(Receiver(delay=3.0)) as slow:
        async with delivering(web, [slow.url, receiver.url], shutdown_grace=0.1):
            run_id = await web.store.start_run("shop", "go", actor=SERVICE)
            await web.store.claim("w1", run_id=run_id)
            await web.store.finish(run_id, "w1", [], error="boom")
            started = time.monotonic()
            await eventually(lambda: len(receiver.accepted) == 1 and len(slow.attempts) == 1, seconds=2.0)
            async with web.api("viewer") as api:
                assert (await api.get(f"/api/runs/{run_id}")).json()["status"] == "failed"
            assert time.monotonic() - started < 2.0  # the slow receiver is still holding its request


async def test_without_a_secret_events_are_sent_unsigned(web: WebApp, receiver: Receiver) -> None:
    async with delivering(web, [receiver.url], secret=None):
        run_id = await web.store.start_run("shop", "go", actor=SERVICE)
        await web.store.claim("w1", run_id=run_id)
        await web.store.finish(run_id, "w1", [], error="boom")
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
        run_id = await store.start_run("mailer", "go", actor=SYSTEM, deps={"log": str(tmp_path / "log")})
        await eventually(lambda: len(receiver.accepted) == 1)  # the in-process worker paused it
    [pending] = receiver.events()
    assert pending["event"] == "call.pending" and pending["run_id"] == run_id and pending["tool"] == "send_email"
    assert pending["args"] == {"to": "ann@example.com", "body": "Hello"}
    assert receiver.attempts[0].signed
