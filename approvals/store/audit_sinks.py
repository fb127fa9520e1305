"""The audit sinks' cursors: where a new sink's copy starts, and how far behind each sink is.

A sink (syslog, a webhook: `approvals.audit.sinks`) is a destination of the durable
deliverer, so its cursor is a row of `webhook_cursors` (which serves every channel),
keyed `audit-sink:<name>`. The deliverer starts a new destination at the log's head; a
SIEM's copy should usually hold the whole log, so `open_sink_cursor` can place it at the
beginning first. `sink_lags` reads what `/metrics` shows: events and seconds behind, and
failed tries in a row. Signed checkpoints are not events: how far a sink got through them
is its row of `audit_sink_checkpoints` (`checkpoint_seq`, `checkpoint_reached`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select, update

from ._base import StoreBase
from .backends.database import Database
from .models import AuditEventRow, AuditSinkCheckpointRow, WebhookCursorRow
from .run_plan import utcnow

__all__ = ("SINK_PREFIX", "SinkLag", "checkpoint_reached", "checkpoint_seq", "open_sink_cursor", "sink_lags")

SINK_PREFIX = "audit-sink:"


@dataclass(frozen=True)
class SinkLag:
    """How far one sink is behind the log's head."""

    name: str
    last_event_id: int
    events: int
    """Events after the cursor (ids may skip numbers, so at most this many)."""
    seconds: float
    """Age of the oldest event not yet delivered; 0 when caught up."""
    failures: int
    """Failed tries in a row of the event after the cursor."""
    last_error_at: dt.datetime | None


async def open_sink_cursor(store: StoreBase, destination: str, site: str, start: Literal["beginning", "head"]) -> None:
    """Give a new sink its cursor at the log's beginning (or head); a sink that has one keeps it.

    Two processes doing this at once both try to insert; the second's insert does nothing.
    """
    async with store.db.read() as session:
        if await session.scalar(select(WebhookCursorRow.endpoint).where(WebhookCursorRow.endpoint == destination)):
            return
    async with store.transaction() as tx:
        head = 0 if start == "beginning" else (await tx.session.scalar(select(func.max(AuditEventRow.id))) or 0)
        now = utcnow()
        values = {
            "endpoint": destination,
            "site": site[:300],
            "last_event_id": head,
            "failures": 0,
            "created_at": now,
            "updated_at": now,
        }
        await tx.session.execute(store.backend.insert(WebhookCursorRow).values(values).on_conflict_do_nothing())


async def sink_lags(db: Database, *, now: dt.datetime | None = None) -> list[SinkLag]:
    """Every sink's lag, by name: three short queries a sink (the head, the oldest undelivered event's time)."""
    now = now or utcnow()
    async with db.read() as session:
        head = await session.scalar(select(func.max(AuditEventRow.id))) or 0
        cursors = (
            await session.execute(
                select(
                    WebhookCursorRow.endpoint,
                    WebhookCursorRow.last_event_id,
                    WebhookCursorRow.failures,
                    WebhookCursorRow.last_error_at,
                )
                .where(WebhookCursorRow.endpoint.startswith(SINK_PREFIX, autoescape=True))
                .order_by(WebhookCursorRow.endpoint)
            )
        ).all()
        lags = []
        for endpoint, last_id, failures, error_at in cursors:
            oldest = None
            if head > last_id:
                oldest = await session.scalar(
                    select(AuditEventRow.at).where(AuditEventRow.id > last_id).order_by(AuditEventRow.id).limit(1)
                )
            seconds = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
            lags.append(
                SinkLag(
                    name=endpoint.removeprefix(SINK_PREFIX),
                    last_event_id=last_id,
                    events=max(0, head - last_id),
                    seconds=seconds,
                    failures=failures or 0,
                    last_error_at=error_at,
                )
            )
    return lags


async def checkpoint_seq(db: Database, sink: str) -> int:
    """The last checkpoint `sink` accepted (0: none)."""
    async with db.read() as session:
        seq = await session.scalar(select(AuditSinkCheckpointRow.last_seq).where(AuditSinkCheckpointRow.sink == sink))
    return seq or 0


async def checkpoint_reached(store: StoreBase, sink: str, seq: int) -> None:
    """`sink` accepted checkpoint `seq`: its mark moves there, never back (two processes may both send it)."""
    async with store.transaction() as tx:
        now = utcnow()
        await tx.session.execute(
            store.backend.insert(AuditSinkCheckpointRow)
            .values(sink=sink, last_seq=0, updated_at=now)
            .on_conflict_do_nothing()
        )
        await tx.session.execute(
            update(AuditSinkCheckpointRow)
            .where(AuditSinkCheckpointRow.sink == sink, AuditSinkCheckpointRow.last_seq < seq)
            .values(last_seq=seq, updated_at=now)
        )
