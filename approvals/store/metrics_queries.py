"""The aggregate reads behind `/metrics`: every number comes from durable rows, read at scrape time.

Nothing is counted in a process, so any web process answers the same numbers. Counters are
counts of rows that never go away (decisions, settled calls, audit events); histograms are
bucketed in SQL (`CASE` per bucket over all rows), so they stay monotonic however many rows
there are. One scrape is twelve aggregate statements in one read transaction.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal, select

from ..calls import clock
from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.states import OPEN_CALL_STATUSES, CallStatus
from .backends.database import Database
from .models import AuditEventRow, DecisionRow, RunRow, ToolCallRow, WebhookCursorRow

BUCKETS: tuple[float, ...] = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)
"""Histogram bounds in seconds: a person answers in seconds to days."""
SETTLE_ACTIONS = ("run.paused", "run.completed", "run.failed", "run.released", "run.cancelled")
"""Audit actions that end a worker's stretch on a run: a resume lasts until the first of them."""
RULE_ACTOR = "rule:%"
_EXCEPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)):")


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts at `BUCKETS` (the last is +Inf), the count and the sum."""

    cumulative: tuple[int, ...]
    count: int
    total: float


@dataclass
class MetricsSnapshot:
    """Everything one scrape reports."""

    pending: list[tuple[str, str, int]] = field(default_factory=list)
    oldest_pending_age: float = 0.0
    decisions: list[tuple[str, str, int]] = field(default_factory=list)
    decision_latency: Histogram = Histogram((0,) * (len(BUCKETS) + 1), 0, 0.0)
    rule_decisions: list[tuple[str, str, int]] = field(default_factory=list)
    expired: int = 0
    runs: list[tuple[str, int]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    resumes: Histogram = Histogram((0,) * (len(BUCKETS) + 1), 0, 0.0)
    deliverer_lag: dict[str, int] = field(default_factory=dict)
    gate_waits: list[tuple[str, int]] = field(default_factory=list)
    gate_wait: Histogram = Histogram((0,) * (len(BUCKETS) + 1), 0, 0.0)
    gate_fallbacks: list[tuple[str, str, int]] = field(default_factory=list)
    """Hook answers given by the fallback (nobody decided within the wait), by engine and fallback."""


def failure_reason(error: str | None) -> str:
    """A run's error in a few words: the exception's type (`ValueError`), `database`, `cancelled` or `other`.

    Run errors are written by the resumer as `Type: message` (or the database's refusal), so the
    type is a small, stable label; free text would make one series per message.
    """
    if not error:
        return "unknown"
    if error.startswith("the database"):
        return "database"
    match = _EXCEPTION.match(error)
    return match.group(1).rsplit(".", 1)[-1] if match else "other"


def _histogram_columns(seconds: ColumnElement[float]) -> list[Any]:
    cells: list[Any] = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in BUCKETS]
    return [*cells, func.count(), func.coalesce(func.sum(seconds), 0.0)]


def _histogram(row: Sequence[Any]) -> Histogram:
    cells = [int(value or 0) for value in row[: len(BUCKETS)]]
    count = int(row[len(BUCKETS)] or 0)
    return Histogram((*cells, count), count, float(row[len(BUCKETS) + 1] or 0.0))


async def read_metrics(db: Database, gate_engines: Iterable[str], now: dt.datetime | None = None) -> MetricsSnapshot:
    """One scrape's numbers; `gate_engines`: the engines whose runs are gates (the core does not list them)."""
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
        snapshot.rule_decisions = [(rule, _effect(verdict), int(count)) for rule, verdict, count in rules]
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
                .where(RunRow.engine.in_(engines), calls.decided_at.is_not(None))
                .group_by(RunRow.engine)
            )
            snapshot.gate_waits = [(engine, int(count)) for engine, count in waits]
            gate_row = (
                await session.execute(
                    select(*_histogram_columns(waited))
                    .join(RunRow, RunRow.id == calls.run_id)
                    .where(RunRow.engine.in_(engines), calls.decided_at.is_not(None))
                )
            ).one()
            snapshot.gate_wait = _histogram(gate_row)
            fallback = AuditEventRow.details["fallback"].as_string()
            fallbacks = await session.execute(
                select(RunRow.engine, fallback, func.count())
                .join(RunRow, RunRow.id == AuditEventRow.run_id)
                .where(AuditEventRow.action == "call.fallback")
                .group_by(RunRow.engine, fallback)
            )
            snapshot.gate_fallbacks = [(engine, str(kind), int(count)) for engine, kind, count in fallbacks]
    return snapshot


def _effect(verdict: str | None) -> str:
    """A rule's effect from the verdict it gave: rules allow or deny."""
    return {"approve": "allow", "edit": "allow", "deny": "deny"}.get(verdict or "", verdict or "unknown")
