"""Sinks outside the database that receive the audit log as it grows: syslog, a JSON webhook, and others.

A security team's SIEM should hold its own copy of "who allowed this?", so a person who can
write the `audit_events` table cannot rewrite the only copy. Each sink gets every event in
chain order, each as one JSON document (`event_document`: the row's columns with its id and
both hashes, so the receiver can check the chain itself), and the signed checkpoints
(`checkpoint_document`: the signed statement and its signature).

Delivery is the durable deliverer's (`approvals.channels.deliverer`): a sink is adapted to a
`Channel` (`SinkChannel`), so it has a cursor in the database (`webhook_cursors`, keyed
`audit-sink:<name>`), one process at a time holds it, a sink that is down is retried with
backoff for as long as it takes while later events wait behind it, and a restart resumes
after the cursor. A sink never refuses an event for good: skipping one would leave a hole
in the copy, so even an answer that looks final (an HTTP 4xx) is tried again. Delivery is
at least once: a receiver drops repeats by the event id (`SinkDocument.id`).

Checkpoints are made by `approvals.audit.checkpoints.Checkpointer`, which hands each to its
`CheckpointSink`s; `stream_checkpoints.CheckpointsTo` makes a sink one of those, its place in
the checkpoints kept in the database (`audit_sink_checkpoints`), since syslog cannot be asked.

A sink is anything with `name`, `site`, `send(document)` and `aclose()`; the syslog and
webhook sinks are `sinks_syslog.SyslogSink` and `sinks_webhook.WebhookSink`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..channels.base import DeliveryFailed
from ..store.audit_sinks import SINK_PREFIX
from ..store.models import AuditEventRow
from .checkpoints import SignedCheckpoint

__all__ = (
    "SINK_KIND",
    "AuditSinkSettings",
    "Sink",
    "SinkChannel",
    "SinkDocument",
    "SyslogSinkSettings",
    "WebhookSinkSettings",
    "checkpoint_document",
    "destination_id",
    "event_document",
)

SINK_KIND = "audit_sink"
"""The deliverer's channel kind for every sink (logs, and the cursor's `site` prefix)."""
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")


@dataclass(frozen=True, kw_only=True)
class SinkDocument:
    """One thing to deliver: an audit event or a signed checkpoint, as JSON plus what syslog's header needs."""

    kind: Literal["event", "checkpoint"]
    id: int
    """An event's id, a checkpoint's `seq`: the same across retries and processes, so receivers drop repeats by it."""
    action: str
    """The event's action (syslog's MSGID)."""
    at: dt.datetime
    params: Mapping[str, str]
    """A few facts worth indexing without parsing the body (syslog's structured data): id, hash, actor, action."""
    body: dict[str, Any]

    def json(self) -> bytes:
        """The body as compact UTF-8 JSON (keys sorted, so repeats are byte-equal)."""
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str).encode()


def event_document(row: AuditEventRow) -> SinkDocument:
    """An audit event as sinks receive it: its columns, its id and both hashes (a receiver can check the chain)."""
    at = row.at.astimezone(dt.UTC)
    body = {
        "type": "audit.event",
        "id": row.id,
        "at": at.isoformat(),
        "actor": row.actor,
        "action": row.action,
        "subject_type": row.subject_type,
        "subject_id": row.subject_id,
        "run_id": row.run_id,
        "agent_name": row.agent_name,
        "tool_name": row.tool_name,
        "details": row.details,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }
    params = {
        "id": str(row.id),
        "hash": row.hash,
        "actor": row.actor,
        "action": row.action,
        "subject": f"{row.subject_type}:{row.subject_id}",
    }
    return SinkDocument(kind="event", id=row.id, action=row.action, at=at, params=params, body=body)


def checkpoint_document(checkpoint: SignedCheckpoint) -> SinkDocument:
    """A signed checkpoint as sinks receive it: the exact signed statement and its signature (not its leaves)."""
    try:
        at = dt.datetime.fromisoformat(checkpoint.at).astimezone(dt.UTC)
    except ValueError:
        at = dt.datetime.now(dt.UTC)
    body = {
        "type": "audit.checkpoint",
        "seq": checkpoint.seq,
        "event_id": checkpoint.event_id,
        "event_hash": checkpoint.event_hash,
        "at": at.isoformat(),
        **checkpoint.document(with_leaves=False),
    }
    params = {
        "seq": str(checkpoint.seq),
        "event_id": str(checkpoint.event_id),
        "hash": checkpoint.event_hash,
        "key_id": checkpoint.key_id,
    }
    return SinkDocument(
        kind="checkpoint", id=checkpoint.seq, action="audit.checkpoint", at=at, params=params, body=body
    )


class Sink(Protocol):
    """A place outside the database that keeps a copy of the log: one attempt at sending one document."""

    @property
    def name(self) -> str:
        """The operator's name for it ("syslog", "siem-webhook"): its cursor and its label in health and metrics."""
        ...

    @property
    def site(self) -> str:
        """Where it is, for logs and the cursor table (scheme, host and port); no secret."""
        ...

    async def send(self, document: SinkDocument) -> None:
        """Deliver `document` once; raise `DeliveryFailed` (or anything) to have it tried again later."""
        ...

    async def aclose(self) -> None:
        """Close connections; the sink is not used again."""
        ...


def destination_id(name: str) -> str:
    """The sink's cursor key in `webhook_cursors.endpoint`."""
    return f"{SINK_PREFIX}{name}"


class SinkChannel:
    """A sink as a channel of the durable deliverer: every event, in chain order, never refused."""

    kind = SINK_KIND
    actions: Collection[str] | None = None

    def __init__(self, sink: Sink) -> None:
        if not _NAME.match(sink.name):
            raise ValueError(f"sink name {sink.name!r}: 1 to 41 of a-z, 0-9, '_', '.', '-', starting with a letter")
        self.sink = sink
        self.destination_id = destination_id(sink.name)
        self.site = f"{sink.name} {sink.site}"[:300]

    def wants(self, event: AuditEventRow) -> bool:
        return True

    def event_name(self, event: AuditEventRow) -> str:
        return event.action

    async def deliver(self, event: AuditEventRow) -> None:
        try:
            await self.sink.send(event_document(event))
        except DeliveryFailed:
            raise
        except OSError as exc:  # the network's errors say what is wrong without a traceback
            raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class SyslogSinkSettings:
    """A syslog receiver (rsyslog, syslog-ng, a SIEM's collector): RFC 5424 over TCP, TLS when a CA is given."""

    host: str
    port: int = 6514
    name: str = "syslog"
    tls: bool = True
    """TLS (RFC 5425), checking the receiver's certificate against `ca_file` (else the system's CAs)."""
    ca_file: str | None = None
    cert_file: str | None = None
    """A client certificate, for receivers that ask for one (rsyslog's `x509/certvalid`)."""
    key_file: str | None = field(default=None, repr=False)
    hostname: str | None = None
    """The HOSTNAME field; by default this machine's name."""
    app_name: str = "approvals"
    facility: int = 13
    """13 is "log audit" (RFC 5424, 6.2.1)."""
    sd_id: str = "approvals@32473"
    """The structured data's id: `name@<your private enterprise number>` (32473 is the one kept for examples)."""


@dataclass(frozen=True, kw_only=True)
class WebhookSinkSettings:
    """A JSON webhook: each document POSTed, signed like every webhook of approvals."""

    url: str
    secret: str | None = field(default=None, repr=False)
    name: str = "webhook"
    timeout: float = 10.0


@dataclass(frozen=True, kw_only=True)
class AuditSinkSettings:
    """Every sink of one process, and where a new sink's copy starts."""

    syslog: tuple[SyslogSinkSettings, ...] = ()
    webhooks: tuple[WebhookSinkSettings, ...] = ()
    start: Literal["beginning", "head"] = "beginning"
    """A new sink gets the whole log (`beginning`), or only events after it was added (`head`)."""

    @property
    def any(self) -> bool:
        return bool(self.syslog or self.webhooks)
