"""The rollups `/metrics` reads equal the aggregates over all history, for any history, on SQLite and PostgreSQL.

`metric_history.read_metrics_from_history` is the definition (the queries every scrape used to
run); random histories written straight into the tables (as the hot path, the ORM or a raw
UPDATE would) are folded and compared with it, after inserts, updates and deletes, two
processes folding at once, a fold cut short, audit retention, and an upgrade of a database
that already had history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from approvals.calls.states import CallStatus, RunStatus
from approvals.store import Database, Store, metric_rollups
from approvals.store.metric_history import read_metrics_from_history
from approvals.store.metric_rollups import OVERFLOW, RESUME_ACTIONS, Entry, fold_metrics, plan_fold
from approvals.store.metrics_queries import MetricsSnapshot, read_metrics
from approvals.store.migrate import downgrade, upgrade
from approvals.store.models import (
    AuditEventRow,
    DecisionRow,
    MetricDeltaRow,
    MetricRollupRow,
    RunRow,
    ToolCallRow,
    ToolDefinitionRow,
)
from approvals.worker.resumer import AgentRegistry, run_worker

from ..eventually import eventually
from .test_migrations import empty_database

pytestmark = pytest.mark.anyio

ENGINES = ("gate", "claude_code", "native")
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def figures(snapshot: MetricsSnapshot) -> dict[str, Any]:
    """A snapshot as comparable data: lists as sorted sums by labels, sums rounded (float order differs)."""
    out: dict[str, Any] = {}
    for name, value in dataclasses.asdict(snapshot).items():
        if isinstance(value, list):
            sums: dict[tuple[Any, ...], int] = {}
            for row in value:
                sums[tuple(row[:-1])] = sums.get(tuple(row[:-1]), 0) + row[-1]
            out[name] = sorted((labels, count) for labels, count in sums.items() if count)
        elif isinstance(value, dict) and "cumulative" in value:
            out[name] = (tuple(value["cumulative"]), value["count"], round(value["total"], 3))
        else:
            out[name] = value
    return out


async def both(db: Database) -> tuple[dict[str, Any], dict[str, Any]]:
    """The figures from the rollups (folded in small batches) and from all history."""
    await fold_metrics(db, batch=7, batches=10_000)
    return figures(await read_metrics(db, ENGINES[:2], now=NOW)), figures(
        await read_metrics_from_history(db, ENGINES[:2], now=NOW)
    )


async def write_history(db: Database, seed: int, runs: int = 40, prefix: str = "r") -> None:
    """Runs, calls, decisions and audit events of every kind the figures read, at random."""
    rng = random.Random(seed)
    async with db.write() as session:
        if not await session.scalar(select(func.count()).select_from(ToolDefinitionRow)):
            await session.execute(insert(ToolDefinitionRow).values(version="v1", name="refund", definition={}))
        for n in range(runs):
            run_id = f"{prefix}{seed}-{n}"
            started = NOW - dt.timedelta(days=3, seconds=rng.randint(0, 86_400))
            await session.execute(
                insert(RunRow).values(
                    id=run_id,
                    agent_name=rng.choice(("shop", "billing")),
                    engine=rng.choice(ENGINES),
                    status=rng.choice(list(RunStatus)),
                    error=rng.choice((None, "ValueError: bad", "httpx.ReadTimeout: slow", "the database said no", "x")),
                    created_at=started,
                    updated_at=started,
                )
            )
            for c in range(rng.randint(0, 3)):
                await _call(session, rng, run_id, f"{run_id}-c{c}", started)
            at = started
            for _ in range(rng.randint(0, 6)):
                at += dt.timedelta(seconds=rng.choice((0.4, 3, 40, 2_000, 100_000)))
                action = rng.choice((*RESUME_ACTIONS, "run.resumed", "call.fallback", "call.requested"))
                details = {"fallback": rng.choice(("ask", "deny"))} if action == "call.fallback" else None
                await session.execute(insert(AuditEventRow).values(**_event(run_id, action, at, details)))


async def _call(session: AsyncSession, rng: random.Random, run_id: str, call_id: str, started: dt.datetime) -> None:
    decided_by = rng.choice((None, "alice", "bob", "rule:small", "system"))
    decided_at = None if decided_by is None else started + dt.timedelta(seconds=rng.choice((0.5, 3, 400, 90_000)))
    await session.execute(
        insert(ToolCallRow).values(
            id=call_id,
            run_id=run_id,
            tool_call_id=call_id,
            agent_name=rng.choice(("shop", "billing")),
            tool_name=rng.choice(("refund", "delete_user")),
            tool_version="v1",
            args={},
            args_digest="d",
            status=rng.choice(list(CallStatus)),
            decided_by=decided_by,
            decided_at=decided_at,
            rule_name=rng.choice((None, "small")) if decided_by == "rule:small" else None,
            verdict=rng.choice((None, "approve", "deny", "edit")),
            created_at=started,
            updated_at=started,
        )
    )
    for n in range(rng.randint(0, 2)):
        await session.execute(
            insert(DecisionRow).values(
                call_id=call_id,
                actor=rng.choice(("alice", "bob", "rule:small")),
                verdict=rng.choice(("approve", "deny", "edit", "answer")),
                args_digest=f"d{n}",
                channel=rng.choice((None, "web", "api", "slack")),
            )
        )


def _event(run_id: str, action: str, at: dt.datetime, details: dict[str, Any] | None) -> dict[str, Any]:
    subject = "call" if action.startswith("call.") else "run"
    return {
        "at": at,
        "actor": "system",
        "action": action,
        "subject_type": subject,
        "subject_id": run_id,
        "run_id": run_id,
        "agent_name": "shop",
        "details": details,
        "prev_hash": "0" * 64,
        "hash": "0" * 64,
    }


async def change_history(db: Database, seed: int) -> None:
    """Updates and deletes of every kind: decisions taken back, calls settled, failed runs retried, raw SQL."""
    rng = random.Random(seed)
    async with db.write() as session:
        calls = (await session.execute(select(ToolCallRow.id).order_by(ToolCallRow.id))).scalars().all()
        for call_id in rng.sample(list(calls), k=len(calls) // 2):
            decided_by = rng.choice((None, "carol", "rule:big", "system"))
            await session.execute(
                update(ToolCallRow)
                .where(ToolCallRow.id == call_id)
                .values(
                    status=rng.choice(list(CallStatus)),
                    decided_by=decided_by,
                    decided_at=None if decided_by is None else NOW - dt.timedelta(seconds=rng.choice((2, 7_000))),
                    rule_name="big" if decided_by == "rule:big" else None,
                    verdict=rng.choice(("approve", "deny")),
                )
            )
        decisions = (await session.execute(select(DecisionRow.id))).scalars().all()
        gone = rng.sample(list(decisions), k=len(decisions) // 3)
        await session.execute(delete(DecisionRow).where(DecisionRow.id.in_(gone)))
        await session.execute(text("UPDATE decisions SET channel = 'email' WHERE channel IS NULL"))
        await session.execute(
            text("UPDATE runs SET status = 'ready', error = NULL WHERE status = 'failed' AND id LIKE '%1'")
        )
        await session.execute(text("UPDATE runs SET status = 'failed', error = 'KeyError: k' WHERE status = 'running'"))
        await session.execute(text("UPDATE runs SET updated_at = created_at"))  # no figure changes: no deltas


async def test_the_rollups_equal_the_aggregates_over_all_history(store: Store) -> None:
    for seed in (1, 2):
        await write_history(store.db, seed)
        rolled, history = await both(store.db)
        assert rolled == history
    await change_history(store.db, 3)
    rolled, history = await both(store.db)
    assert rolled == history
    assert rolled["runs"] and rolled["failures"] and rolled["decisions"] and rolled["gate_outcomes"]
    assert rolled["resumes"][1] > 0 and rolled["gate_fallbacks"] and rolled["pending"]
    async with store.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(MetricDeltaRow)) == 0


async def test_an_update_that_changes_no_figure_writes_no_delta(store: Store) -> None:
    await write_history(store.db, 4, runs=5)
    await fold_metrics(store.db)
    async with store.db.write() as session:
        await session.execute(text("UPDATE runs SET updated_at = created_at, prompt = 'p'"))
        await session.execute(text("UPDATE tool_calls SET status = status, updated_at = created_at"))
    async with store.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(MetricDeltaRow)) == 0


async def test_two_processes_folding_at_once_count_each_change_once(db_url: str) -> None:
    first, second = Database(db_url), Database(db_url)
    try:
        await write_history(first, 5, runs=60)
        await asyncio.gather(
            fold_metrics(first, batch=5, batches=10_000), fold_metrics(second, batch=5, batches=10_000)
        )
        rolled, history = await both(second)
        assert rolled == history
    finally:
        await first.dispose()
        await second.dispose()


async def test_a_fold_cut_short_leaves_nothing_half_done(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await write_history(store.db, 6, runs=20)
    async with store.db.read() as session:
        waiting = await session.scalar(select(func.count()).select_from(MetricDeltaRow))
        before = await session.execute(select(MetricRollupRow.metric, MetricRollupRow.count))
        rollups = sorted(before.all())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(metric_rollups, "update", broken)  # the deltas taken and the rollups written, then a crash
    with pytest.raises(RuntimeError):
        await fold_metrics(store.db)
    monkeypatch.undo()
    async with store.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(MetricDeltaRow)) == waiting
        assert sorted((await session.execute(select(MetricRollupRow.metric, MetricRollupRow.count))).all()) == rollups
    rolled, history = await both(store.db)
    assert rolled == history


async def test_audit_retention_takes_no_count_back(store: Store) -> None:
    """Events deleted by retention (here before their deltas were folded, too) stay counted: counters never fall."""
    await write_history(store.db, 7, runs=30)
    await fold_metrics(store.db)
    await write_history(store.db, 8, runs=30)
    rolled, history = await both(store.db)
    assert rolled == history
    async with store.db.write() as session:
        await session.execute(delete(AuditEventRow))
    assert figures(await read_metrics(store.db, ENGINES[:2], now=NOW)) == rolled


@dataclasses.dataclass
class FakeDelta:
    """A `metric_deltas` row as the fold reads it."""

    metric: str
    key1: str | None = None
    key2: str | None = None
    key3: str | None = None
    amount: int = 1
    value: float | None = None
    at: dt.datetime | None = None


T0 = NOW


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("events", "open_before", "cells", "open_after"),
    [
        # a resume counts at once, in the last cell, and stays open
        ([("run.resumed", 0)], None, {OVERFLOW: (1, 0.0)}, 0),
        # its settle event moves it to its duration's cell
        ([("run.resumed", 0), ("run.paused", 3)], None, {1: (1, 3.0), OVERFLOW: (0, 0.0)}, None),
        # a resume opened by an earlier fold settles in this one
        ([("run.completed", 0.5)], -0.5, {0: (1, 1.0), OVERFLOW: (-1, 0.0)}, None),
        # a resume followed by another never settles; the second does
        ([("run.resumed", 0), ("run.resumed", 10), ("run.failed", 20)], None, {OVERFLOW: (1, 0.0), 2: (1, 10.0)}, None),
        # a settle event with no resume before it (a first pause) counts nothing
        ([("run.paused", 0), ("run.released", 5)], None, {}, None),
    ],
)
def test_plan_fold_times_each_resume_to_its_runs_next_settle_event(
    events: list[tuple[str, float]],
    open_before: float | None,
    cells: dict[int, tuple[int, float]],
    open_after: float | None,
) -> None:
    deltas = [FakeDelta("resume", "run-1", action, at=_at(seconds)) for action, seconds in events]
    opened = {} if open_before is None else {"run-1": _at(open_before)}
    entries, after = plan_fold(deltas, opened)
    got: dict[int, tuple[int, float]] = {}
    for entry in entries:
        count, total = got.get(entry.key[4], (0, 0.0))
        got[entry.key[4]] = (count + entry.count, total + entry.total)
    assert got == cells
    assert after.get("run-1") == (None if open_after is None else _at(open_after))


def test_plan_fold_counts_failures_by_reason_and_latency_by_cell() -> None:
    deltas = [
        FakeDelta("failure", "ValueError: a", amount=1),
        FakeDelta("failure", "ValueError: b", amount=-1),
        FakeDelta("failure", None, amount=1),
        FakeDelta("decided", "gate", "", "", amount=1, value=1.0),
        FakeDelta("decided", "gate", "", "", amount=-1, value=1.5),
        FakeDelta("pending", "shop", "refund", "", amount=1),
    ]
    entries, _ = plan_fold(deltas, {})
    assert entries == [
        Entry(("failure", "ValueError", "", "", 0), 1, 0.0),
        Entry(("failure", "ValueError", "", "", 0), -1, 0.0),
        Entry(("failure", "unknown", "", "", 0), 1, 0.0),
        Entry(("decided", "gate", "", "", 0), 1, 1.0),  # 1 s is in the `le="1.0"` cell, as `seconds <= 1`
        Entry(("decided", "gate", "", "", 1), -1, -1.5),
        Entry(("pending", "shop", "refund", "", 0), 1, 0.0),
    ]


async def test_an_upgraded_database_reports_the_figures_its_history_gave(tmp_path: Path, db_url: str) -> None:
    """History written at revision 0027, then the upgrade: its backfill gives the figures the queries gave."""
    backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    with empty_database(backend, tmp_path) as url:
        upgrade(url, "0027")
        db = Database(url)
        try:
            await write_history(db, 9, runs=50)
            await change_history(db, 10)
            await db.dispose()
            upgrade(url)
            rolled, history = await both(db)
            assert rolled == history
            assert rolled["resumes"][1] > 0
            await write_history(db, 11, runs=10, prefix="later")  # and the triggers count from there on
            rolled, history = await both(db)
            assert rolled == history
        finally:
            await db.dispose()


def _metric_triggers(db_url: str) -> set[str]:
    """The tables that have their metric triggers."""
    if db_url.startswith("postgresql"):
        with psycopg.connect(db_url) as conn:
            names = conn.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'metric_facts_%'").fetchall()
        return {name.removeprefix("metric_facts_") for (name,) in names}
    with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
        rows = conn.execute("SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return {table for table, name in rows if name.startswith("metric_facts_")}


def test_a_downgrade_that_rebuilds_a_table_keeps_its_triggers(tmp_path: Path) -> None:
    """0029's downgrade rebuilds `tool_calls` on SQLite (batch mode), which drops a table's triggers with it."""
    url = f"sqlite:///{tmp_path / 'down.db'}"
    upgrade(url)
    downgrade(url, "0028")
    assert _metric_triggers(url) == {"tool_calls", "decisions", "runs", "audit_events"}


def test_the_triggers_are_there_at_head(db_url: str) -> None:
    """A later migration that rebuilds one of these tables (SQLite's batch mode does) must install them again."""
    if db_url.startswith("postgresql"):
        with psycopg.connect(db_url) as conn:
            found = {name for (name,) in conn.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'metric%'")}
        assert found == {f"metric_facts_{t}" for t in ("tool_calls", "decisions", "runs", "audit_events")}
    else:
        with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            rows = conn.execute("SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        tables = {table for table, name in rows if name.startswith("metric_facts_")}
        assert tables == {"tool_calls", "decisions", "runs", "audit_events"}


async def test_a_worker_folds_the_deltas_where_nothing_scrapes(store: Store) -> None:
    """Without Prometheus nobody reads `/metrics`: the worker's housekeeping folds the deltas, so they stay few."""
    await write_history(store.db, 5, runs=5)
    async with store.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(MetricDeltaRow))
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(run_worker, store, AgentRegistry([]), expire_interval=3600, stop=stop))

        async def none_left() -> bool:
            async with store.db.read() as session:
                return await session.scalar(select(func.count()).select_from(MetricDeltaRow)) == 0

        await eventually(none_left, "the worker to fold the metric deltas", seconds=20)
        stop.set()
    rolled, history = await both(store.db)
    assert rolled == history
