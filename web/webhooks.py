"""Webhooks: a signed POST to each configured URL when calls become pending and when runs finish.

The audit log is the source of events. Every state change writes its audit events in its
own transaction, and appends commit in id order, so following the log by id ("events
after the last one seen") sees each change exactly once, in order, whichever process made
it. The store's notifier channels only wake the follower up; a missed wake-up costs at
most `poll_interval` seconds. Delivery starts at the log's head when the app starts:
events from before (or while the app was down) are not sent.

Each URL has its own queue and sender, so a slow or failing receiver delays only itself,
and nothing here ever blocks a request. A delivery is retried with exponential backoff on
network errors, timeouts, 408, 429 and 5xx, up to `attempts` tries; other answers are
final. Bodies are JSON; receivers check `X-Approvals-Signature`, the HMAC-SHA256 of
`"{X-Approvals-Timestamp}.{body}"` under the shared secret (`approvals.security.sign_payload`),
and can drop retried duplicates by `X-Approvals-Delivery` (the audit event id).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from approvals.security import sign_payload
from approvals.store import PENDING_CHANNEL, RUNS_CHANNEL, Store
from approvals.store.models import AuditEventRow

from .context import AppContext

__all__ = ("WebhookEvent", "deliver_webhooks", "event_for", "send_event")

logger = logging.getLogger("approvals.webhooks")

EVENTS = {"call.requested": "call.pending", "run.completed": "run.completed", "run.failed": "run.failed"}
"""Audit actions that make a webhook event, and the event's name."""
_RETRY_STATUSES = frozenset({408, 429})
_MAX_BACKOFF = 300.0
_BATCH = 500


@dataclass(frozen=True)
class WebhookEvent:
    """One event, ready to send to every URL."""

    id: int
    """The audit event's id: the same for every retry, so receivers can drop duplicates."""
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
    elif name == "run.completed":
        payload["output"] = details.get("output")
    else:
        payload["error"] = details.get("error")
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return WebhookEvent(id=row.id, name=name, body=body)


async def deliver_webhooks(
    context: AppContext,
    stop: anyio.Event,
    *,
    attempts: int = 6,
    backoff: float = 1.0,
    request_timeout: float = 10.0,
    poll_interval: float = 5.0,
    shutdown_grace: float = 2.0,
    queue_size: int = 10_000,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver webhook events until `stop` is set; `task_status` is started once the log's head is known."""
    settings = context.settings
    if not settings.webhook_urls:
        task_status.started()
        return
    if not settings.webhook_secret:
        logger.warning("webhooks are sent unsigned: set APPROVALS_WEBHOOK_SECRET so receivers can trust them")
    client = httpx.AsyncClient(timeout=request_timeout, follow_redirects=False)
    async with client, anyio.create_task_group() as senders:
        queues: list[MemoryObjectSendStream[WebhookEvent]] = []
        for url in settings.webhook_urls:
            send, receive = anyio.create_memory_object_stream[WebhookEvent](max_buffer_size=queue_size)
            queues.append(send)
            senders.start_soon(_sender, client, url, receive, settings.webhook_secret, attempts, backoff)
        try:
            await _follow_log(context.store, queues, stop, poll_interval, task_status)
        finally:
            for send in queues:
                send.close()  # senders finish what is queued, for at most `shutdown_grace` seconds
            senders.cancel_scope.deadline = anyio.current_time() + shutdown_grace


async def send_event(
    client: httpx.AsyncClient, url: str, event: WebhookEvent, secret: str | None, *, attempts: int, backoff: float
) -> bool:
    """POST one event, retrying failures that may pass; True once the receiver accepted it."""
    for attempt in range(1, attempts + 1):
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
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.is_success:
                return True
            problem = f"HTTP {response.status_code}"
            if response.status_code < 500 and response.status_code not in _RETRY_STATUSES:
                logger.error("webhook %s #%s to %s refused: %s", event.name, event.id, _site(url), problem)
                return False
        if attempt < attempts:
            delay = min(backoff * 2 ** (attempt - 1), _MAX_BACKOFF)
            logger.warning(
                "webhook %s #%s to %s failed (%s); try %d of %d in %.1fs",
                event.name,
                event.id,
                _site(url),
                problem,
                attempt + 1,
                attempts,
                delay,
            )
            await anyio.sleep(delay)
    logger.error("webhook %s #%s to %s failed %d times; giving up", event.name, event.id, _site(url), attempts)
    return False


async def _sender(
    client: httpx.AsyncClient,
    url: str,
    events: MemoryObjectReceiveStream[WebhookEvent],
    secret: str | None,
    attempts: int,
    backoff: float,
) -> None:
    async with events:
        async for event in events:
            await send_event(client, url, event, secret, attempts=attempts, backoff=backoff)


async def _follow_log(
    store: Store,
    queues: Sequence[MemoryObjectSendStream[WebhookEvent]],
    stop: anyio.Event,
    poll_interval: float,
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """Queue an event for every new audit event that makes one, until `stop`; survives database outages."""
    last_id: int | None = None
    while not stop.is_set():
        try:
            async with store.notifier.listen(PENDING_CHANNEL) as pending, store.notifier.listen(RUNS_CHANNEL) as runs:
                if last_id is None:
                    last_id = await store.last_audit_event_id()
                    task_status.started()
                while not stop.is_set():
                    last_id = await _queue_new_events(store, last_id, queues)
                    await _wait_for_change((pending, runs), stop, poll_interval)
        except Exception:
            logger.exception("webhooks: reading the audit log failed; trying again in %.0fs", poll_interval)
            with anyio.move_on_after(poll_interval):
                await stop.wait()


async def _queue_new_events(store: Store, last_id: int, queues: Sequence[MemoryObjectSendStream[WebhookEvent]]) -> int:
    while True:
        rows = await store.audit_events_after(last_id, actions=list(EVENTS), limit=_BATCH)
        for row in rows:
            event = event_for(row)
            if event is None:
                continue
            for queue in queues:
                try:
                    queue.send_nowait(event)
                except anyio.WouldBlock:
                    logger.error("webhook queue full: dropped %s #%s", event.name, event.id)
        if rows:
            last_id = rows[-1].id
        if len(rows) < _BATCH:
            return last_id


async def _wait_for_change(
    streams: Sequence[MemoryObjectReceiveStream[str]], stop: anyio.Event, seconds: float
) -> None:
    """Until a notification arrives, `stop` is set, or `seconds` pass; then drop the other queued wake-ups."""
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as group:

            async def wake_on(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                group.cancel_scope.cancel()

            group.start_soon(wake_on, stop.wait)
            for stream in streams:
                group.start_soon(wake_on, stream.receive)
    for stream in streams:
        while True:
            try:
                stream.receive_nowait()
            except anyio.WouldBlock:
                break


def _site(url: str) -> str:
    """Scheme and host only: webhook URLs often carry secrets in their path or query."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}"
