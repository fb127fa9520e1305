"""One store operation's transaction: its session, and the wake-ups and audit events its end sends."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from .audit import AuditEvent


class Transaction:
    """A store operation's SQLAlchemy session, with announcements and audit events for its end.

    Every operation runs through it on SQLite, and the rare ones on PostgreSQL too (a run's
    writes and decisions have their own fast paths there). Writes are functions over it
    (`_run_writes`, `decisions`); it only collects what its end must do.
    """

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    async def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    async def record(self, event: AuditEvent) -> None:
        """Record an event made by `call_event` or `run_event`; it is chained when the transaction ends."""
        self.events.append(event)

    async def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )
