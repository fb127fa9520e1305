"""The durable deliverer with a channel made in the test (no HTTP), on SQLite and PostgreSQL.

In order, at least once, its cursor survives a restart, one deliverer per destination at a
time (the lease), a failing destination is backed off and resumes, refusals are passed over
and recorded.
"""

from __future__ import annotations

import functools
import itertools
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from approvals.calls.actors import SYSTEM_ACTOR_ID
from approvals.channels import Channel, DeliveryFailed, DeliveryRefused
from approvals.store import Database, Store
from approvals.store.models import AuditEventRow, WebhookCursorRow
from approvals.store.outbox import WebhookCursors
from approvals.worker import Deliverer, DelivererHealth

from ..eventually import eventually

pytestmark = pytest.mark.anyio

PING = "test.ping"
"""The audit action the test channel delivers; it passes over every other."""
FAST: dict[str, Any] = {"poll_interval": 0.05, "backoff": 0.02, "max_backoff": 0.1}
"""No wake-ups come for the test's events (they announce nothing), so deliverers poll often."""


def fast(store: Store, *channels: Channel, **options: Any) -> Deliverer:
    """A deliverer that polls often and backs off briefly, unless `options` say otherwise."""
    return Deliverer(store, channels, **{**FAST, **options})


class Log:
    """What every channel object of one destination saw, across deliverers."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []
        """(which deliverer, event id) for every attempt, in the order they began."""
        self.accepted: list[int] = []
        """Event ids the destination accepted, duplicates included, in order."""
        self.in_flight = 0
        self.most_in_flight = 0

    def attempted(self) -> list[int]:
        return [event_id for _, event_id in self.attempts]


class RecordingChannel:
    """A `Channel` that records deliveries; `outcome(attempt)` (counted per destination) may raise to fail one."""

    kind = "test"
    actions: Collection[str] | None = None

    def __init__(
        self,
        log: Log,
        *,
        name: str = "one",
        destination_id: str = "test:destination",
        outcome: Callable[[int], Exception | None] = lambda attempt: None,
        seconds: float = 0.0,
        actions: Collection[str] | None = None,
    ) -> None:
        self.log = log
        self.name = name
        self.destination_id = destination_id
        self.site = f"test://{destination_id}"
        self.outcome = outcome
        self.seconds = seconds
        self.actions = actions

    def wants(self, event: AuditEventRow) -> bool:
        return event.action == PING

    def event_name(self, event: AuditEventRow) -> str:
        return f"ping {(event.details or {}).get('n')}"

    async def deliver(self, event: AuditEventRow) -> None:
        log = self.log
        log.in_flight += 1
        log.most_in_flight = max(log.most_in_flight, log.in_flight)
        try:
            log.attempts.append((self.name, event.id))
            await anyio.sleep(self.seconds)
            problem = self.outcome(len(log.attempts))
            if problem is not None:
                raise problem
            log.accepted.append(event.id)
        finally:
            log.in_flight -= 1


async def write(store: Store, *actions: str) -> list[int]:
    """One audit event per action, each in its own transaction; their ids."""
    ids: list[int] = []
    for n, action in enumerate(actions):
        async with store.runs.transaction() as tx:
            tx.audit(SYSTEM_ACTOR_ID, action, "test", f"event-{n}", details={"n": n})
        just_written = (AuditEventRow.action == action, AuditEventRow.subject_id == f"event-{n}")
        async with store.db.read() as session:  # not the newest event: a running deliverer may have written since
            ids.append(await session.scalar(select(func.max(AuditEventRow.id)).where(*just_written)) or 0)
    return ids


async def pings(store: Store, count: int) -> list[int]:
    return await write(store, *[PING] * count)


@asynccontextmanager
async def delivering(deliverer: Deliverer) -> AsyncIterator[anyio.Event]:
    """Run `deliverer` until the block ends; yields its stop event, which the block may set earlier."""
    stop = anyio.Event()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(deliverer.run, stop))
            try:
                yield stop
            finally:
                stop.set()


async def cursor(store: Store, destination_id: str = "test:destination") -> WebhookCursorRow:
    row = await WebhookCursors(store.outbound).get(destination_id)
    assert row is not None
    return row


async def test_events_are_delivered_once_each_in_order_and_the_others_passed_over(store: Store) -> None:
    log = Log()
    await pings(store, 2)  # before the destination had a cursor: not sent
    deliverer = fast(store, RecordingChannel(log))
    async with delivering(deliverer):
        wanted = await write(store, PING, "test.other", PING, "test.other", "test.other", PING)
        await eventually(lambda: len(log.accepted) == 3)
        await anyio.sleep(0.2)
        health = deliverer.health.destinations["test:destination"]
        assert (health.state, health.delivered, health.failures) == ("delivering", 3, 0)
    assert log.accepted == log.attempted() == [wanted[0], wanted[2], wanted[5]]
    row = await cursor(store)
    assert row.last_event_id == wanted[-1] and row.failures == 0
    assert row.lease_owner is None, "handed back on stop"
    assert row.site == "test://test:destination"
    assert health.state == "stopped"


async def test_the_log_is_read_with_the_channels_actions_in_batches(store: Store) -> None:
    log = Log()
    channel = RecordingChannel(log, actions={PING})
    async with delivering(fast(store, channel, batch=3)):
        wanted = await write(store, *[PING, "test.other"] * 5)
        await eventually(lambda: len(log.accepted) == 5)
    assert log.accepted == wanted[::2]
    assert (await cursor(store)).last_event_id >= wanted[-2]


async def test_the_cursor_survives_a_restart_and_nothing_is_sent_twice(db_url: str) -> None:
    log = Log()
    first = Store(Database(db_url))
    try:
        async with delivering(fast(first, RecordingChannel(log, name="first"))):
            sent = await pings(first, 2)
            await eventually(lambda: len(log.accepted) == 2)
        while_down = await pings(first, 3)  # nothing delivers: they wait in the log
        await anyio.sleep(0.2)
        assert len(log.accepted) == 2
    finally:
        await first.db.dispose()

    second = Store(Database(db_url))  # a new process, as far as the database can tell
    try:
        async with delivering(fast(second, RecordingChannel(log, name="second"))):
            await eventually(lambda: len(log.accepted) == 5)
            later = await pings(second, 1)
            await eventually(lambda: len(log.accepted) == 6)
            await anyio.sleep(0.2)
    finally:
        await second.db.dispose()
    assert log.accepted == [*sent, *while_down, *later]
    assert log.attempts == [("first", i) for i in sent] + [("second", i) for i in [*while_down, *later]]


async def test_an_event_whose_cursor_write_failed_is_sent_again_at_least_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log()
    advance = WebhookCursors.advance
    failures = [1]

    async def failing_once(self: WebhookCursors, lease: Any, to_id: int) -> Any:
        if failures[0] and log.accepted and to_id == log.accepted[-1]:
            failures[0] -= 1
            raise OperationalError("UPDATE webhook_cursors", {}, Exception("the database went away"))
        return await advance(self, lease, to_id)

    monkeypatch.setattr(WebhookCursors, "advance", failing_once)
    deliverer = fast(store, RecordingChannel(log))
    async with delivering(deliverer):
        ids = await pings(store, 3)
        await eventually(lambda: len(log.accepted) == 4)
        await anyio.sleep(0.2)
    assert failures == [0]
    assert log.accepted == [ids[0], *ids]  # the first again (its cursor did not move), then in order
    assert (await cursor(store)).last_event_id == ids[-1]


async def test_two_deliverers_on_one_database_never_deliver_a_destination_at_once(db_url: str) -> None:
    log = Log()
    stores = [Store(Database(db_url)) for _ in range(2)]  # two processes, as far as the database can tell
    deliverers = [
        fast(s, RecordingChannel(log, name=name, seconds=0.01)) for s, name in zip(stores, ("a", "b"), strict=True)
    ]
    try:
        async with delivering(deliverers[0]) as stop_a, delivering(deliverers[1]) as stop_b:
            ids = await pings(stores[0], 10)
            await eventually(lambda: len(log.accepted) == 10)
            states = {d.health.destinations["test:destination"].state for d in deliverers}
            assert states == {"delivering", "standby"}
            holder = {name for name, _ in log.attempts}
            assert len(holder) == 1, "one of them delivered everything"
            # the holder stops (hands the destination back): the other takes over
            (stop_a if holder == {"a"} else stop_b).set()
            ids += await pings(stores[1], 5)
            await eventually(lambda: len(log.accepted) == 15)
            await anyio.sleep(0.2)
    finally:
        for s in stores:
            await s.db.dispose()
    assert log.most_in_flight == 1
    assert log.accepted == log.attempted() == ids  # once each, in order, across the handover
    assert {name for name, _ in log.attempts[10:]} == {"a", "b"} - holder


async def test_a_dead_holders_destination_waits_for_its_lease_to_expire(store: Store) -> None:
    log = Log()
    cursors = WebhookCursors(store.outbound, lease_seconds=1.0)
    await cursors.open("test:destination", "test://test:destination")
    assert await cursors.take("test:destination", "a process that dies") is not None  # never renewed nor released
    ids = await pings(store, 1)
    deliverer = fast(store, RecordingChannel(log))
    async with delivering(deliverer):
        await anyio.sleep(0.4)
        assert log.attempts == []
        assert deliverer.health.destinations["test:destination"].state == "standby"
        await eventually(lambda: log.accepted == ids, seconds=5)


async def test_a_failing_destination_is_backed_off_and_resumes_in_order(store: Store) -> None:
    log = Log()
    down = True
    seen: list[tuple[int, float]] = []  # (cursor failures, time) while down

    def outcome(attempt: int) -> Exception | None:
        return DeliveryFailed("HTTP 503") if down else None

    channel = RecordingChannel(log, outcome=outcome)
    deliverer = Deliverer(store, [channel], poll_interval=0.05, backoff=0.05, max_backoff=0.4)
    async with delivering(deliverer):
        ids = await pings(store, 3)
        await eventually(lambda: len(log.attempts) >= 6)
        stamps = list(log.attempts)
        row = await cursor(store)
        seen.append((row.failures, time.monotonic()))
        health = deliverer.health.destinations["test:destination"]
        assert health.state == "retrying" and health.failures >= 5
        assert deliverer.health.summary()["failing"] == 1
        assert row.failures >= 5 and row.last_error == "HTTP 503"
        assert {event_id for _, event_id in stamps} == {ids[0]}, "the later events wait behind the first"
        down = False
        await eventually(lambda: len(log.accepted) == 3)
    assert log.accepted == ids
    row = await cursor(store)
    assert row.failures == 0 and row.last_error == "HTTP 503" and row.last_event_id == ids[-1]
    assert health.failures == 0


async def test_backoff_doubles_between_tries_up_to_its_cap(store: Store) -> None:
    log = Log()
    times: list[float] = []

    def outcome(attempt: int) -> Exception | None:
        times.append(time.monotonic())
        return DeliveryFailed("down") if attempt <= 5 else None

    deliverer = Deliverer(
        store, [RecordingChannel(log, outcome=outcome)], poll_interval=0.05, backoff=0.1, max_backoff=0.3
    )
    async with delivering(deliverer):
        ids = await pings(store, 1)
        await eventually(lambda: log.accepted == ids)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    waits = [0.1, 0.2, 0.3, 0.3, 0.3]  # doubling from `backoff`, capped at `max_backoff`
    assert len(gaps) == len(waits)
    assert all(gap >= wait * 0.9 for gap, wait in zip(gaps, waits, strict=True)), gaps
    assert gaps[-1] < 1.0, "capped: without the cap the fifth wait would be 1.6 s"


async def test_a_refused_event_is_passed_over_and_recorded(store: Store) -> None:
    log = Log()
    channel = RecordingChannel(log, outcome=lambda attempt: DeliveryRefused("HTTP 400") if attempt == 1 else None)
    async with delivering(fast(store, channel)):
        ids = await pings(store, 2)
        await eventually(lambda: len(log.accepted) == 1)
        await anyio.sleep(0.2)
    assert log.attempted() == ids and log.accepted == ids[1:]
    row = await cursor(store)
    assert row.last_error == f"event {ids[0]} (ping 0) refused: HTTP 400"
    assert row.last_event_id > ids[1], "past the refusal's own audit event too"
    [record] = [e for e in (await store.audit.audit_events(newest_first=False)).items if e.action == "test.refused"]
    assert (record.subject_type, record.subject_id) == ("test", "test:destination")
    assert record.details == {
        "event": "ping 0",
        "event_id": ids[0],
        "site": "test://test:destination",
        "problem": "HTTP 400",
    }
    assert (await store.audit.verify_audit()).ok


async def test_a_channel_bug_or_a_hung_attempt_is_tried_again_never_skipped(store: Store) -> None:
    log = Log()
    problems: dict[int, Exception] = {1: KeyError("a bug in the channel")}

    class Hanging(RecordingChannel):
        async def deliver(self, event: AuditEventRow) -> None:
            if len(self.log.attempts) == 1:  # the second attempt never ends
                self.log.attempts.append((self.name, event.id))
                await anyio.sleep_forever()
            await super().deliver(event)

    channel = Hanging(log, outcome=lambda attempt: problems.get(attempt))
    deliverer = fast(store, channel, attempt_timeout=0.3, lease_seconds=1.0)
    async with delivering(deliverer):
        ids = await pings(store, 2)
        await eventually(lambda: len(log.accepted) == 2)
    assert log.attempted() == [ids[0], ids[0], ids[0], ids[1]]
    assert log.accepted == ids
    assert (await cursor(store)).last_error == "no answer within 0.3 s"


async def test_database_errors_are_waited_out_and_reported(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log()
    events_after = WebhookCursors.events_after
    outage = anyio.Event()
    reported: list[DelivererHealth] = []

    async def unreachable(self: WebhookCursors, *args: Any, **kwargs: Any) -> Any:
        if not outage.is_set():
            raise OperationalError("SELECT", {}, ConnectionRefusedError("the database is down"))
        return await events_after(self, *args, **kwargs)

    health = DelivererHealth()
    deliverer = fast(store, RecordingChannel(log), health=health)
    async with delivering(deliverer):
        ids = await pings(store, 2)
        monkeypatch.setattr(WebhookCursors, "events_after", unreachable)
        await eventually(lambda: health.outage)
        reported.append(health)
        assert health.summary()["states"] == {"unreachable": 1}
        await anyio.sleep(0.3)
        outage.set()
        await eventually(lambda: len(log.accepted) == 2)
        await eventually(lambda: not health.outage)
    assert log.accepted == ids
    summary = health.summary()
    assert summary["destinations"] == 1 and summary["last_delivery"] is not None
    assert summary["states"] == {"stopped": 1}


async def test_destinations_have_their_own_cursors(store: Store) -> None:
    stuck, healthy = Log(), Log()
    channels = [
        RecordingChannel(stuck, destination_id="test:stuck", outcome=lambda attempt: DeliveryFailed("down")),
        RecordingChannel(healthy, destination_id="test:healthy"),
    ]
    async with delivering(fast(store, *channels)):
        ids = await pings(store, 3)
        await eventually(lambda: len(healthy.accepted) == 3 and len(stuck.attempts) >= 3)
    assert healthy.accepted == ids
    assert set(stuck.attempted()) == {ids[0]} and stuck.accepted == []
    assert (
        (await cursor(store, "test:stuck")).last_event_id
        < ids[0]
        <= (await cursor(store, "test:healthy")).last_event_id
    )


def test_a_deliverer_refuses_destinations_it_could_not_keep_apart() -> None:
    store: Any = object()  # never reached: the arguments are checked first
    log = Log()
    with pytest.raises(ValueError, match="given twice"):
        Deliverer(store, [RecordingChannel(log), RecordingChannel(log)])
    with pytest.raises(ValueError, match="1 to 64 characters"):
        Deliverer(store, [RecordingChannel(log, destination_id="x" * 65)])
    with pytest.raises(ValueError, match="under half of lease_seconds"):
        Deliverer(store, [RecordingChannel(log)], attempt_timeout=15.0, lease_seconds=30.0)


def test_the_deliverer_and_the_webhook_channel_import_without_http_client_or_web_stack() -> None:
    code = (
        "import sys; sys.modules['httpx'] = None\n"  # as without the server extra: importing it fails
        "import approvals.worker, approvals.channels, approvals.channels.webhooks\n"
        "web = {'approvals_web', 'fastapi', 'starlette', 'httpx'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in web and sys.modules[m] is not None))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
