"""The figures `/metrics` reports, kept as running sums: a scrape folds what changed, then reads a few rows.

Triggers (`metric_schema`) write a delta for every change to a counted figure in the
transaction of the change. A scrape folds the deltas into `metric_rollups` and deletes them,
in bounded batches, each one transaction that also holds the lock on the one `metric_folds`
row (on SQLite, the write lock): two processes scraping at once fold each delta once, and a
fold cut short by a crash leaves nothing half done. A batch is taken by one statement that
deletes the oldest deltas and returns them (no watermark), so a delta whose transaction commits
after a later one's is folded next time, not skipped. What a scrape then reads is the
rollups, a few hundred rows at most, whatever the length of history.

How a batch changes the sums is planned by a pure function (`plan_fold`), tested on its own.
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls import clock
from .backends.database import Database
from .models import MetricDeltaRow, MetricFoldRow, MetricOpenResumeRow, MetricRollupRow

__all__ = (
    "BUCKETS",
    "Entry",
    "FOLD_ROW",
    "RESUME_ACTIONS",
    "SETTLE_ACTIONS",
    "bucket_of",
    "failure_reason",
    "fold_metrics",
    "merge",
    "plan_fold",
    "read_rollups",
    "rollup_rows",
)

BUCKETS: tuple[float, ...] = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)
"""Histogram bounds in seconds: a person answers in seconds to days."""
OVERFLOW = len(BUCKETS)
"""The cell past the last bound (and of resumes not settled yet)."""
SETTLE_ACTIONS = ("run.paused", "run.completed", "run.failed", "run.released", "run.cancelled")
"""Audit actions that end a worker's stretch on a run: a resume lasts until the first of them."""
RESUME_ACTIONS = ("run.resumed", *SETTLE_ACTIONS)
HISTOGRAMS = frozenset({"decided"})
"""Metrics whose deltas carry an observation in seconds."""
FOLD_ROW = 1
FOLD_BATCH = 5_000
FOLD_BATCHES = 20
"""A scrape folds at most this many batches; a longer backlog (nobody scraped for long) is folded over the next ones."""
_EXCEPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)):")

Key = tuple[str, str, str, str, int]
"""(metric, key1, key2, key3, bucket): one rollup row."""


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


def bucket_of(seconds: float) -> int:
    """The histogram cell of an observation: the first bound it does not exceed (`seconds <= bound`)."""
    return bisect.bisect_left(BUCKETS, seconds)


@dataclass(frozen=True)
class Entry:
    """A change to one rollup row: `count` more observations (or fewer), summing `total`."""

    key: Key
    count: int
    total: float

    @classmethod
    def of(
        cls, metric: str, key1: str | None, key2: str | None, key3: str | None, bucket: Any, count: Any, total: Any
    ) -> Entry:
        """An entry with its labels as reported: a failure is counted by reason, not by its error's text."""
        if metric == "failure":
            key1, key2, key3 = failure_reason(key1), "", ""
        cell = int(bucket) if metric in HISTOGRAMS or metric == "resume" else 0
        return cls((metric, key1 or "", key2 or "", key3 or "", cell), int(count), float(total or 0.0))


class Delta(Protocol):
    """A `metric_deltas` row as the fold reads it."""

    @property
    def metric(self) -> str: ...
    @property
    def key1(self) -> str | None: ...
    @property
    def key2(self) -> str | None: ...
    @property
    def key3(self) -> str | None: ...
    @property
    def amount(self) -> int: ...
    @property
    def value(self) -> float | None: ...
    @property
    def at(self) -> dt.datetime | None: ...


def plan_fold(
    deltas: Sequence[Delta], open_resumes: Mapping[str, dt.datetime]
) -> tuple[list[Entry], dict[str, dt.datetime | None]]:
    """The rollup changes of `deltas` (in id order), and the open resumes of the runs they touch afterwards.

    A resume counts at once (in the last cell: it has no duration yet) and opens; the run's next
    settle event moves it to its duration's cell. A resume followed by another resume never
    settles (its worker died and another took the run over), as the audit log tells it.
    """
    entries: list[Entry] = []
    opened: dict[str, dt.datetime | None] = dict(open_resumes)
    for delta in deltas:
        if delta.metric == "resume":
            run = delta.key1 or ""
            started = opened.get(run)
            if delta.key2 == "run.resumed":
                entries.append(Entry(("resume", "", "", "", OVERFLOW), 1, 0.0))
                opened[run] = delta.at
            elif started is not None and delta.at is not None:
                seconds = (delta.at - started).total_seconds()
                entries.append(Entry(("resume", "", "", "", OVERFLOW), -1, 0.0))
                entries.append(Entry(("resume", "", "", "", bucket_of(seconds)), 1, seconds))
                opened[run] = None
            continue
        if delta.metric in HISTOGRAMS:
            value = delta.value
            bucket = OVERFLOW if value is None else bucket_of(value)
            total = 0.0 if value is None else delta.amount * value
            entries.append(Entry.of(delta.metric, delta.key1, delta.key2, delta.key3, bucket, delta.amount, total))
        else:
            entries.append(Entry.of(delta.metric, delta.key1, delta.key2, delta.key3, 0, delta.amount, 0.0))
    return entries, opened


def merge(totals: dict[Key, tuple[int, float]], entries: Iterable[Entry]) -> dict[Key, tuple[int, float]]:
    """`totals` with `entries` added (in place, and returned)."""
    for entry in entries:
        count, total = totals.get(entry.key, (0, 0.0))
        totals[entry.key] = (count + entry.count, total + entry.total)
    return totals


def rollup_rows(totals: Mapping[Key, tuple[int, float]]) -> list[dict[str, Any]]:
    """`metric_rollups` rows of `totals`."""
    return [
        {"metric": m, "key1": k1, "key2": k2, "key3": k3, "bucket": b, "count": count, "total": total}
        for (m, k1, k2, k3, b), (count, total) in totals.items()
    ]


async def read_rollups(session: AsyncSession, metrics: Iterable[str] | None = None) -> dict[Key, tuple[int, float]]:
    """Every rollup row (or those of `metrics`) by key."""
    rollups = MetricRollupRow
    query = select(
        rollups.metric, rollups.key1, rollups.key2, rollups.key3, rollups.bucket, rollups.count, rollups.total
    )
    if metrics is not None:
        query = query.where(rollups.metric.in_(sorted(set(metrics))))
    rows = await session.execute(query)
    return {(m, k1, k2, k3, int(b)): (int(count), float(total)) for m, k1, k2, k3, b, count, total in rows}


async def has_deltas(session: AsyncSession) -> bool:
    """Whether anything waits to be folded (a read, so a quiet scrape takes no write lock)."""
    return (await session.scalar(select(MetricDeltaRow.id).limit(1))) is not None


async def fold_metrics(
    db: Database, *, batch: int = FOLD_BATCH, batches: int = FOLD_BATCHES, now: dt.datetime | None = None
) -> int:
    """Fold waiting deltas into the rollups, `batch` at a time, at most `batches` transactions; the deltas folded."""
    folded = 0
    for _ in range(batches):
        async with db.write() as session:
            done = await _fold_batch(session, batch, now or clock.now())
        folded += done
        if done < batch:
            break
    return folded


async def _fold_batch(session: AsyncSession, batch: int, now: dt.datetime) -> int:
    deltas_table = MetricDeltaRow
    await session.execute(select(MetricFoldRow.id).where(MetricFoldRow.id == FOLD_ROW).with_for_update())
    first = select(deltas_table.id).order_by(deltas_table.id).limit(batch).scalar_subquery()
    taken = await session.execute(
        delete(deltas_table)
        .where(deltas_table.id.in_(first))
        .returning(
            deltas_table.id,
            deltas_table.metric,
            deltas_table.key1,
            deltas_table.key2,
            deltas_table.key3,
            deltas_table.amount,
            deltas_table.value,
            deltas_table.at,
        )
    )
    deltas = sorted(taken.all(), key=lambda delta: delta.id)  # one statement takes and deletes: no gap is skipped
    if not deltas:
        return 0
    runs = sorted({delta.key1 or "" for delta in deltas if delta.metric == "resume"})
    open_resumes: dict[str, dt.datetime] = {}
    if runs:
        rows = await session.execute(
            select(MetricOpenResumeRow.run_id, MetricOpenResumeRow.resumed_at).where(
                MetricOpenResumeRow.run_id.in_(runs)
            )
        )
        open_resumes = {run_id: at for run_id, at in rows}
    entries, opened = plan_fold(deltas, open_resumes)
    current = await read_rollups(session, {entry.key[0] for entry in entries})
    after = merge(dict(current), entries)
    changed = {key: value for key, value in after.items() if current.get(key) != value}
    updates = rollup_rows({key: value for key, value in changed.items() if key in current})
    inserts = rollup_rows({key: value for key, value in changed.items() if key not in current})
    if updates:
        await session.execute(update(MetricRollupRow), updates)
    if inserts:
        await session.execute(insert(MetricRollupRow), inserts)
    if runs:
        await session.execute(delete(MetricOpenResumeRow).where(MetricOpenResumeRow.run_id.in_(runs)))
        still_open = [{"run_id": run, "resumed_at": at} for run, at in opened.items() if at is not None]
        if still_open:
            await session.execute(insert(MetricOpenResumeRow), still_open)
    await session.execute(
        update(MetricFoldRow)
        .where(MetricFoldRow.id == FOLD_ROW)
        .values(deltas=MetricFoldRow.deltas + len(deltas), folded_at=now)
    )
    return len(deltas)
