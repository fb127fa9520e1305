"""The audit log's reads: events by filter, the log's head, and the chain verified end to end.

`AuditLog` is the aggregate (`Store.audit`). Events are written by the operations that change
state, each in its own transaction (`Transaction.record`); the chain is `audit.py`'s.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select

from ._base import StoreBase
from .audit import AuditVerification, verify_audit_chain
from .models import AuditEventRow
from .queries import Page, decode_cursor, encode_cursor, page_of

__all__ = ("AuditLog",)


class AuditLog(StoreBase):
    """Reading and verifying the audit log."""

    async def audit_events(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        agent_name: str | None = None,
        tool_name: str | None = None,
        run_id: str | None = None,
        subject_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> Page[AuditEventRow]:
        """Audit events matching every given filter."""
        limit = max(1, min(limit, 10_000))
        order = AuditEventRow.id.desc() if newest_first else AuditEventRow.id
        query = select(AuditEventRow).order_by(order).limit(limit + 1)
        for column, value in (
            (AuditEventRow.actor, actor),
            (AuditEventRow.action, action),
            (AuditEventRow.agent_name, agent_name),
            (AuditEventRow.tool_name, tool_name),
            (AuditEventRow.run_id, run_id),
            (AuditEventRow.subject_id, subject_id),
        ):
            if value:
                query = query.where(column == value)
        if since:
            query = query.where(AuditEventRow.at >= since)
        if until:
            query = query.where(AuditEventRow.at < until)
        if after:
            (last_id,) = decode_cursor(after, [int])
            query = query.where(AuditEventRow.id < last_id if newest_first else AuditEventRow.id > last_id)
        async with self.db.read() as session:
            rows = list((await session.scalars(query)).all())
        return page_of(rows, limit, lambda r: encode_cursor(r.id))

    async def last_audit_event_id(self) -> int:
        """The id of the newest audit event; 0 while the log is empty."""
        async with self.db.read() as session:
            return await session.scalar(select(func.max(AuditEventRow.id))) or 0

    async def verify_audit(self) -> AuditVerification:
        """Check the audit log's hash chain end to end."""
        async with self.db.read() as session:
            return await verify_audit_chain(session)
