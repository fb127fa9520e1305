"""The `audit_checkpoints` table and the audit-log reads checkpoints, bundles and receipts are made from.

A checkpoint is made in one write transaction that reads the last checkpoint and the events since
it and inserts the next one (`seq` is the primary key: of two processes making checkpoint n at
once, the second insert fails and it simply made none). The signing is the caller's
(`approvals.audit.checkpoints`): the store never sees the key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from ._base import StoreBase
from .models import AuditCheckpointRow, AuditEventRow

__all__ = ("AuditCheckpoints", "Leaf", "NewCheckpoint")

Leaf = tuple[int, str]
"""An event as a checkpoint covers it: its id and its chain hash."""


@dataclass(frozen=True)
class NewCheckpoint:
    """What the signer made of the events since the last checkpoint: the row to insert, and the leaves it covers."""

    row: dict[str, Any]
    leaves: list[Leaf]


class AuditCheckpoints(StoreBase):
    """Checkpoints of the audit chain, and the events they cover."""

    async def state(self) -> tuple[AuditCheckpointRow | None, int]:
        """The last checkpoint and the last event's id (0 for none): what deciding whether one is due needs."""
        async with self.db.read() as session:
            last = await session.scalar(select(AuditCheckpointRow).order_by(AuditCheckpointRow.seq.desc()).limit(1))
            head = await session.scalar(select(func.max(AuditEventRow.id))) or 0
        return last, head

    async def create(
        self,
        last: AuditCheckpointRow | None,
        build: Callable[[AuditCheckpointRow | None, list[Leaf]], NewCheckpoint | None],
        *,
        max_events: int,
    ) -> NewCheckpoint | None:
        """Insert the checkpoint `build` makes of `last` and the next (at most `max_events`) events after it.

        The events are read and the checkpoint signed outside any write transaction, so appends never
        wait for it; only the insert is a write. None when there is nothing new, `build` declines, or
        another process stored checkpoint `seq` first (its checkpoint stands; this one is dropped).
        """
        after = last.event_id if last is not None else 0
        async with self.db.read() as session:
            rows = await session.execute(
                select(AuditEventRow.id, AuditEventRow.hash)
                .where(AuditEventRow.id > after)
                .order_by(AuditEventRow.id)
                .limit(max_events)
            )
            leaves = [(row.id, row.hash) for row in rows]
        made = build(last, leaves) if leaves else None
        if made is None:
            return None
        try:
            async with self.db.write() as session:
                session.add(AuditCheckpointRow(**made.row))
        except IntegrityError:
            return None
        return made

    async def last(self) -> AuditCheckpointRow | None:
        async with self.db.read() as session:
            return await session.scalar(select(AuditCheckpointRow).order_by(AuditCheckpointRow.seq.desc()).limit(1))

    async def uncovered_events(self) -> tuple[int, int]:
        """How many event ids lie past the last checkpoint, and that checkpoint's event id (0 without one)."""
        async with self.db.read() as session:
            after = await session.scalar(select(func.max(AuditCheckpointRow.event_id))) or 0
            head = await session.scalar(select(func.max(AuditEventRow.id))) or 0
        return max(0, head - after), after

    async def checkpoints(self, *, from_seq: int = 1, to_seq: int | None = None) -> list[AuditCheckpointRow]:
        """Checkpoints `from_seq`..`to_seq`, in order."""
        query = select(AuditCheckpointRow).where(AuditCheckpointRow.seq >= from_seq).order_by(AuditCheckpointRow.seq)
        if to_seq is not None:
            query = query.where(AuditCheckpointRow.seq <= to_seq)
        async with self.db.read() as session:
            return list((await session.scalars(query)).all())

    async def before(self, event_id: int) -> AuditCheckpointRow | None:
        """The last checkpoint that ends before event `event_id`."""
        async with self.db.read() as session:
            return await session.scalar(
                select(AuditCheckpointRow)
                .where(AuditCheckpointRow.event_id < event_id)
                .order_by(AuditCheckpointRow.seq.desc())
                .limit(1)
            )

    async def covering(self, event_id: int) -> AuditCheckpointRow | None:
        """The first checkpoint that covers event `event_id` (ends at it or after it)."""
        async with self.db.read() as session:
            return await session.scalar(
                select(AuditCheckpointRow)
                .where(AuditCheckpointRow.event_id >= event_id)
                .order_by(AuditCheckpointRow.seq)
                .limit(1)
            )

    async def leaves(self, after_id: int, upto_id: int) -> list[Leaf]:
        """(id, hash) of the events after `after_id` up to `upto_id`, in order."""
        async with self.db.read() as session:
            rows = await session.execute(
                select(AuditEventRow.id, AuditEventRow.hash)
                .where(AuditEventRow.id > after_id, AuditEventRow.id <= upto_id)
                .order_by(AuditEventRow.id)
            )
            return [(row.id, row.hash) for row in rows]

    async def events(
        self, *, after_id: int = 0, upto_id: int | None = None, batch: int = 2_000
    ) -> AsyncIterator[list[AuditEventRow]]:
        """The events after `after_id` (up to `upto_id`), oldest first, a batch at a time."""
        while True:
            query = select(AuditEventRow).where(AuditEventRow.id > after_id).order_by(AuditEventRow.id).limit(batch)
            if upto_id is not None:
                query = query.where(AuditEventRow.id <= upto_id)
            async with self.db.read() as session:
                rows = list((await session.scalars(query)).all())
            if not rows:
                return
            yield rows
            after_id = rows[-1].id

    async def event(self, event_id: int) -> AuditEventRow | None:
        async with self.db.read() as session:
            return await session.get(AuditEventRow, event_id)

    async def first_event_id(self, *, since: Any = None) -> int | None:
        """The first event's id (at or after the time `since`, when given)."""
        query = select(func.min(AuditEventRow.id))
        if since is not None:
            query = query.where(AuditEventRow.at >= since)
        async with self.db.read() as session:
            return await session.scalar(query)

    async def last_event_id(self, *, until: Any = None) -> int | None:
        """The last event's id (before the time `until`, when given)."""
        query = select(func.max(AuditEventRow.id))
        if until is not None:
            query = query.where(AuditEventRow.at < until)
        async with self.db.read() as session:
            return await session.scalar(query)
