"""Reviewers' verdicts on pending calls, and expiry of calls nobody decided in time.

A decision has one implementation: the rules in `decision_rules.plan_decision`, the statements
in `_decision_sql`. On SQLite they run as one transaction in one worker-thread hop; on
PostgreSQL through psycopg in a pipeline of two round trips (`backends.postgres_decisions`). Either way
the call's run is locked, then the call, so of two reviewers deciding at once exactly
one wins and the other gets a `Conflict` naming who decided.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from ..calls.actors import SYSTEM, Actor
from ..calls.states import CallStatus
from ..calls.verdicts import Verdict
from ..exceptions import NotFound
from ._base import StoreBase
from ._decision_sql import LOCK_CALL, LOCK_RUN, STANDING_APPROVERS, call_facts, plan_statements, update_call
from ._run_writes import Tx, ready_if_decided
from ._writes import utcnow
from .audit import call_event
from .backends.postgres_decisions import pg_decide
from .decision_rules import CallFacts, Decided, DecisionPlan, check_verdict, plan_decision, settled
from .models import RunRow, ToolCallRow
from .notify import PENDING_CHANNEL

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
        if self.db.is_postgres:
            return await pg_decide(self.db, call_id, verdict, actor, now)
        facts, plan = await self.run_statements(lambda tx: _decide(tx, call_id, verdict, actor, now))
        for column, value in plan.call_changes.items():
            setattr(facts.call, column, value)
        return Decided(facts.call, facts.run_trace_context)

    async def expire(self, *, now: dt.datetime | None = None, limit: int = 500) -> int:
        """Deny pending calls whose time to decide ran out; returns how many expired."""
        return await self.run_statements(lambda tx: _expire(tx, now or utcnow(), limit))


def _decide(tx: Tx, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime) -> tuple[CallFacts, DecisionPlan]:
    """A decision's statements (SQLite): lock the run, then the call, plan by the rules, write the plan."""
    run = tx.session.execute(LOCK_RUN, {"call_id": call_id}).mappings().one_or_none()
    call = tx.session.execute(LOCK_CALL, {"call_id": call_id}).mappings().one_or_none()
    if run is None or call is None:
        raise NotFound(f"No call {call_id!r}")
    standing = [(r[0], r[1]) for r in tx.session.execute(STANDING_APPROVERS, {"call_id": call_id})]
    facts = call_facts(run, call, standing)
    plan = plan_decision(facts, verdict, actor, now)
    for statement, params in plan_statements(facts.call, plan):
        tx.session.execute(statement, params)
    tx.events.extend(plan.events)  # chained by the transaction, as every SQLite write's
    tx.announcements.extend(plan.announcements)
    return facts, plan


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
    if tx.session.dialect.name == "postgresql":
        # the runs first, then their calls: the order decisions and cancellations take them in
        expired_runs = select(ToolCallRow.run_id).where(
            ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now
        )
        locked = tx.session.scalars(
            select(RunRow.id)
            .where(RunRow.id.in_(expired_runs))
            .order_by(RunRow.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        ).all()
        query = query.where(ToolCallRow.run_id.in_(locked)).with_for_update()
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
