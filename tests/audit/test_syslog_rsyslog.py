"""The audit log streamed to Debian's rsyslog, over TCP and over TLS with a test CA, on SQLite and PostgreSQL.

Each test runs its own rsyslogd (`tests/audit/rsyslog.py`), reads back what it wrote to its
file and checks it one for one against the database: every event, in chain order, with its
id, hash, actor and action in the structured data and the whole event as the message.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select

from approvals.audit.sinks import Sink, SyslogSinkSettings, event_document
from approvals.audit.sinks_syslog import SyslogSink
from approvals.audit.stream import AuditStreamHealth, stream_to
from approvals.calls.actors import SYSTEM_ACTOR_ID
from approvals.store import Store
from approvals.store.audit import AuditEvent, event_hash
from approvals.store.audit_sinks import sink_lags
from approvals.store.models import AuditEventRow

from ..eventually import eventually
from .rsyslog import RSYSLOGD, Rsyslog, make_ca

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which(RSYSLOGD) is None, reason="needs rsyslogd: apt-get install rsyslog rsyslog-gnutls"),
]

FAST: dict[str, Any] = {"poll_interval": 0.05, "backoff": 0.05, "max_backoff": 0.2, "attempt_timeout": 3.0}
"""The test's events announce nothing, so the deliverer polls often; a sink that is down is retried quickly."""


async def write(store: Store, count: int, *, start: int = 0) -> None:
    """`count` events, each in its own transaction, with details that need escaping and Unicode."""
    for n in range(start, start + count):
        async with store.runs.transaction() as tx:
            actor = 'alice "the reviewer" [ops]\\' if n % 3 == 0 else SYSTEM_ACTOR_ID
            tx.audit(actor, "call.approved", "call", f"call-{n}", details={"n": n, "note": 'Grüße ] " \\ ok'})


async def rows(store: Store) -> list[AuditEventRow]:
    async with store.db.read() as session:
        return list((await session.scalars(select(AuditEventRow).order_by(AuditEventRow.id))).all())


def first_copies(received: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with repeats dropped by event id, as a receiver would: the first copy of each."""
    seen: set[str] = set()
    kept = []
    for message in received:
        if message["params"]["id"] not in seen:
            seen.add(message["params"]["id"])
            kept.append(message)
    return kept


def check_one_for_one(received: Sequence[dict[str, Any]], events: Sequence[AuditEventRow]) -> None:
    """Every event once (repeats dropped), in chain order, each as rsyslog parsed it equal to the database's row."""
    copies = first_copies(received)
    assert [int(m["params"]["id"]) for m in copies] == [e.id for e in events]
    prev = events[0].prev_hash if events else ""
    for message, event in zip(copies, events, strict=True):
        assert message["app"] == "approvals"
        assert message["msgid"] == event.action
        assert (message["facility"], message["severity"]) == ("13", "6")  # log audit, informational
        assert message["params"] == {
            "id": str(event.id),
            "hash": event.hash,
            "actor": event.actor,
            "action": event.action,
            "subject": f"{event.subject_type}:{event.subject_id}",
        }
        assert message["body"] == event_document(event).body
        body = message["body"]
        copy = AuditEvent(
            body["actor"],
            body["action"],
            body["subject_type"],
            body["subject_id"],
            run_id=body["run_id"],
            agent_name=body["agent_name"],
            tool_name=body["tool_name"],
            details=body["details"],
            at=event.at,
        )
        assert body["prev_hash"] == prev
        assert event_hash(prev, copy) == body["hash"]  # the SIEM's copy checks against the chain on its own
        prev = body["hash"]


@asynccontextmanager
async def streaming(
    store: Store, sinks: list[Sink], health: AuditStreamHealth | None = None, **options: Any
) -> AsyncIterator[anyio.Event]:
    stop = anyio.Event()
    with anyio.fail_after(90):
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(stream_to, store, sinks, stop, health=health, **{**FAST, **options}))
            try:
                yield stop
            finally:
                stop.set()


async def received_all(rsyslog: Rsyslog, store: Store) -> list[dict[str, Any]]:
    want = [e.id for e in await rows(store)]

    def check() -> list[dict[str, Any]] | None:
        received = rsyslog.received()
        return received if [int(m["params"]["id"]) for m in first_copies(received)] == want else None

    return await eventually(check, f"rsyslog has events {want[:3]}…{want[-3:]}", seconds=30, ignoring=(ValueError,))


@pytest.fixture
def rsyslog_tcp(tmp_path: Path) -> Any:
    server = Rsyslog(tmp_path / "rsyslog")
    server.start()
    yield server
    server.stop()


def tcp_sink(server: Rsyslog) -> SyslogSink:
    return SyslogSink(SyslogSinkSettings(host="127.0.0.1", port=server.port, tls=False, hostname="approvals-test"))


async def test_every_event_reaches_rsyslog_over_tcp_one_for_one_in_chain_order(
    store: Store, rsyslog_tcp: Rsyslog
) -> None:
    await write(store, 5)  # before the sink existed: a new sink's copy starts at the beginning
    async with streaming(store, [tcp_sink(rsyslog_tcp)]):
        await write(store, 20, start=5)
        received = await received_all(rsyslog_tcp, store)
    events = await rows(store)
    assert len(events) == 25
    check_one_for_one(received, events)
    assert len(received) == len(events)  # nothing sent twice when nothing failed


async def test_a_new_sink_can_start_at_the_head(store: Store, rsyslog_tcp: Rsyslog) -> None:
    await write(store, 3)
    before = await rows(store)
    async with streaming(store, [tcp_sink(rsyslog_tcp)], start="head"):
        await write(store, 4, start=3)
        want = [e.id for e in await rows(store)][len(before) :]
        await eventually(lambda: [int(m["params"]["id"]) for m in rsyslog_tcp.received()] == want or None)


async def test_tls_with_a_test_ca_and_a_client_certificate(store: Store, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    server = Rsyslog(tmp_path / "rsyslog", tls=ca)
    server.start()
    try:
        settings = SyslogSinkSettings(
            host="127.0.0.1",
            port=server.port,
            tls=True,
            ca_file=str(ca.ca),
            cert_file=str(ca.client_cert),
            key_file=str(ca.client_key),
        )
        await write(store, 3)
        async with streaming(store, [SyslogSink(settings)]):
            await write(store, 7, start=3)
            received = await received_all(server, store)
        check_one_for_one(received, await rows(store))
    finally:
        server.stop()


async def test_a_receiver_whose_certificate_the_ca_did_not_sign_gets_nothing_and_is_shown_failing(
    store: Store, tmp_path: Path
) -> None:
    ca, other = make_ca(tmp_path / "ca"), make_ca(tmp_path / "other")
    server = Rsyslog(tmp_path / "rsyslog", tls=ca)
    server.start()
    try:
        cert, key = str(ca.client_cert), str(ca.client_key)
        wrong_ca = str(other.ca)
        settings = SyslogSinkSettings(
            host="localhost",
            port=server.port,
            ca_file=wrong_ca,
            cert_file=cert,
            key_file=key,
        )
        health = AuditStreamHealth()
        await write(store, 2)
        async with streaming(store, [SyslogSink(settings)], health=health):
            await eventually(lambda: health.sinks()["syslog"]["failures"] >= 2 or None)
            assert health.sinks()["syslog"]["state"] == "retrying"
        assert server.received() == []
        [lag] = await sink_lags(store.db)
        assert (lag.name, lag.events, lag.failures) == ("syslog", 2, lag.failures)
        assert lag.failures >= 2 and lag.seconds >= 0
    finally:
        server.stop()


async def test_a_receiver_that_is_down_then_comes_back_loses_nothing_and_order_is_kept(
    store: Store, rsyslog_tcp: Rsyslog
) -> None:
    health = AuditStreamHealth()
    async with streaming(store, [tcp_sink(rsyslog_tcp)], health=health):
        await write(store, 10)
        await received_all(rsyslog_tcp, store)
        rsyslog_tcp.stop()
        await write(store, 10, start=10)  # the first of these may go into the closing connection: sent again
        await eventually(lambda: health.sinks()["syslog"]["failures"] >= 1 or None, "the sink is retried")
        [lag] = await sink_lags(store.db)
        assert lag.events >= 1 and lag.failures >= 1
        rsyslog_tcp.start()
        received = await received_all(rsyslog_tcp, store)
        await eventually(lambda: health.sinks()["syslog"]["failures"] == 0 or None)
    check_one_for_one(received, await rows(store))
    [lag] = await sink_lags(store.db)
    assert (lag.events, lag.seconds, lag.failures) == (0, 0.0, 0)


async def test_a_restart_of_the_streaming_process_resumes_from_its_cursor(store: Store, rsyslog_tcp: Rsyslog) -> None:
    async with streaming(store, [tcp_sink(rsyslog_tcp)]):
        await write(store, 8)
        await received_all(rsyslog_tcp, store)
    await write(store, 8, start=8)  # while nothing streams
    assert len(rsyslog_tcp.received()) == 8
    async with streaming(store, [tcp_sink(rsyslog_tcp)]):  # a new process: the same sink name, the same cursor
        received = await received_all(rsyslog_tcp, store)
    check_one_for_one(received, await rows(store))
    assert len(received) == 16  # resumed after the cursor: nothing sent twice
