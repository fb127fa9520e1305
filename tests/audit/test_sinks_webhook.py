"""The webhook sink against a real local HTTP server, and signed checkpoints to syslog and a webhook.

On SQLite and PostgreSQL: every event POSTed once, in chain order, signed like our webhooks;
an answer that is not 2xx (a 500, even a 400) is tried again, never skipped; checkpoints
made by the checkpointer reach rsyslog and the webhook, and a sink's place in them survives.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from approvals.audit.checkpoints import CheckpointConfig, Checkpointer
from approvals.audit.signing import SigningKey
from approvals.audit.sinks import Sink, SyslogSinkSettings, WebhookSinkSettings, event_document
from approvals.audit.sinks_syslog import SyslogSink
from approvals.audit.sinks_webhook import WebhookSink
from approvals.audit.stream import AuditStreamHealth
from approvals.audit.stream_checkpoints import CheckpointsTo
from approvals.channels.webhook_signature import verify_webhook
from approvals.store import Store
from approvals.store.audit_sinks import checkpoint_seq

from ..eventually import eventually
from .rsyslog import RSYSLOGD, Rsyslog
from .test_syslog_rsyslog import rows, streaming, write

pytestmark = pytest.mark.anyio
SECRET = "audit-webhook-secret"


class Receiver:
    """A local HTTP server that records each POST (headers, body) and answers from a script of statuses."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []
        """Statuses to answer next, first first; 200 once empty."""
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    if status == 200:
                        receiver.posts.append((dict(self.headers.items()), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/siem/audit?token=abc"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def documents(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def webhook(receiver: Receiver) -> WebhookSink:
    return WebhookSink(WebhookSinkSettings(url=receiver.url, secret=SECRET, name="siem-webhook"))


async def test_every_event_is_posted_signed_once_in_chain_order(store: Store, receiver: Receiver) -> None:
    await write(store, 3)
    async with streaming(store, [webhook(receiver)]):
        await write(store, 9, start=3)
        want = [e.id for e in await rows(store)]
        await eventually(lambda: [d["id"] for d in receiver.documents()] == want or None)
    events = await rows(store)
    assert receiver.documents() == [event_document(e).body for e in events]
    for (headers, body), event in zip(receiver.posts, events, strict=True):
        verify_webhook(body, headers, SECRET)  # signed the way every webhook of approvals is
        assert headers["X-Approvals-Delivery"] == str(event.id)
        assert headers["X-Approvals-Event"] == "audit.event"
    assert "token" not in (await rows(store))[0].details.__repr__()


async def test_a_failing_receiver_is_retried_never_skipped_even_on_a_4xx(store: Store, receiver: Receiver) -> None:
    health = AuditStreamHealth()
    receiver.answers = [500, 503, 400, 404]  # a webhook channel would pass over the 400: an audit copy may not
    async with streaming(store, [webhook(receiver)], health=health):
        await write(store, 4)
        want = [e.id for e in await rows(store)]
        await eventually(lambda: [d["id"] for d in receiver.documents()] == want or None)
    assert receiver.answers == []
    assert health.sinks()["siem-webhook"]["failures"] == 0
    assert health.sinks()["siem-webhook"]["delivered"] == 4


@pytest.mark.skipif(shutil.which(RSYSLOGD) is None, reason="needs rsyslogd: apt-get install rsyslog")
async def test_signed_checkpoints_reach_syslog_and_the_webhook_and_each_sinks_place_is_kept(
    store: Store, receiver: Receiver, tmp_path: Path
) -> None:
    rsyslog = Rsyslog(tmp_path / "rsyslog")
    rsyslog.start()
    try:
        syslog = SyslogSink(SyslogSinkSettings(host="127.0.0.1", port=rsyslog.port, tls=False))
        sinks: list[Sink] = [syslog, webhook(receiver)]
        to = [CheckpointsTo(store, sink) for sink in sinks]
        key = SigningKey.generate()
        checkpointer = Checkpointer(store.db, key, CheckpointConfig(every_events=5), sinks=to)
        await write(store, 6)
        [first] = await checkpointer.make()
        await write(store, 5, start=6)
        [second] = await checkpointer.make()
        for sink in to:
            assert await sink.last_seq() == 2
            assert await checkpoint_seq(store.db, sink.name) == 2
        [hook_first, hook_second] = receiver.documents()
        assert [hook_first["seq"], hook_second["seq"]] == [1, 2]
        assert hook_second["statement"] == second.statement and hook_second["signature"] == second.signature
        assert key.public.verify(hook_first["signature"], hook_first["statement"].encode())
        received = await eventually(lambda: rsyslog.received() if len(rsyslog.received()) == 2 else None)
        assert [m["msgid"] for m in received] == ["audit.checkpoint", "audit.checkpoint"]
        assert [m["params"]["seq"] for m in received] == ["1", "2"]
        assert received[1]["params"]["hash"] == second.event_hash
        assert received[0]["body"]["statement"] == first.statement
        assert (received[0]["facility"], received[0]["severity"]) == ("13", "5")  # log audit, notice
        await checkpointer.make()  # nothing new: nothing sent again
        assert len(receiver.documents()) == 2
        for sink in to:
            await sink.aclose()
    finally:
        rsyslog.stop()
