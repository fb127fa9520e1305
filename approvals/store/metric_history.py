"""The figures of `/metrics` as aggregates over all history: what the rollups must equal, and what they replaced.

Until issue 41 every scrape ran these twelve statements over every row (0.26 s at 10 000 runs,
2-3 s at 100 000). Scrapes now read the rollups (`metric_rollups`); these queries stay as the
definition the rollups are held to (tests compare both after scripted histories) and as the
old cost the scrape benchmark prints. Gate waits count calls a person decided; rule and expiry
outcomes of gate calls are `gate_outcomes` (issue 41, fault 2), as in the rollups.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal, select

from ..calls import clock
from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.states import OPEN_CALL_STATUSES, CallStatus
from .backends.database import Database
from .metric_rollups import BUCKETS, SETTLE_ACTIONS, failure_reason
from .metrics_queries import RULE_ACTOR, Histogram, MetricsSnapshot, gate_outcome, rule_effect
from .models import AuditEventRow, DecisionRow, RunRow, ToolCallRow, WebhookCursorRow

__all__ = ("read_metrics_from_history",)


def _histogram_columns(seconds: ColumnElement[float]) -> list[Any]:
    cells: list[Any] = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in BUCKETS]
    return [*cells, func.count(), func.coalesce(func.sum(seconds), 0.0)]


def _histogram(row: Sequence[Any]) -> Histogram:
    cells = [int(value or 0) for value in row[: len(BUCKETS)]]
    count = int(row[len(BUCKETS)] or 0)
    return Histogram((*cells, count), count, float(row[len(BUCKETS) + 1] or 0.0))


async def read_metrics_from_history(
    db: Database, gate_engines: Iterable[str], now: dt.datetime | None = None
) -> MetricsSnapshot:
    """The figures of `read_metrics`, from all rows and events; `gate_engines`: the engines whose runs are gates."""
    now = now or clock.now()
    between = db.backend.seconds_between  # `end - start` in seconds, in each database's own words
    calls = ToolCallRow
    waited = between(calls.created_at, calls.decided_at)
    by_person = and_(
        calls.decided_at.is_not(None),
        calls.decided_by.is_not(None),
        ~calls.decided_by.like(RULE_ACTOR),
        calls.decided_by != SYSTEM_ACTOR_ID,
        calls.status != CallStatus.EXPIRED,
    )
    engines = tuple(gate_engines)
    snapshot = MetricsSnapshot()
    async with db.read() as session:
        pending = await session.execute(
            select(calls.agent_name, calls.tool_name, func.count(), func.min(calls.created_at))
            .where(calls.status.in_(OPEN_CALL_STATUSES))
            .group_by(calls.agent_name, calls.tool_name)
        )
        oldest: dt.datetime | None = None
        for agent, tool, count, first in pending:
            snapshot.pending.append((agent, tool, int(count)))
            first = first if first is None or isinstance(first, dt.datetime) else dt.datetime.fromisoformat(first)
            if first is not None and first.tzinfo is None:
                first = first.replace(tzinfo=dt.UTC)
            oldest = first if oldest is None or (first is not None and first < oldest) else oldest
        snapshot.oldest_pending_age = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        decisions = await session.execute(
            select(DecisionRow.verdict, func.coalesce(DecisionRow.channel, literal("unknown")), func.count())
            .where(~DecisionRow.actor.like(RULE_ACTOR))
            .group_by(DecisionRow.verdict, DecisionRow.channel)
        )
        snapshot.decisions = [(verdict, channel, int(count)) for verdict, channel, count in decisions]
        latency = (await session.execute(select(*_histogram_columns(waited)).where(by_person))).one()
        snapshot.decision_latency = _histogram(latency)
        rules = await session.execute(
            select(func.coalesce(calls.rule_name, literal("unknown")), calls.verdict, func.count())
            .where(calls.decided_by.like(RULE_ACTOR))
            .group_by(calls.rule_name, calls.verdict)
        )
        ruled_by: dict[tuple[str, str], int] = {}
        for rule, verdict, count in rules:
            ruled_by[(rule, rule_effect(verdict))] = ruled_by.get((rule, rule_effect(verdict)), 0) + int(count)
        snapshot.rule_decisions = sorted((rule, effect, n) for (rule, effect), n in ruled_by.items())
        snapshot.expired = int(
            await session.scalar(select(func.count()).where(calls.status == CallStatus.EXPIRED)) or 0
        )
        runs = await session.execute(select(RunRow.status, func.count()).group_by(RunRow.status))
        snapshot.runs = [(str(status), int(count)) for status, count in runs]
        heads = select(func.substr(RunRow.error, 1, 120).label("head")).where(RunRow.status == "failed").subquery()
        errors = await session.execute(select(heads.c.head, func.count()).group_by(heads.c.head))
        for error, count in errors:
            reason = failure_reason(error)
            snapshot.failures[reason] = snapshot.failures.get(reason, 0) + int(count)
        snapshot.failures = {reason: count for reason, count in snapshot.failures.items() if count}
        # each resume's next stretch-ending event of its run, in one pass (a window over the run's events):
        # a correlated "first settle after it" was a lookup per resume, 2.3 s a scrape at 10 000 runs
        events = AuditEventRow
        steps = (
            select(
                events.action,
                events.at,
                func.lead(events.action).over(partition_by=events.run_id, order_by=events.id).label("next_action"),
                func.lead(events.at).over(partition_by=events.run_id, order_by=events.id).label("next_at"),
            )
            .where(events.action.in_(("run.resumed", *SETTLE_ACTIONS)))
            .subquery()
        )
        # a resume followed by another (its worker died and another took the run over) never settled
        settled = case((steps.c.next_action.in_(SETTLE_ACTIONS), between(steps.c.at, steps.c.next_at)))
        durations = select(settled.label("seconds")).where(steps.c.action == "run.resumed")
        seconds = durations.subquery().c.seconds
        resume_row = (
            await session.execute(
                select(
                    *[func.sum(case((seconds <= bound, 1), else_=0)) for bound in BUCKETS],
                    func.count(),
                    func.coalesce(func.sum(seconds), 0.0),
                )
            )
        ).one()
        # a resume not settled yet has no duration: it counts in the total and +Inf only
        snapshot.resumes = _histogram(resume_row)
        head = select(func.coalesce(func.max(AuditEventRow.id), 0)).scalar_subquery()
        lag = await session.execute(
            select(WebhookCursorRow.site, func.max(head - WebhookCursorRow.last_event_id)).group_by(
                WebhookCursorRow.site
            )
        )
        snapshot.deliverer_lag = {site: max(0, int(behind or 0)) for site, behind in lag}
        if engines:
            waits = await session.execute(
                select(RunRow.engine, func.count())
                .join(calls, calls.run_id == RunRow.id)
                .where(RunRow.engine.in_(engines), by_person)
                .group_by(RunRow.engine)
            )
            snapshot.gate_waits = [(engine, int(count)) for engine, count in waits]
            gate_row = (
                await session.execute(
                    select(*_histogram_columns(waited))
                    .join(RunRow, RunRow.id == calls.run_id)
                    .where(RunRow.engine.in_(engines), by_person)
                )
            ).one()
            snapshot.gate_wait = _histogram(gate_row)
            ruled = await session.execute(
                select(RunRow.engine, calls.verdict, func.count())
                .select_from(calls)
                .join(RunRow, RunRow.id == calls.run_id)
                .where(RunRow.engine.in_(engines), calls.decided_by.like(RULE_ACTOR))
                .group_by(RunRow.engine, calls.verdict)
            )
            outcomes: dict[tuple[str, str], int] = {}
            for engine, verdict, count in ruled:
                key = (engine, gate_outcome(rule_effect(verdict)))
                outcomes[key] = outcomes.get(key, 0) + int(count)
            expired = await session.execute(
                select(RunRow.engine, func.count())
                .select_from(calls)
                .join(RunRow, RunRow.id == calls.run_id)
                .where(RunRow.engine.in_(engines), calls.status == CallStatus.EXPIRED)
                .group_by(RunRow.engine)
            )
            for engine, count in expired:
                outcomes[(engine, "expired")] = int(count)
            snapshot.gate_outcomes = sorted((engine, outcome, n) for (engine, outcome), n in outcomes.items())
            fallback = AuditEventRow.details["fallback"].as_string()
            fallbacks = await session.execute(
                select(RunRow.engine, fallback, func.count())
                .join(RunRow, RunRow.id == AuditEventRow.run_id)
                .where(AuditEventRow.action == "call.fallback")
                .group_by(RunRow.engine, fallback)
            )
            snapshot.gate_fallbacks = [(engine, str(kind), int(count)) for engine, kind, count in fallbacks]
    return snapshot
