"""Reviewers' verdicts on pending calls, and expiry of calls nobody decided in time.

A decision has one implementation: the rules in `verdicts.plan_decision`, the statements
in `_decision_sql`. On SQLite they run through SQLAlchemy in one transaction; on
PostgreSQL through psycopg in a pipeline of two round trips (`_pg_decisions`). Either way
the call's run is locked, then the call, so of two reviewers deciding at once exactly
one wins and the other gets a `Conflict` naming who decided.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from ..exceptions import NotFound
from ._base import SYSTEM, Actor, StoreBase
from ._decision_sql import LOCK_CALL, LOCK_RUN, STANDING_APPROVERS, call_facts, plan_statements
from ._pg_decisions import pg_decide
from ._run_writes import ready_if_decided, update_call
from ._writes import utcnow
from .audit import call_event
from .models import RunRow, ToolCallRow
from .notify import PENDING_CHANNEL
from .states import CallStatus
from .verdicts import Answer, Approve, Deny, EditAndApprove, Verdict, check_verdict, plan_decision, settled

__all__ = ("Answer", "Approve", "DecisionOps", "Deny", "EditAndApprove", "Verdict")


class DecisionOps(StoreBase):
    """Decisions and expiry."""

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record one reviewer's verdict; returns the call as it is afterwards."""
        check_verdict(verdict, actor)  # refused before anything is read or written
        if self.db.is_postgres:
            return await pg_decide(self.db, call_id, verdict, actor, utcnow())
        async with self.transaction() as tx:
            connection = await tx.session.connection()
            run = (await connection.execute(LOCK_RUN, {"call_id": call_id})).mappings().one_or_none()
            call = (await connection.execute(LOCK_CALL, {"call_id": call_id})).mappings().one_or_none()
            if run is None or call is None:
                raise NotFound(f"No call {call_id!r}")
            standing = [(r[0], r[1]) for r in await connection.execute(STANDING_APPROVERS, {"call_id": call_id})]
            facts = call_facts(run, call, standing)
            plan = plan_decision(facts, verdict, actor, utcnow())
            for statement, params in plan_statements(facts.call, plan):
                await connection.execute(statement, params)
            tx.events.extend(plan.events)  # chained by the transaction, as every SQLite write's
            tx.announcements.extend(plan.announcements)
        for column, value in plan.call_changes.items():
            setattr(facts.call, column, value)
        return facts.call

    async def expire(self, *, now: dt.datetime | None = None, limit: int = 500) -> int:
        """Deny pending calls whose time to decide ran out; returns how many expired."""
        now = now or utcnow()
        async with self.transaction() as tx:
            query = (
                select(ToolCallRow)
                .where(ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now)
                .order_by(ToolCallRow.expires_at)
                .limit(limit)
            )
            if self.db.is_postgres:
                # the runs first, then their calls: the order decisions and cancellations take them in
                expired_runs = select(ToolCallRow.run_id).where(
                    ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now
                )
                locked = (
                    await tx.session.scalars(
                        select(RunRow.id)
                        .where(RunRow.id.in_(expired_runs))
                        .order_by(RunRow.id)
                        .limit(limit)
                        .with_for_update(skip_locked=True)
                    )
                ).all()
                query = query.where(ToolCallRow.run_id.in_(locked)).with_for_update()
            calls = (await tx.session.scalars(query)).all()
            runs: dict[str, str] = {}
            for call in calls:
                waited = int((call.expires_at - call.created_at).total_seconds()) if call.expires_at else 0
                reason = f"No one decided within {waited} seconds, so the request expired and the call was not run."
                await update_call(call, **settled(CallStatus.EXPIRED, "expire", SYSTEM.id, now), denial_reason=reason)
                await tx.record(call_event(SYSTEM.id, "call.expired", call, {"reason": reason}))
                runs[call.run_id] = call.agent_name
            for run_id in sorted(runs):
                await tx.announce(PENDING_CHANNEL, run_id)
                await ready_if_decided(tx, run_id, runs[run_id])
            return len(calls)
