"""Webhooks: a signed POST to each configured URL when calls need a person and when runs end.

Delivery is the durable deliverer's (`approvals.channels.deliverer`): each URL has a cursor
in the database keyed by the URL's SHA-256 (`endpoint_key`; URLs often carry a token,
which has no place in the database), gets its events once each in the audit log's order
(at least once: receivers drop rare repeats by `X-Approvals-Delivery`, the audit event's
id), and one process at a time delivers to it, however many run. This module is the
channel: which events make a webhook, their JSON bodies, and one POST.

A 2xx accepts an event. Network errors, timeouts, 408, 429 and 5xx are tried again (with
backoff, for as long as it takes); any other answer, redirects included (they are never
followed: a receiver cannot send our signed bodies elsewhere), refuses it for good.
Bodies are JSON; receivers check `X-Approvals-Signature`, the HMAC-SHA256 of
`"{X-Approvals-Timestamp}.{body}"` under the URL's secret, with
`approvals.webhook_signature.verify_webhook`.

The HTTP client is httpx, which the `server` extra installs; it is imported only when
channels are opened, so the core library imports without it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .base import DeliveryFailed, DeliveryRefused
from .webhook_signature import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook

if TYPE_CHECKING:
    import httpx

    from ..store.models import AuditEventRow

__all__ = (
    "DEFAULT_REQUEST_TIMEOUT",
    "EVENTS",
    "SendResult",
    "WebhookChannel",
    "WebhookEvent",
    "endpoint_key",
    "event_for",
    "open_webhook_channels",
    "send_event",
    "webhook_site",
)

EVENTS = {
    "call.requested": "call.pending",
    "call.reminded": "call.reminded",
    "call.escalated": "call.escalated",
    "call.outcome_unknown": "call.outcome_unknown",
    "run.completed": "run.completed",
    "run.failed": "run.failed",
    "run.cancelled": "run.cancelled",
}
"""Audit actions that make a webhook event, and the event's name: calls that wait for a person (asked, reminded,
escalated), runs that end."""
_RETRY_STATUSES = frozenset({408, 429})
DEFAULT_REQUEST_TIMEOUT = 10.0
"""Seconds a POST may take (connect, send, answer) before it is given up and tried again later."""


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
    elif name in ("call.reminded", "call.escalated"):
        # nobody decided yet: a reminder before it expires, or an escalation to more groups (who may now approve)
        payload.update(
            call_id=row.subject_id,
            tool=row.tool_name,
            groups=details.get("groups") or [],
            expires_at=details.get("expires_at"),
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


def webhook_site(url: str) -> str:
    """Scheme and host only: a webhook URL may carry a token in its path or query."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}"


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
    import httpx

    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "approvals-webhooks",
        "X-Approvals-Event": event.name,
        DELIVERY_HEADER: str(event.id),
        TIMESTAMP_HEADER: timestamp,
    }
    if secret:
        headers[SIGNATURE_HEADER] = sign_webhook(secret, event.body, timestamp)
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


class WebhookChannel:
    """One webhook URL as a channel of the durable deliverer (`approvals.channels.base.Channel`)."""

    kind = "webhook"
    actions: Collection[str] | None = frozenset(EVENTS)

    def __init__(self, url: str, secret: str | None, client: httpx.AsyncClient) -> None:
        """`client` must not follow redirects (`open_webhook_channels` makes one that does not)."""
        self.url = url
        self.secret = secret
        self.client = client
        self.destination_id = endpoint_key(url)
        self.site = webhook_site(url)

    def wants(self, event: AuditEventRow) -> bool:
        return event.action in EVENTS

    def event_name(self, event: AuditEventRow) -> str:
        return EVENTS.get(event.action, event.action)

    async def deliver(self, event: AuditEventRow) -> None:
        webhook = event_for(event)
        if webhook is None:
            return
        result, problem = await send_event(self.client, self.url, webhook, self.secret)
        if result is SendResult.REFUSED:
            raise DeliveryRefused(problem)
        if result is SendResult.FAILED:
            raise DeliveryFailed(problem)


@asynccontextmanager
async def open_webhook_channels(
    urls: Sequence[str],
    secret_for: Callable[[str], str | None],
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> AsyncIterator[list[WebhookChannel]]:
    """A channel per distinct URL, signed with `secret_for(url)` (None: unsigned), sharing one HTTP client.

    The client never follows redirects and gives up on a connect, write or read after `request_timeout`.
    """
    import httpx

    async with httpx.AsyncClient(timeout=request_timeout, follow_redirects=False) as client:
        yield [WebhookChannel(url, secret_for(url), client) for url in dict.fromkeys(urls)]
