"""Audit retention in the database: the archive's one transaction, and the reads that plan it.

Old events are archived by `approvals.audit.retention`: written to a bundle first, then deleted
here up to a signed checkpoint's head, in one transaction that also records the cut (`audit_cuts`)
and appends an `audit.archived` event naming it. Verification then starts at that cut
(`audit_cuts.chain_start`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls import clock
from ..exceptions import UserError
from ._base import StoreBase
from .audit_cuts import ARCHIVED, ChainStart, SignatureCheck, chain_start
from .models import AuditCheckpointRow, AuditCutRow, AuditEventRow, WebhookCursorRow

__all__ = ("ArchivePlan", "ArchiveRefused", "AuditRetention")


class ArchiveRefused(UserError):
    """An archive that was not done: nothing was deleted."""


@dataclass(frozen=True)
class ArchivePlan:
    """What an archive before a date would do, read before anything is written."""

    previous: AuditCutRow | None
    """The newest cut so far (events up to it are gone already)."""
    checkpoint: AuditCheckpointRow | None
    """The newest signed checkpoint whose events are all before the date: the cut to make."""
    first_event_id: int | None
    """The first event still in the database."""
    events_before: int
    """Events in the database written before the date."""
    first_late_id: int | None
    """The first event written at or after the date (the cut stays before it)."""
    lagging: list[tuple[str, int]]
    """Deliveries (site, last event delivered) that have not reached the checkpoint's head yet."""


class AuditRetention(StoreBase):
    """The cuts of the audit log, and the transaction that archives up to one."""

    async def last_cut(self) -> AuditCutRow | None:
        async with self.db.read() as session:
            return await session.scalar(select(AuditCutRow).order_by(AuditCutRow.id.desc()).limit(1))

    async def cuts(self) -> list[AuditCutRow]:
        async with self.db.read() as session:
            return list((await session.scalars(select(AuditCutRow).order_by(AuditCutRow.id))).all())

    async def start(self, signature_ok: SignatureCheck | None = None) -> ChainStart:
        async with self.db.read() as session:
            return await chain_start(session, signature_ok)

    async def plan(self, before: dt.datetime) -> ArchivePlan:
        """The cut an archive of the events before `before` would make: the newest checkpoint wholly before it."""
        async with self.db.read() as session:
            previous = await session.scalar(select(AuditCutRow).order_by(AuditCutRow.id.desc()).limit(1))
            floor = previous.event_id if previous is not None else 0
            first_late = await session.scalar(select(func.min(AuditEventRow.id)).where(AuditEventRow.at >= before))
            query = (
                select(AuditCheckpointRow)
                .where(AuditCheckpointRow.event_id > floor)
                .order_by(AuditCheckpointRow.seq.desc())
                .limit(1)
            )
            if first_late is not None:
                query = query.where(AuditCheckpointRow.event_id < first_late)
            checkpoint = await session.scalar(query)
            first = await session.scalar(select(func.min(AuditEventRow.id)).where(AuditEventRow.id > floor))
            count = await session.scalar(select(func.count()).where(AuditEventRow.at < before)) or 0
            lagging: list[tuple[str, int]] = []
            if checkpoint is not None:
                behind = await session.execute(
                    select(WebhookCursorRow.site, WebhookCursorRow.last_event_id).where(
                        WebhookCursorRow.last_event_id < checkpoint.event_id
                    )
                )
                lagging = [(site, last) for site, last in behind]
        return ArchivePlan(previous, checkpoint, first, count, first_late, lagging)

    async def archive(
        self,
        plan: ArchivePlan,
        *,
        events: int,
        actor: str,
        before: dt.datetime,
        bundle: str,
        bundle_sha256: str,
    ) -> AuditCutRow:
        """Delete the events up to the plan's checkpoint and record the cut, in one transaction.

        The `audit.archived` event is appended first: it takes the chain's lock (appends wait for
        the commit) and becomes the head, so the chain never restarts from the genesis. Then, under
        that lock, the events to delete must still be the `events` the bundle holds, ending at the
        checkpoint's head, and no other archive may have cut since the plan: otherwise nothing is deleted.
        """
        from .backend import Transaction  # the backend appends the event (SQLite in Python, PostgreSQL in SQL)

        checkpoint = plan.checkpoint
        assert checkpoint is not None
        assert plan.first_event_id is not None
        now = clock.now()
        details = {
            "checkpoint_seq": checkpoint.seq,
            "first_event_id": plan.first_event_id,
            "event_id": checkpoint.event_id,
            "event_hash": checkpoint.event_hash,
            "events": events,
            "before": before.astimezone(dt.UTC).isoformat(),
            "bundle": bundle,
            "bundle_sha256": bundle_sha256,
        }
        try:
            async with self.db.write() as session:
                tx: Transaction[AsyncSession] = Transaction(session, self.backend)
                tx.audit(actor, ARCHIVED, "audit", f"checkpoint {checkpoint.seq}", details=details, at=now)
                await self.backend.end_session(tx)
                latest = await session.scalar(select(AuditCutRow).order_by(AuditCutRow.id.desc()).limit(1))
                if (latest and latest.id) != (plan.previous and plan.previous.id):
                    raise ArchiveRefused("another archive cut the audit log meanwhile: nothing was deleted")
                held = (
                    await session.execute(
                        select(func.count(), func.min(AuditEventRow.id)).where(AuditEventRow.id <= checkpoint.event_id)
                    )
                ).one()
                head = await session.get(AuditEventRow, checkpoint.event_id)
                if tuple(held) != (events, plan.first_event_id) or head is None or head.hash != checkpoint.event_hash:
                    raise ArchiveRefused(
                        f"the events up to {checkpoint.event_id} are not the {events} the bundle holds "
                        f"(the database has {held[0]} from event {held[1]}): nothing was deleted"
                    )
                await session.execute(delete(AuditEventRow).where(AuditEventRow.id <= checkpoint.event_id))
                cut = AuditCutRow(
                    checkpoint_seq=checkpoint.seq,
                    event_id=checkpoint.event_id,
                    event_hash=checkpoint.event_hash,
                    first_event_id=plan.first_event_id,
                    events=events,
                    statement=checkpoint.statement,
                    signature=checkpoint.signature,
                    before=before,
                    at=now,
                    actor=actor,
                    bundle=bundle,
                    bundle_sha256=bundle_sha256,
                )
                session.add(cut)
                await session.flush()
        except IntegrityError:
            raise ArchiveRefused(
                f"checkpoint {checkpoint.seq} is already a cut (another archive ran): nothing was deleted"
            ) from None
        return cut
