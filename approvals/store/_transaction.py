"""One store operation's transaction: its session, and the wake-ups and audit events its end sends."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from .audit import AuditEvent

SessionT = TypeVar("SessionT", AsyncSession, Connection)


class Transaction(Generic[SessionT]):
    """A store operation's session, with announcements and audit events for its end.

    Most operations hold an `AsyncSession` (`StoreBase.transaction`). A run's hot-path
    writes and decisions are plain statements over a `Connection` (`StoreBase.run_statements`):
    on SQLite the whole transaction runs in one worker-thread hop. Writes are functions over
    it (`_run_writes`, `decisions`); it only collects what its end must do.
    """

    def __init__(self, session: SessionT) -> None:
        self.session: SessionT = session
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    def record(self, event: AuditEvent) -> None:
        """Record an event made by `call_event` or `run_event`; it is chained when the transaction ends."""
        self.events.append(event)

    def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )
