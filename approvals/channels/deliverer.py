"""The durable deliverer: follows the audit log for each outbound destination, once, in order, through outages.

The audit log is the outbox. Every state change writes its audit events in its own
transaction, and appends commit in id order, so following the log by id sees each change
exactly once, in order, whichever process made it. Each destination (a webhook URL, later
a Slack channel or a mailbox: a `Channel`, `approvals.channels.base`) has a cursor in the
database (`approvals.store.outbox`): the id of the last event it got. A new destination
starts at the log's head; after that nothing is lost: events from while no deliverer ran
are sent when one starts.

However many processes run a deliverer (`approvals serve`, `approvals worker`, several of
each), one delivers to a destination at a time: the holder of the cursor's lease, which
renews it while it delivers and hands it back when it stops (another process takes over a
dead holder's destination once its lease expires). The cursor moves only after the
destination accepted an event or refused it for good (`DeliveryRefused`: logged, recorded
on the cursor and in the audit log as `{kind}.refused`, and passed over). Any other
failure is retried with exponential backoff for as long as it takes, and the
destination's later events wait behind it, so each destination gets its events in order;
other destinations have their own cursors and carry on. A destination can still get an
event twice (its answer was lost, or a holder stalled past its lease): at least once,
never lost.

Database outages are waited out with backoff, with one log line when one starts and one
when it ends (`approvals._outage`); `DelivererHealth` says how each destination is doing.
The store's notifier channels only wake deliverers up; a missed wake-up costs at most
`poll_interval` seconds (with SQLite, changes made by other processes are found that way).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from .._outage import Outage
from ..calls import clock
from ..exceptions import LeaseLost
from ..store import PENDING_CHANNEL, RUNS_CHANNEL, Store
from ..store.errors import describe, is_transient
from ..store.models import AuditEventRow
from ..store.outbox import WEBHOOKS_CHANNEL, CursorLease, WebhookCursors
from .base import Channel, DeliveryFailed, DeliveryRefused

__all__ = ("Deliverer", "DelivererHealth", "DestinationHealth", "DestinationState")

logger = logging.getLogger("approvals.deliverer")

_PROCESS = f"{socket.gethostname()[:100]}:{os.getpid()}:{secrets.token_hex(4)}"
"""This process, in lease owners: with the same store, a deliverer restarted in the process keeps its leases."""
_BATCH = 200
_MAX_DESTINATION_ID = 64
"""`webhook_cursors.endpoint`."""
_MAX_KIND = 20
"""The audit log's subject type, which a refusal record names the channel's kind in."""

DestinationState = Literal["starting", "delivering", "standby", "retrying", "unreachable", "stopped"]
"""starting: opening its cursor; delivering: this process holds the lease and is caught up or sending;
standby: another process holds the lease; retrying: the destination failed, backing off;
unreachable: the database cannot be reached (or the deliverer hit an error), backing off; stopped."""


@dataclass
class DestinationHealth:
    """How delivery to one destination is going, as this process sees it."""

    kind: str
    site: str
    state: DestinationState = "starting"
    last_event_id: int | None = None
    """The cursor as this process last read or wrote it; None until it held the lease."""
    failures: int = 0
    """Failed tries in a row of the event after the cursor (across processes)."""
    delivered: int = 0
    """Events this process delivered to it."""
    last_contact: dt.datetime | None = None
    """The last time delivery to it reached the database."""
    last_delivery: dt.datetime | None = None
    """The last time this process delivered an event to it."""


@dataclass
class DelivererHealth:
    """What a deliverer's destinations are doing, for health checks; it outlives restarts of the deliverer."""

    destinations: dict[str, DestinationHealth] = field(default_factory=dict)
    """By destination id."""

    @property
    def outage(self) -> bool:
        """Some destination cannot reach the database right now."""
        return any(d.state == "unreachable" for d in self.destinations.values())

    def summary(self) -> dict[str, Any]:
        """Counts and times only (no sites, no error texts): safe for an unauthenticated health endpoint."""
        destinations = list(self.destinations.values())
        states = Counter(d.state for d in destinations)
        contacts = [d.last_contact for d in destinations if d.last_contact is not None]
        deliveries = [d.last_delivery for d in destinations if d.last_delivery is not None]
        return {
            "destinations": len(destinations),
            "states": dict(sorted(states.items())),
            "failing": sum(1 for d in destinations if d.failures),
            "last_contact": max(contacts).isoformat() if contacts else None,
            "last_delivery": max(deliveries).isoformat() if deliveries else None,
        }


class Deliverer:
    """Delivers the audit log to `channels`, each through its own cursor and lease, until stopped.

    `lease_seconds` is how long another process waits to take over the destinations of one
    that died; one attempt must fit well within it, so `attempt_timeout` (after which an
    attempt is cancelled and tried again later) must be under half of it. Failed attempts
    are tried again after `backoff` seconds, doubling up to `max_backoff`. On stop, an
    attempt under way gets `shutdown_grace` seconds to finish before the destinations are
    handed back. The lease owner names this process and `store`, so run one deliverer per
    store at a time (a restarted one takes its predecessor's leases back at once); give
    deliverers sharing a store distinct `owner`s.
    """

    def __init__(
        self,
        store: Store,
        channels: Sequence[Channel],
        *,
        owner: str | None = None,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        attempt_timeout: float = 10.0,
        poll_interval: float = 5.0,
        lease_seconds: float = 30.0,
        shutdown_grace: float = 2.0,
        batch: int = _BATCH,
        health: DelivererHealth | None = None,
    ) -> None:
        if attempt_timeout >= lease_seconds / 2:
            raise ValueError(
                "attempt_timeout must be under half of lease_seconds: an attempt must end while the lease holds"
            )
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch}")
        seen: set[str] = set()
        for channel in channels:
            destination = channel.destination_id
            if not destination or len(destination) > _MAX_DESTINATION_ID:
                raise ValueError(f"destination id {destination!r}: 1 to {_MAX_DESTINATION_ID} characters")
            if destination in seen:
                raise ValueError(f"destination {destination!r} is given twice")
            if not channel.kind or len(channel.kind) > _MAX_KIND:
                raise ValueError(f"channel kind {channel.kind!r}: 1 to {_MAX_KIND} characters")
            seen.add(destination)
        self.store = store
        self.channels = list(channels)
        self.owner = owner or f"{_PROCESS}:{id(store):x}"
        self.options = _Options(
            backoff, max_backoff, attempt_timeout, poll_interval, lease_seconds, shutdown_grace, batch
        )
        self.cursors = WebhookCursors(store.outbound, lease_seconds=lease_seconds)
        self.health = health if health is not None else DelivererHealth()
        for channel in self.channels:  # a restarted deliverer carries on with its predecessor's figures
            known = self.health.destinations.get(channel.destination_id)
            if known is None:
                self.health.destinations[channel.destination_id] = DestinationHealth(channel.kind, channel.site)
            else:
                known.state = "starting"

    async def run(
        self, stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Deliver until `stop` is set; `task_status` is started once every destination has its cursor.

        Events written after that are delivered, whatever happens to this process.
        """
        try:
            if not self.channels:
                task_status.started()
                return
            await self._open_cursors(stop)
            task_status.started()
            changes, released = _Wakeup(), _Wakeup()
            async with anyio.create_task_group() as listening:
                listening.start_soon(_listen, self.store, changes, released, self.options.poll_interval)
                async with anyio.create_task_group() as destinations:
                    for channel in self.channels:
                        health = self.health.destinations[channel.destination_id]
                        destination = _Destination(channel, self.owner, self.cursors, stop, self.options, health)
                        destinations.start_soon(destination.run, changes, released)
                listening.cancel_scope.cancel()
        finally:
            for channel in self.channels:
                self.health.destinations[channel.destination_id].state = "stopped"

    async def _open_cursors(self, stop: anyio.Event) -> None:
        """Give every destination a cursor, retrying while the database is unreachable (until `stop`)."""
        outage = Outage("opening delivery cursors", logger, first_delay=min(0.25, self.options.poll_interval))
        while not stop.is_set():
            try:
                for channel in self.channels:
                    await self.cursors.open(channel.destination_id, channel.site)
                outage.succeeded()
                return
            except Exception as exc:
                if not is_transient(exc) and not outage.ongoing:
                    logger.exception("opening delivery cursors failed unexpectedly")
                for health in self.health.destinations.values():
                    health.state = "unreachable"
                await _wait(anyio.Event(), stop, outage.failed(describe(exc)))


@dataclass(frozen=True)
class _Options:
    backoff: float
    max_backoff: float
    attempt_timeout: float
    poll_interval: float
    lease_seconds: float
    shutdown_grace: float
    batch: int


class _Wakeup:
    """A wake-up for every waiter at once: take `current()` before looking, wait on it after finding nothing."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def current(self) -> anyio.Event:
        return self._event

    def wake(self) -> None:
        self._event.set()
        self._event = anyio.Event()


class _Stopped(Exception):
    """`stop` was set while this process held the destination."""


@dataclass
class _Holder:
    lease: CursorLease
    """The lease as last written: every write returns the next one."""


_Attempt = Literal["accepted", "refused", "failed"]


class _Destination:
    """One destination: waits for its lease, then delivers the log's events after its cursor, one by one, in order."""

    def __init__(
        self,
        channel: Channel,
        owner: str,
        cursors: WebhookCursors,
        stop: anyio.Event,
        options: _Options,
        health: DestinationHealth,
    ) -> None:
        self.channel = channel
        self.id = channel.destination_id
        self.kind = channel.kind
        self.site = channel.site
        self.owner = owner
        self.cursors = cursors
        self.stop = stop
        self.options = options
        self.health = health
        self.outage = Outage(
            f"{self.kind} delivery to {self.site}", logger, first_delay=min(0.25, options.poll_interval)
        )

    async def run(self, changes: _Wakeup, released: _Wakeup) -> None:
        """Until `stop`: take the lease when it is free, deliver while holding it; survive database outages."""
        options = self.options
        while not self.stop.is_set():
            try:
                woken = released.current()
                lease = await self.cursors.take(self.id, self.owner)
                self._reached_database()
                if lease is None:  # another process delivers; take over when it stops or its lease expires
                    self.health.state = "standby"
                    self.outage.succeeded()
                    await _wait(woken, self.stop, options.poll_interval)
                    continue
                logger.info("%s: delivering to %s from event %d", self.kind, self.site, lease.last_event_id)
                self.health.state = "delivering"
                self.health.last_event_id, self.health.failures = lease.last_event_id, lease.failures
                await self._hold(lease, changes)
            except LeaseLost as exc:  # another process took the destination over, or its cursor row is gone
                logger.warning("%s: %s", self.kind, exc)
                await self._reopen()
            except Exception as exc:
                transient = is_transient(exc)
                if not transient and not self.outage.ongoing:
                    logger.exception("%s: delivery to %s failed unexpectedly", self.kind, self.site)
                self.health.state = "unreachable"
                await _wait(anyio.Event(), self.stop, self.outage.failed(describe(exc)))
                await self._reopen()

    async def _hold(self, lease: CursorLease, changes: _Wakeup) -> None:
        """Deliver while holding the lease; on `stop`, an attempt under way gets `shutdown_grace` to end."""
        holder = _Holder(lease)
        error: Exception | None = None
        try:
            async with anyio.create_task_group() as group:

                async def grace_on_stop() -> None:
                    await self.stop.wait()
                    group.cancel_scope.deadline = anyio.current_time() + self.options.shutdown_grace

                group.start_soon(grace_on_stop)
                try:
                    await self._deliver(holder, changes)
                except _Stopped:
                    pass
                except Exception as exc:  # raised below as itself, not wrapped in an exception group
                    error = exc
                group.cancel_scope.cancel()
            if error is not None:
                raise error
        finally:
            with anyio.move_on_after(5.0, shield=True):
                try:
                    await self.cursors.release(holder.lease)
                except Exception:
                    logger.warning(
                        "%s: could not hand %s back; it is free when its lease expires", self.kind, self.site
                    )

    async def _deliver(self, holder: _Holder, changes: _Wakeup) -> None:
        options = self.options
        while not self.stop.is_set():
            woken = changes.current()
            rows, read_to = await self.cursors.events_after(
                holder.lease.last_event_id, self.channel.actions, limit=options.batch
            )
            self._reached_database()
            for row in rows:
                if self.channel.wants(row):
                    await self._send(holder, row)
            if read_to > holder.lease.last_event_id:
                holder.lease = await self.cursors.advance(holder.lease, read_to)
                self.health.last_event_id = read_to
            if not rows:  # caught up
                self.health.state = "delivering"
                self.outage.succeeded()
                await _wait(woken, self.stop, min(options.poll_interval, options.lease_seconds / 3))
                await self._keep(holder, options.lease_seconds * 2 / 3)

    async def _send(self, holder: _Holder, row: AuditEventRow) -> None:
        """Deliver one event until the destination accepts or refuses it; the cursor then moves to it."""
        options = self.options
        name = self.channel.event_name(row)
        while True:
            if self.stop.is_set():
                raise _Stopped
            await self._keep(holder, options.attempt_timeout + options.lease_seconds / 3)
            result, problem = await self._attempt(row, name, first=holder.lease.failures == 0)
            if result == "accepted":
                holder.lease = await self.cursors.advance(holder.lease, row.id)
                self._delivered(row.id)
                return
            if result == "refused":
                logger.error("%s %s #%s to %s refused: %s; not sent again", self.kind, name, row.id, self.site, problem)
                holder.lease = await self.cursors.refused(holder.lease, row, name, self.site, problem, kind=self.kind)
                self._delivered(row.id, counted=False)
                return
            holder.lease = await self.cursors.failed(holder.lease, problem)
            failures = holder.lease.failures
            self.health.state, self.health.failures = "retrying", failures
            delay = min(options.backoff * 2 ** min(failures - 1, 60), options.max_backoff)
            logger.warning(
                "%s %s #%s to %s failed (%s, %d times); trying again in %.1fs",
                self.kind,
                name,
                row.id,
                self.site,
                problem,
                failures,
                delay,
            )
            await self._sleep(holder, delay)

    async def _attempt(self, row: AuditEventRow, name: str, *, first: bool) -> tuple[_Attempt, str]:
        """One attempt, cut off after `attempt_timeout`; what it came to and, unless accepted, what went wrong."""
        timeout = self.options.attempt_timeout
        try:
            with anyio.move_on_after(timeout) as attempt:
                await self.channel.deliver(row)
        except DeliveryRefused as exc:
            return "refused", str(exc) or type(exc).__name__
        except DeliveryFailed as exc:
            return "failed", str(exc) or type(exc).__name__
        except Exception as exc:  # a bug in the channel: never a reason to skip an event
            if first:
                logger.error(
                    "%s %s #%s to %s: the channel failed unexpectedly", self.kind, name, row.id, self.site, exc_info=exc
                )
            return "failed", f"{type(exc).__name__}: {exc}"
        if attempt.cancelled_caught:
            return "failed", f"no answer within {timeout:g} s"
        return "accepted", ""

    async def _sleep(self, holder: _Holder, seconds: float) -> None:
        """Back off while keeping the lease, so the destination's later events stay behind this one."""
        deadline = anyio.current_time() + seconds
        while (left := deadline - anyio.current_time()) > 0:
            await _wait(anyio.Event(), self.stop, min(left, self.options.lease_seconds / 3))
            if self.stop.is_set():
                raise _Stopped
            await self._keep(holder, self.options.lease_seconds * 2 / 3)

    async def _keep(self, holder: _Holder, seconds: float) -> None:
        """Renew the lease unless it holds for `seconds` more."""
        if holder.lease.seconds_left() < seconds:
            holder.lease = await self.cursors.renew(holder.lease)
            self._reached_database()

    async def _reopen(self) -> None:
        """After an error: make sure the destination still has its cursor (a deleted row starts at the log's head)."""
        try:
            await self.cursors.open(self.id, self.site)
        except Exception:
            logger.debug("%s: cursor for %s not checked; the database is still unreachable", self.kind, self.site)

    def _reached_database(self) -> None:
        self.health.last_contact = clock.now()

    def _delivered(self, event_id: int, *, counted: bool = True) -> None:
        now = clock.now()
        health = self.health
        health.state, health.failures, health.last_event_id, health.last_contact = "delivering", 0, event_id, now
        if counted:
            health.delivered += 1
            health.last_delivery = now
        self.outage.succeeded()


async def _listen(store: Store, changes: _Wakeup, released: _Wakeup, poll_interval: float) -> None:
    """Turn the store's notifications into wake-ups until cancelled; deliverers also poll."""
    while True:
        try:
            async with (
                store.notifier.listen(PENDING_CHANNEL) as pending,
                store.notifier.listen(RUNS_CHANNEL) as runs,
                store.notifier.listen(WEBHOOKS_CHANNEL) as handed_back,
            ):
                changes.wake()  # anything may have happened while nobody listened
                released.wake()
                async with anyio.create_task_group() as group:

                    async def forward(stream: MemoryObjectReceiveStream[str], wakeup: _Wakeup) -> None:
                        async for _ in stream:
                            wakeup.wake()
                        group.cancel_scope.cancel()  # the connection ended: listen again

                    group.start_soon(forward, pending, changes)
                    group.start_soon(forward, runs, changes)
                    group.start_soon(forward, handed_back, released)
        except Exception:
            logger.warning(
                "deliverer: listening for changes failed; polling, and listening again in %.0fs", poll_interval
            )
        await anyio.sleep(poll_interval)


async def _wait(woken: anyio.Event, stop: anyio.Event, seconds: float) -> None:
    """Until `woken` or `stop` is set, or `seconds` pass."""
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as group:

            async def wake_on(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                group.cancel_scope.cancel()

            group.start_soon(wake_on, woken.wait)
            group.start_soon(wake_on, stop.wait)
