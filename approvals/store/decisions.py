"""Reviewers' verdicts on pending calls, and expiry of calls nobody decided in time.

A decision has one implementation: the rules in `decision_rules.plan_decision`, the statements
in `decision_sql`. Each backend carries them out (`Backend.decide`): on SQLite as one transaction
in one worker-thread hop; on PostgreSQL through psycopg in a pipeline of two round trips
(`backends.postgres_decisions`). Either way
the call's run is locked, then the call, so of two reviewers deciding at once exactly
one wins and the other gets a `Conflict` naming who decided.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from ..calls.actors import SYSTEM, Actor
from ..calls.states import CallStatus
from ..calls.verdicts import Verdict
from ._base import StoreBase
from .audit import call_event
from .decision_rules import Decided, check_verdict, settled
from .decision_sql import update_call
from .models import RunRow, ToolCallRow
from .run_plan import utcnow
from .run_sql import Tx, ready_if_decided
from .wakeups import PENDING_CHANNEL

__all__ = ("DecisionOps",)


class DecisionOps(StoreBase):
    """Decisions and expiry."""

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record one reviewer's verdict; returns the call as it is afterwards."""
        return (await self.record_verdict(call_id, verdict, actor=actor)).call

    async def record_verdict(self, call_id: str, verdict: Verdict, *, actor: Actor) -> Decided:
        """`decide`, also saying the trace context of the call's run (read with the run's lock, no extra read)."""
        check_verdict(verdict, actor)  # refused before anything is read or written
        now = utcnow()
        decided, wake_ups = await self.backend.decide(self.db, call_id, verdict, actor, now)
        self.notifier.publish(wake_ups)
        return decided

    async def expire(self, *, now: dt.datetime | None = None, limit: int = 500) -> int:
        """Deny pending calls whose time to decide ran out; returns how many expired."""
        return await self.run_statements(lambda tx: _expire(tx, now or utcnow(), limit))


_EXPIRING_COLUMNS = (
    ToolCallRow.id,
    ToolCallRow.run_id,
    ToolCallRow.agent_name,
    ToolCallRow.tool_name,
    ToolCallRow.created_at,
    ToolCallRow.expires_at,
)


def _expire(tx: Tx, now: dt.datetime, limit: int) -> int:
    """Pending calls past their time become expired (a denial by the system); their runs ready when all decided."""
    query = (
        select(*_EXPIRING_COLUMNS)
        .where(ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now)
        .order_by(ToolCallRow.expires_at)
        .limit(limit)
    )
    # where rows are locked, the runs first, then their calls: the order decisions and cancellations take them in
    expired_runs = select(ToolCallRow.run_id).where(
        ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now
    )
    locked = tx.backend.lock_first(
        tx.session, select(RunRow.id).where(RunRow.id.in_(expired_runs)).order_by(RunRow.id).limit(limit)
    )
    if locked is not None:
        query = tx.backend.for_update(query.where(ToolCallRow.run_id.in_(locked)))
    calls = tx.session.execute(query).all()
    runs: dict[str, str] = {}
    for call in calls:
        waited = int((call.expires_at - call.created_at).total_seconds())
        reason = f"No one decided within {waited} seconds, so the request expired and the call was not run."
        changes = {**settled(CallStatus.EXPIRED, "expire", SYSTEM.id, now), "denial_reason": reason}
        tx.session.execute(update_call(tuple(changes)), {**changes, "target_id": call.id})
        tx.record(call_event(SYSTEM.id, "call.expired", call, {"reason": reason}, at=now))
        runs[call.run_id] = call.agent_name
    for run_id in sorted(runs):
        tx.announce(PENDING_CHANNEL, run_id)
        ready_if_decided(tx, run_id, runs[run_id], now)
    return len(calls)
