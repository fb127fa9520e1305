"""What one scrape of `/metrics` reports, read from rollups that cost the same at any length of history.

Nothing is counted in a process, so any web process answers the same numbers: the counts
live in the database (`metric_rollups`), kept by triggers in the transactions of the writes
and folded at scrape time (`metric_rollups.fold_metrics`). A scrape folds what changed since
the last one, reads the rollups (a few hundred rows at most) and two figures of current state
an index answers at once: the oldest waiting call, and how far each webhook cursor is behind.
`metric_history` holds the same figures as aggregates over all history, the definition the
rollups are tested against.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Select, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls import clock
from ..calls.states import OPEN_CALL_STATUSES
from .backends.database import Database
from .metric_rollups import (
    BUCKETS,
    OVERFLOW,
    SETTLE_ACTIONS,
    Key,
    failure_reason,
    fold_metrics,
    has_deltas,
    read_rollups,
)
from .models import AuditEventRow, ToolCallRow, WebhookCursorRow

__all__ = (
    "BUCKETS",
    "SETTLE_ACTIONS",
    "Histogram",
    "MetricsSnapshot",
    "failure_reason",
    "gate_outcome",
    "read_metrics",
    "rule_effect",
)

RULE_ACTOR = "rule:%"


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts at `BUCKETS` (the last is +Inf), the count and the sum."""

    cumulative: tuple[int, ...]
    count: int
    total: float


EMPTY = Histogram((0,) * (len(BUCKETS) + 1), 0, 0.0)


@dataclass
class MetricsSnapshot:
    """Everything one scrape reports."""

    pending: list[tuple[str, str, int]] = field(default_factory=list)
    oldest_pending_age: float = 0.0
    decisions: list[tuple[str, str, int]] = field(default_factory=list)
    decision_latency: Histogram = EMPTY
    rule_decisions: list[tuple[str, str, int]] = field(default_factory=list)
    expired: int = 0
    runs: list[tuple[str, int]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    resumes: Histogram = EMPTY
    deliverer_lag: dict[str, int] = field(default_factory=dict)
    gate_waits: list[tuple[str, int]] = field(default_factory=list)
    """Gate calls a person decided, by engine (not those a rule decided or that expired: `gate_outcomes`)."""
    gate_wait: Histogram = EMPTY
    """How long gate calls waited for the person who decided them."""
    gate_outcomes: list[tuple[str, str, int]] = field(default_factory=list)
    """Gate calls nobody waited on, by engine and outcome: `rule_allowed`, `rule_denied`, `expired`."""
    gate_fallbacks: list[tuple[str, str, int]] = field(default_factory=list)
    """Hook answers given by the fallback (nobody decided within the wait), by engine and fallback."""


def rule_effect(verdict: str | None) -> str:
    """A rule's effect from the verdict it gave: rules allow or deny."""
    return {"approve": "allow", "edit": "allow", "deny": "deny"}.get(verdict or "", verdict or "unknown")


def gate_outcome(effect: str) -> str:
    """A gate call's outcome when a rule decided it: `rule_allowed`, `rule_denied`."""
    return {"allow": "rule_allowed", "deny": "rule_denied"}.get(effect, f"rule_{effect}")


async def read_metrics(db: Database, gate_engines: Iterable[str], now: dt.datetime | None = None) -> MetricsSnapshot:
    """One scrape's numbers; `gate_engines`: the engines whose runs are gates (the core does not list them)."""
    now = now or clock.now()
    engines = tuple(gate_engines)
    async with db.read() as session:
        if not await has_deltas(session):  # a quiet scrape: one read transaction, no write lock
            return await _read(session, engines, now)
    await fold_metrics(db)
    async with db.read() as session:
        return await _read(session, engines, now)


async def _read(session: AsyncSession, engines: tuple[str, ...], now: dt.datetime) -> MetricsSnapshot:
    """The rollups, the oldest waiting call and the webhook cursors' lag: a few rows, at any length of history."""
    rollups = await read_rollups(session)
    oldest = await session.scalar(select(func.min(union_all(*_oldest_by_status()).subquery().c.first)))
    head = select(func.coalesce(func.max(AuditEventRow.id), 0)).scalar_subquery()
    lag = await session.execute(
        select(WebhookCursorRow.site, func.max(head - WebhookCursorRow.last_event_id)).group_by(WebhookCursorRow.site)
    )
    snapshot = snapshot_of(rollups, engines)
    snapshot.oldest_pending_age = max(0.0, (now - _aware(oldest)).total_seconds()) if oldest is not None else 0.0
    snapshot.deliverer_lag = {site: max(0, int(behind or 0)) for site, behind in lag}
    return snapshot


def _oldest_by_status() -> list[Select[Any]]:
    """The oldest call of each open status: one index seek each ((status, created_at, id)), not a scan."""
    return [
        select(func.min(ToolCallRow.created_at).label("first")).where(ToolCallRow.status == status)
        for status in OPEN_CALL_STATUSES
    ]


def _aware(value: object) -> dt.datetime:
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


Labels = tuple[str, str, str]
K = TypeVar("K", bound=Hashable)


class _Rollups:
    """The rollups by metric: counts under their labels, and histogram cells under their first label."""

    def __init__(self, rollups: Mapping[Key, tuple[int, float]]) -> None:
        self.counts: dict[str, dict[Labels, int]] = {}
        self.cells: dict[str, dict[tuple[str, int], tuple[int, float]]] = {}
        for (metric, key1, key2, key3, bucket), (count, total) in rollups.items():
            labels = self.counts.setdefault(metric, {})
            labels[(key1, key2, key3)] = labels.get((key1, key2, key3), 0) + count
            cells = self.cells.setdefault(metric, {})
            before = cells.get((key1, bucket), (0, 0.0))
            cells[(key1, bucket)] = (before[0] + count, before[1] + total)

    def summed(self, metric: str, label: Callable[[Labels], K]) -> dict[K, int]:
        """Counts summed under the labels a series shows; a group with none left out, as GROUP BY leaves it."""
        sums: dict[K, int] = {}
        for labels, count in self.counts.get(metric, {}).items():
            key = label(labels)
            sums[key] = sums.get(key, 0) + count
        return {key: count for key, count in sums.items() if count}

    def histogram(self, metric: str, keep: Iterable[str] | None = None) -> Histogram:
        """A histogram over every first label, or those in `keep`."""
        kept = None if keep is None else set(keep)
        by_bucket: dict[int, tuple[int, float]] = {}
        for (key1, bucket), (count, total) in self.cells.get(metric, {}).items():
            if kept is None or key1 in kept:
                before = by_bucket.get(bucket, (0, 0.0))
                by_bucket[bucket] = (before[0] + count, before[1] + total)
        running, cumulative = 0, []
        for bucket in range(OVERFLOW + 1):
            running += by_bucket.get(bucket, (0, 0))[0]
            cumulative.append(running)
        return Histogram(tuple(cumulative), running, sum(total for _, total in by_bucket.values()))


def snapshot_of(rollups: Mapping[Key, tuple[int, float]], engines: tuple[str, ...]) -> MetricsSnapshot:
    """The figures of the rollups: labels summed over what a series does not show, empty groups left out."""
    r = _Rollups(rollups)
    snapshot = MetricsSnapshot()
    snapshot.pending = [(*k, n) for k, n in sorted(r.summed("pending", lambda k: (k[0], k[1])).items())]
    snapshot.decisions = [(*k, n) for k, n in sorted(r.summed("decision", lambda k: (k[0], k[1])).items())]
    snapshot.decision_latency = r.histogram("decided")
    rules = r.summed("rule", lambda k: (k[1], rule_effect(k[2])))
    snapshot.rule_decisions = [(*k, n) for k, n in sorted(rules.items())]
    snapshot.expired = sum(r.summed("expired", lambda k: k).values())
    snapshot.runs = sorted(r.summed("run", lambda k: k[0]).items())
    snapshot.failures = dict(sorted(r.summed("failure", lambda k: k[0]).items()))
    snapshot.resumes = r.histogram("resume")
    if engines:
        snapshot.gate_waits = sorted((e, n) for e, n in r.summed("decided", lambda k: k[0]).items() if e in engines)
        snapshot.gate_wait = r.histogram("decided", keep=engines)
        outcomes = r.summed("rule", lambda k: (k[0], gate_outcome(rule_effect(k[2]))))
        outcomes |= r.summed("expired", lambda k: (k[0], "expired"))
        snapshot.gate_outcomes = [(*k, n) for k, n in sorted(outcomes.items()) if k[0] in engines]
        fallbacks = r.summed("fallback", lambda k: (k[0], k[1]))
        snapshot.gate_fallbacks = [(*k, n) for k, n in sorted(fallbacks.items())]
    return snapshot
