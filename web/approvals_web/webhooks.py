"""Webhooks: a signed POST to each configured URL when calls need a person and when runs end.

The audit log is the outbox. Every state change writes its audit events in its own
transaction, and appends commit in id order, so following the log by id sees each change
exactly once, in order, whichever process made it. Each URL has a cursor in the database
(`approvals.store.outbox`): the id of the last event it got. A new URL starts at the log's
head; after that nothing is lost: events from while no app ran are sent when one starts.

However many web processes run, one delivers to a URL at a time: the holder of the
cursor's lease, which renews it while it delivers and hands it back when it stops (another
process takes over a dead holder's URL once its lease expires). The cursor moves only
after the receiver accepted an event (2xx) or refused it for good (another 4xx: logged,
recorded on the cursor and in the audit log as `webhook.refused`, and passed over).
Network errors, timeouts, 408, 429 and 5xx are retried with exponential backoff for as
long as it takes, and the URL's later events wait behind them, so each URL gets its events
in order; other URLs have their own cursors and carry on. A receiver can still see an event
twice (its answer was lost, or a holder stalled past its lease): it drops those by
`X-Approvals-Delivery`, the audit event's id.

Bodies are JSON; receivers check `X-Approvals-Signature`, the HMAC-SHA256 of
`"{X-Approvals-Timestamp}.{body}"` under the shared secret (`approvals.security.sign_payload`).
The store's notifier channels only wake deliverers up; a missed wake-up costs at most
`poll_interval` seconds (with SQLite, changes made by other processes are found that way).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream

from approvals.exceptions import LeaseLost
from approvals.security import sign_payload
from approvals.store import PENDING_CHANNEL, RUNS_CHANNEL, Store
from approvals.store.models import AuditEventRow
from approvals.store.outbox import WEBHOOKS_CHANNEL, CursorLease, WebhookCursors

from .context import AppContext
from .settings import webhook_site

__all__ = ("EVENTS", "SendResult", "WebhookEvent", "deliver_webhooks", "endpoint_key", "event_for", "send_event")

logger = logging.getLogger("approvals.webhooks")

EVENTS = {
    "call.requested": "call.pending",
    "call.outcome_unknown": "call.outcome_unknown",
    "run.completed": "run.completed",
    "run.failed": "run.failed",
    "run.cancelled": "run.cancelled",
}
"""Audit actions that make a webhook event, and the event's name: calls that wait for a person, runs that end."""
_PROCESS = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
"""This process, in lease owners: with the app's store, a deliverer restarted in the same app keeps its leases."""
_RETRY_STATUSES = frozenset({408, 429})
_BATCH = 200


@dataclass(frozen=True)
class WebhookEvent:
    """One event, ready to send to every URL."""

    id: int
    """The audit event's id: the same for every retry and every process, so receivers can drop duplicates."""
    name: str
    body: bytes


def event_for(row: AuditEventRow) -> WebhookEvent | None:
    """The webhook event an audit event stands for, if any."""
    name = EVENTS.get(row.action)
    if name is None:
        return None
    details: dict[str, Any] = row.details or {}
    payload: dict[str, Any] = {"event": name, "id": row.id, "at": row.at.isoformat(), "run_id": row.run_id}
    payload["agent"] = row.agent_name
    if name == "call.pending":
        payload.update(
            call_id=row.subject_id, tool=row.tool_name, args=details.get("args"), args_digest=details.get("args_digest")
        )
    elif name == "call.outcome_unknown":
        # a worker died (reason) or the run failed (error) while the call ran: a person must say what happened
        payload.update(
            call_id=row.subject_id, tool=row.tool_name, reason=details.get("reason"), error=details.get("error")
        )
    elif name == "run.completed":
        payload["output"] = details.get("output")
    elif name == "run.cancelled":
        payload.update(reason=details.get("reason"), cancelled_by=row.actor)
    else:
        payload["error"] = details.get("error")
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return WebhookEvent(id=row.id, name=name, body=body)


def endpoint_key(url: str) -> str:
    """The URL's cursor key: its SHA-256, since URLs often carry a token that has no place in the database."""
    return hashlib.sha256(url.encode()).hexdigest()


class SendResult(enum.Enum):
    """What one POST came to."""

    ACCEPTED = "accepted"
    """2xx: delivered."""
    REFUSED = "refused"
    """Another 4xx (or a redirect): final, trying again would not help."""
    FAILED = "failed"
    """Network error, timeout, 408, 429 or 5xx: try again later."""


async def send_event(
    client: httpx.AsyncClient, url: str, event: WebhookEvent, secret: str | None
) -> tuple[SendResult, str]:
    """POST one event once; the result and, unless accepted, what went wrong."""
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "approvals-webhooks",
        "X-Approvals-Event": event.name,
        "X-Approvals-Delivery": str(event.id),
        "X-Approvals-Timestamp": timestamp,
    }
    if secret:
        headers["X-Approvals-Signature"] = sign_payload(secret, event.body, timestamp)
    try:
        response = await client.post(url, content=event.body, headers=headers)
    except httpx.HTTPError as exc:
        return SendResult.FAILED, f"{type(exc).__name__}: {exc}"
    if response.is_success:
        return SendResult.ACCEPTED, ""
    problem = f"HTTP {response.status_code}"
    if response.status_code < 500 and response.status_code not in _RETRY_STATUSES:
        return SendResult.REFUSED, problem
    return SendResult.FAILED, problem


async def deliver_webhooks(
    context: AppContext,
    stop: anyio.Event,
    *,
    backoff: float = 1.0,
    max_backoff: float = 300.0,
    request_timeout: float = 10.0,
    poll_interval: float = 5.0,
    lease_seconds: float = 30.0,
    shutdown_grace: float = 2.0,
    owner: str | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver webhook events until `stop` is set; `task_status` is started once every URL has its cursor.

    `lease_seconds` is how long another process waits to take over the URLs of one that
    died; a POST must fit in well under it (`request_timeout`). On `stop`, a POST under way
    gets `shutdown_grace` seconds to finish before the URLs are handed back. The lease owner
    names this process and the app's store, so run one deliverer per app at a time (a
    restarted one takes its predecessor's leases back at once).
    """
    settings = context.settings
    if not settings.webhook_urls:
        task_status.started()
        return
    if request_timeout >= lease_seconds / 2:
        raise ValueError("request_timeout must be under half of lease_seconds: a POST must end while the lease holds")
    for url in settings.webhook_urls:
        if not settings.secret_for_webhook(url):  # allowed by APPROVALS_WEBHOOK_ALLOW_UNSIGNED only
            logger.warning("webhooks to %s are sent unsigned: its receiver cannot trust them", webhook_site(url))
    cursors = WebhookCursors(context.store, lease_seconds=lease_seconds)
    owner = owner or f"{_PROCESS}:{id(context.store):x}"
    urls = list(dict.fromkeys(settings.webhook_urls))
    await _open_cursors(cursors, urls, stop, poll_interval)
    task_status.started()
    changes, released = _Wakeup(), _Wakeup()
    options = _Options(backoff, max_backoff, request_timeout, poll_interval, lease_seconds, shutdown_grace)
    client = httpx.AsyncClient(timeout=request_timeout, follow_redirects=False)
    async with client, anyio.create_task_group() as listening:
        listening.start_soon(_listen, context.store, changes, released, poll_interval)
        async with anyio.create_task_group() as deliverers:
            for url in urls:
                deliverer = _Deliverer(url, owner, cursors, client, settings.secret_for_webhook(url), stop, options)
                deliverers.start_soon(deliverer.run, changes, released)
        listening.cancel_scope.cancel()


@dataclass(frozen=True)
class _Options:
    backoff: float
    max_backoff: float
    request_timeout: float
    poll_interval: float
    lease_seconds: float
    shutdown_grace: float


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
    """`stop` was set while this deliverer held its URL."""


class _Deliverer:
    """One URL: waits for its lease, then sends the log's events after its cursor, one by one, in order."""

    def __init__(
        self,
        url: str,
        owner: str,
        cursors: WebhookCursors,
        client: httpx.AsyncClient,
        secret: str | None,
        stop: anyio.Event,
        options: _Options,
    ) -> None:
        self.url = url
        self.endpoint = endpoint_key(url)
        self.site = webhook_site(url)
        self.owner = owner
        self.cursors = cursors
        self.client = client
        self.secret = secret
        self.stop = stop
        self.options = options

    async def run(self, changes: _Wakeup, released: _Wakeup) -> None:
        """Until `stop`: take the URL's lease when it is free, deliver while holding it; survive database outages."""
        options = self.options
        while not self.stop.is_set():
            try:
                woken = released.current()
                lease = await self.cursors.take(self.endpoint, self.owner)
                if lease is None:  # another process delivers; take over when it stops or its lease expires
                    await _wait(woken, self.stop, options.poll_interval)
                    continue
                logger.info("webhooks: delivering to %s from event %d", self.site, lease.last_event_id)
                await self._hold(lease, changes)
            except LeaseLost as exc:  # another process took the URL over, or its cursor row is gone
                logger.warning("webhooks: %s", exc)
                await self._reopen()
            except Exception:
                logger.exception(
                    "webhooks: delivery to %s failed; trying again in %.0fs", self.site, options.poll_interval
                )
                await _wait(anyio.Event(), self.stop, options.poll_interval)
                await self._reopen()

    async def _hold(self, lease: CursorLease, changes: _Wakeup) -> None:
        """Deliver while holding the lease; on `stop`, a POST under way gets `shutdown_grace`, then the lease ends."""
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
                    logger.warning("webhooks: could not hand %s back; it is free when its lease expires", self.site)

    async def _deliver(self, holder: _Holder, changes: _Wakeup) -> None:
        options = self.options
        while not self.stop.is_set():
            woken = changes.current()
            rows, read_to = await self.cursors.events_after(holder.lease.last_event_id, list(EVENTS), limit=_BATCH)
            for row in rows:
                event = event_for(row)
                if event is not None:
                    await self._send(holder, row, event)
            if read_to > holder.lease.last_event_id:
                holder.lease = await self.cursors.advance(holder.lease, read_to)
            if not rows:
                await _wait(woken, self.stop, min(options.poll_interval, options.lease_seconds / 3))
                await self._keep(holder, options.lease_seconds * 2 / 3)

    async def _send(self, holder: _Holder, row: AuditEventRow, event: WebhookEvent) -> None:
        """Send one event until the receiver accepts or refuses it; the cursor then moves to it."""
        options = self.options
        while True:
            if self.stop.is_set():
                raise _Stopped
            await self._keep(holder, options.request_timeout + options.lease_seconds / 3)
            result, problem = await send_event(self.client, self.url, event, self.secret)
            if result is SendResult.ACCEPTED:
                holder.lease = await self.cursors.advance(holder.lease, event.id)
                return
            if result is SendResult.REFUSED:
                logger.error(
                    "webhook %s #%s to %s refused: %s; not sent again", event.name, event.id, self.site, problem
                )
                holder.lease = await self.cursors.refused(holder.lease, row, event.name, self.site, problem)
                return
            holder.lease = await self.cursors.failed(holder.lease, problem)
            failures = holder.lease.failures
            delay = min(options.backoff * 2 ** min(failures - 1, 60), options.max_backoff)
            logger.warning(
                "webhook %s #%s to %s failed (%s, %d times); trying again in %.1fs",
                event.name,
                event.id,
                self.site,
                problem,
                failures,
                delay,
            )
            await self._sleep(holder, delay)

    async def _sleep(self, holder: _Holder, seconds: float) -> None:
        """Back off while keeping the lease, so the URL's later events stay behind this one."""
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

    async def _reopen(self) -> None:
        """After an error: make sure the URL still has its cursor (a deleted row starts again at the log's head)."""
        try:
            await self.cursors.open(self.endpoint, self.site)
        except Exception:
            logger.debug("webhooks: cursor for %s not checked; the database is still unreachable", self.site)


@dataclass
class _Holder:
    lease: CursorLease
    """The lease as last written: every write returns the next one."""


async def _open_cursors(cursors: WebhookCursors, urls: Sequence[str], stop: anyio.Event, poll_interval: float) -> None:
    """Give every URL a cursor, retrying while the database is unreachable (until `stop`)."""
    while not stop.is_set():
        try:
            for url in urls:
                await cursors.open(endpoint_key(url), webhook_site(url))
            return
        except Exception:
            logger.exception("webhooks: cannot reach the database; trying again in %.0fs", poll_interval)
            await _wait(anyio.Event(), stop, poll_interval)


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
                "webhooks: listening for changes failed; polling, and listening again in %.0fs", poll_interval
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
