"""Delivery cursors: how far each destination got through the audit log, and who delivers to it.

The audit log is the outbox. Every state change writes its audit events in its own
transaction and appends commit in id order, so a destination's whole delivery state is one
number, the id of the last event it got (`webhook_cursors.last_event_id`). A new
destination starts at the log's head; from then on nothing is lost, whatever restarts in
between. The table is named for webhooks, its first channel, but serves every channel of
`approvals.worker.deliverer`: `endpoint` is the channel's destination id (a webhook URL's
SHA-256, say, or "slack:<channel>").

One process at a time delivers to a destination: the one holding the cursor row's lease
(`lease_owner` until `lease_expires_at`), which it renews while it delivers and hands back
when it stops; when a holder dies, another takes over once the lease expires. Every write
of the holder is guarded by owner and cursor, so a process that lost its lease gets
`LeaseLost` and cannot move a cursor another process now moves. Leases use wall-clock
time, like the runs' leases: the processes' clocks must roughly agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import func, or_, select, update

from ..calls.actors import SYSTEM_ACTOR_ID
from ..exceptions import LeaseLost
from ._base import StoreBase
from .models import AuditEventRow, WebhookCursorRow
from .run_plan import utcnow

__all__ = ("WEBHOOKS_CHANNEL", "CursorLease", "WebhookCursors")

WEBHOOKS_CHANNEL = "approvals_webhooks"
"""A deliverer handed a destination back (any channel, despite the name); payload: its id.

Wakes the processes waiting to take over."""
_MAX_ERROR = 2_000


@dataclass(frozen=True)
class CursorLease:
    """A destination's cursor as its lease holder last wrote it."""

    endpoint: str
    owner: str
    last_event_id: int
    failures: int
    """Failed tries of the event after the cursor, across processes: the backoff continues from it."""
    expires_at: dt.datetime

    def seconds_left(self) -> float:
        return (self.expires_at - utcnow()).total_seconds()


class WebhookCursors:
    """The `webhook_cursors` table's operations, for every channel; each is one short transaction."""

    def __init__(self, store: StoreBase, *, lease_seconds: float = 30.0) -> None:
        """`store`: the aggregate whose transactions the cursors use (the deliverer's is `Store.outbound`)."""
        self.store = store
        self.lease_seconds = lease_seconds

    async def open(self, endpoint: str, site: str) -> None:
        """Give the destination a cursor at the log's head unless it has one: events before it existed are not sent.

        Two processes opening it at once both try to insert; the second's insert does nothing.
        """
        async with self.store.db.read() as session:
            if await session.scalar(select(WebhookCursorRow.endpoint).where(WebhookCursorRow.endpoint == endpoint)):
                return
        async with self.store.transaction() as tx:
            head = await tx.session.scalar(select(func.max(AuditEventRow.id))) or 0
            now = utcnow()
            values = {
                "endpoint": endpoint,
                "site": site[:300],
                "last_event_id": head,
                "failures": 0,
                "created_at": now,
                "updated_at": now,
            }
            cursor = self.store.backend.insert(WebhookCursorRow).values(values).on_conflict_do_nothing()
            await tx.session.execute(cursor)

    async def take(self, endpoint: str, owner: str) -> CursorLease | None:
        """Lease the destination when nobody holds it (or its holder's lease expired); None while another holds it."""
        now = utcnow()
        async with self.store.db.read() as session:
            held = (
                await session.execute(
                    select(WebhookCursorRow.lease_owner, WebhookCursorRow.lease_expires_at).where(
                        WebhookCursorRow.endpoint == endpoint
                    )
                )
            ).one_or_none()
        if held is None:
            raise LeaseLost(f"Destination {endpoint[:12]} has no cursor")
        holder, expires_at = held
        if holder is not None and holder != owner and expires_at is not None and expires_at >= now:
            return None  # looked first, so waiting processes do not take SQLite's write lock every few seconds
        until = now + dt.timedelta(seconds=self.lease_seconds)
        async with self.store.transaction() as tx:
            row = (
                await tx.session.execute(
                    update(WebhookCursorRow)
                    .where(
                        WebhookCursorRow.endpoint == endpoint,
                        or_(
                            WebhookCursorRow.lease_owner.is_(None),
                            WebhookCursorRow.lease_owner == owner,
                            WebhookCursorRow.lease_expires_at < now,
                        ),
                    )
                    .values(lease_owner=owner, lease_expires_at=until, updated_at=now)
                    .returning(WebhookCursorRow.last_event_id, WebhookCursorRow.failures)
                )
            ).one_or_none()
        if row is None:
            return None
        return CursorLease(endpoint, owner, row.last_event_id, row.failures, until)

    async def renew(self, lease: CursorLease) -> CursorLease:
        """Extend the lease; `LeaseLost` when another process took the destination over."""
        return await self._write(lease, lease.last_event_id)

    async def advance(self, lease: CursorLease, to_id: int) -> CursorLease:
        """Move the cursor to `to_id`: everything up to it was delivered or is not for this destination."""
        return await self._write(lease, to_id, failures=0)

    async def failed(self, lease: CursorLease, problem: str) -> CursorLease:
        """Count a failed try of the event after the cursor; the cursor stays, so it is tried again."""
        return await self._write(
            lease,
            lease.last_event_id,
            failures=lease.failures + 1,
            last_error=problem[:_MAX_ERROR],
            last_error_at=utcnow(),
        )

    async def refused(
        self, lease: CursorLease, event: AuditEventRow, name: str, site: str, problem: str, *, kind: str = "webhook"
    ) -> CursorLease:
        """The receiver refused `event` for good: move past it, and record that in the cursor and the audit log.

        The audit event is `{kind}.refused`, with the destination as its subject.
        """
        details = {"event": name, "event_id": event.id, "site": site, "problem": problem}
        return await self._write(
            lease,
            event.id,
            failures=0,
            last_error=f"event {event.id} ({name}) refused: {problem}"[:_MAX_ERROR],
            last_error_at=utcnow(),
            refusal=(event, kind, details),
        )

    async def release(self, lease: CursorLease) -> None:
        """Hand the destination back (when stopping) and wake the processes waiting to take it over."""
        async with self.store.transaction() as tx:
            released = await tx.session.scalar(
                update(WebhookCursorRow)
                .where(WebhookCursorRow.endpoint == lease.endpoint, WebhookCursorRow.lease_owner == lease.owner)
                .values(lease_owner=None, lease_expires_at=None, updated_at=utcnow())
                .returning(WebhookCursorRow.endpoint)
            )
            if released is not None:
                tx.announce(WEBHOOKS_CHANNEL, lease.endpoint)

    async def get(self, endpoint: str) -> WebhookCursorRow | None:
        """The destination's cursor row, for inspection."""
        async with self.store.db.read() as session:
            return await session.get(WebhookCursorRow, endpoint)

    async def events_after(
        self, last_id: int, actions: Collection[str] | None, *, limit: int
    ) -> tuple[list[AuditEventRow], int]:
        """Up to `limit` events with these actions (None: any) after `last_id`, and the id up to which the log was read.

        The head is read first: ids commit in order, so every event up to it is visible to the
        next query, and the cursor may move to it when fewer than `limit` events came back.
        """
        async with self.store.db.read() as session:
            head = await session.scalar(select(func.max(AuditEventRow.id))) or 0
            if head <= last_id:
                return [], last_id
            query = select(AuditEventRow).where(AuditEventRow.id > last_id, AuditEventRow.id <= head)
            if actions is not None:
                query = query.where(AuditEventRow.action.in_(list(actions)))
            rows = list((await session.scalars(query.order_by(AuditEventRow.id).limit(limit))).all())
        return rows, (rows[-1].id if len(rows) == limit else head)

    async def _write(
        self,
        lease: CursorLease,
        to_id: int,
        *,
        refusal: tuple[AuditEventRow, str, dict[str, Any]] | None = None,
        **values: Any,
    ) -> CursorLease:
        """Guarded by owner and cursor: nothing moves unless this lease still holds the cursor where it left it."""
        now = utcnow()
        until = now + dt.timedelta(seconds=self.lease_seconds)
        async with self.store.transaction() as tx:
            row = (
                await tx.session.execute(
                    update(WebhookCursorRow)
                    .where(
                        WebhookCursorRow.endpoint == lease.endpoint,
                        WebhookCursorRow.lease_owner == lease.owner,
                        WebhookCursorRow.last_event_id == lease.last_event_id,
                    )
                    .values(last_event_id=to_id, lease_expires_at=until, updated_at=now, **values)
                    .returning(WebhookCursorRow.failures)
                )
            ).one_or_none()
            if row is None:
                raise LeaseLost(f"{lease.owner!r} no longer delivers to destination {lease.endpoint[:12]}")
            if refusal is not None:
                event, kind, details = refusal
                tx.audit(
                    SYSTEM_ACTOR_ID,
                    f"{kind}.refused",
                    kind,
                    lease.endpoint,
                    run_id=event.run_id,
                    agent_name=event.agent_name,
                    tool_name=event.tool_name,
                    details=details,
                    at=now,
                )
        return replace(lease, last_event_id=to_id, failures=row.failures, expires_at=until)
