"""The audit log: append-only events, each chained to the one before by a SHA-256 hash.

Events are written inside the transaction of the state change they describe, so the log
never disagrees with the data. Appends are serialized (an advisory lock on PostgreSQL,
`BEGIN IMMEDIATE` on SQLite) so the chain has no forks. `verify_audit_chain` recomputes
every hash: an edited event, or a deleted or reordered one, breaks the chain at that row.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Connection, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls import clock
from ..calls.canonical import canonical_json, legacy_canonical_json
from .models import AuditEventRow

__all__ = (
    "GENESIS_HASH",
    "AuditEvent",
    "CallNames",
    "AuditVerification",
    "call_event",
    "run_event",
    "event_content",
    "event_hash",
    "server_event",
    "verify_audit_chain",
)

GENESIS_HASH = "0" * 64
AUDIT_LOCK_KEY = 7_310_512_001
"""Any constant: names the PostgreSQL advisory lock that serializes appends to the chain."""
_VERIFY_BATCH = 2_000


def event_content(event: AuditEventRow | AuditEvent, *, serialize: Callable[[Any], str] = canonical_json) -> str:
    """The canonical JSON an event's hash covers (everything but its id and the hashes)."""
    return serialize({**event_fields(event), "at": event.at.astimezone(dt.UTC).isoformat()})


def event_hash(prev_hash: str, event: AuditEventRow | AuditEvent) -> str:
    """The hash of an event: the previous event's hash, then the event's content."""
    return hashlib.sha256((prev_hash + event_content(event)).encode()).hexdigest()


def _hashed_before_numbers_were_normalized(prev_hash: str, row: AuditEventRow) -> bool:
    """Whether `row` holds the hash of its content in the form used before numbers were normalized.

    Events written on SQLite before then were hashed over `1e+16` and `-0.0`, which SQLite
    keeps as written. Either form is a fixed function of the row, so accepting both lets
    no edit through: a changed row matches neither.
    """
    content = event_content(row, serialize=legacy_canonical_json)
    return content != event_content(row) and hashlib.sha256((prev_hash + content).encode()).hexdigest() == row.hash


@dataclass(frozen=True)
class AuditEvent:
    """An event to be chained and written at the end of its transaction."""

    actor: str
    action: str
    subject_type: str
    subject_id: str
    run_id: str | None = None
    agent_name: str | None = None
    tool_name: str | None = None
    details: dict[str, Any] | None = None
    at: dt.datetime = field(default_factory=lambda: clock.now())


class CallNames(Protocol):
    """What an event about a call reads of it: a `ToolCallRow`, or a row of those columns."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def tool_name(self) -> str: ...


def call_event(
    actor: str, action: str, call: CallNames, details: dict[str, Any] | None = None, *, at: dt.datetime | None = None
) -> AuditEvent:
    """An event about a call: its run, agent and tool come from the row, so no event names them wrong."""
    return AuditEvent(
        actor,
        action,
        "call",
        call.id,
        run_id=call.run_id,
        agent_name=call.agent_name,
        tool_name=call.tool_name,
        details=details,
        at=at or clock.now(),
    )


def run_event(
    actor: str,
    action: str,
    run_id: str,
    agent_name: str,
    details: dict[str, Any] | None = None,
    *,
    at: dt.datetime | None = None,
) -> AuditEvent:
    """An event about a run, naming its agent."""
    return AuditEvent(
        actor,
        action,
        "run",
        run_id,
        run_id=run_id,
        agent_name=agent_name,
        details=details,
        at=at or clock.now(),
    )


def event_fields(event: AuditEventRow | AuditEvent) -> dict[str, Any]:
    """The event's columns but its id and hashes, all of them, so a batch of events is one INSERT."""
    return {
        "at": event.at,
        "actor": event.actor,
        "action": event.action,
        "subject_type": event.subject_type,
        "subject_id": event.subject_id,
        "run_id": event.run_id,
        "agent_name": event.agent_name,
        "tool_name": event.tool_name,
        "details": event.details,
    }


def server_event(event: AuditEvent) -> tuple[Any, ...]:
    """`event` as the PostgreSQL hot path's `approvals_audit_append` takes it, after the head it extends.

    The server hashes `details_text`, the canonical JSON made here, so both paths hash the
    same bytes (JSONB would store the details normalized, `event_content` covers that).
    """
    at = event.at.astimezone(dt.UTC)
    return at, at.isoformat(), event.actor, event.run_id, event.agent_name, event_document(event)


class _EventParts(Protocol):
    @property
    def action(self) -> str: ...
    @property
    def subject_type(self) -> str: ...
    @property
    def subject_id(self) -> str: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def details(self) -> dict[str, Any] | None: ...


def event_document(event: _EventParts) -> dict[str, Any]:
    """What the hot path's SQL reads of an event: its parts, and its details' canonical text, which it hashes."""
    return {
        "action": event.action,
        "subject_type": event.subject_type,
        "subject_id": event.subject_id,
        "tool_name": event.tool_name,
        "details": event.details,
        "details_text": None if event.details is None else canonical_json(event.details),
    }


AUDIT_HEAD = select(AuditEventRow.hash).order_by(AuditEventRow.id.desc()).limit(1)
"""The hash of the chain's last event (none before the first)."""
INSERT_AUDIT_EVENTS = insert(AuditEventRow)


def chain(prev_hash: str, events: list[AuditEvent]) -> list[dict[str, Any]]:
    """Rows for `events`, each hashed over the one before, the first over `prev_hash`."""
    rows = []
    for event in events:
        row_hash = event_hash(prev_hash, event)
        rows.append({**event_fields(event), "prev_hash": prev_hash, "hash": row_hash})
        prev_hash = row_hash
    return rows


def write_chained(connection: Connection, events: list[AuditEvent]) -> None:
    """Chain and insert events in Python, as the transaction's last statements (SQLite's way).

    The chain has one head, so appends are serialized: here by SQLite's write lock (`BEGIN
    IMMEDIATE`). PostgreSQL grows the chain in the server instead (`backends.postgres.chain_and_wake`)
    over the same content (`event_content`, `event_document`).
    """
    if not events:
        return
    prev = connection.scalar(AUDIT_HEAD) or GENESIS_HASH
    connection.execute(INSERT_AUDIT_EVENTS, chain(prev, events))


@dataclass(frozen=True)
class AuditVerification:
    """The result of checking the whole chain."""

    ok: bool
    checked: int
    """Events checked."""
    head_hash: str
    """Hash of the last event: keep a copy elsewhere to detect a truncated tail later."""
    first_bad_id: int | None = None
    problem: str | None = None


async def verify_audit_chain(
    session: AsyncSession, signature_ok: Callable[[str, bytes], bool] | None = None
) -> AuditVerification:
    """Recompute every event's hash and link, oldest first, in batches: from the genesis, or from the signed
    checkpoint at the newest archive cut (`audit_cuts.chain_start`; `signature_ok` checks its signature)."""
    from .audit_cuts import chain_start  # issue 39 D: retention (it reads the tables, not this module)

    start = await chain_start(session, signature_ok)
    if start.problem is not None:
        return AuditVerification(False, 0, start.hash, first_bad_id=start.first_bad_id, problem=start.problem)
    prev_hash = start.hash
    checked = 0
    last_id = start.event_id
    while True:
        rows = (
            await session.scalars(
                select(AuditEventRow).where(AuditEventRow.id > last_id).order_by(AuditEventRow.id).limit(_VERIFY_BATCH)
            )
        ).all()
        if not rows:
            return AuditVerification(ok=True, checked=checked, head_hash=prev_hash)
        for row in rows:
            if row.prev_hash != prev_hash:
                return AuditVerification(
                    ok=False,
                    checked=checked,
                    head_hash=prev_hash,
                    first_bad_id=row.id,
                    problem=f"event {row.id} does not follow the event before it (an event was deleted or reordered)",
                )
            if event_hash(prev_hash, row) != row.hash and not _hashed_before_numbers_were_normalized(prev_hash, row):
                return AuditVerification(
                    ok=False,
                    checked=checked,
                    head_hash=prev_hash,
                    first_bad_id=row.id,
                    problem=f"event {row.id} was changed after it was written",
                )
            prev_hash = row.hash
            checked += 1
            last_id = row.id
