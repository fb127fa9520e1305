"""The cost of tracing on an agent step and on a decision, and what one `/metrics` scrape costs the database.

Tracing: off (no SDK) against on (SDK, batch processor).

Each round runs the same work once with tracing off and once on, interleaved (the order swapped
every round), on the same database: an agent step (a new run of a scripted model: start, one
tool run at once, one call paused for a person), a decision (`ApprovalService.decide`, which
also reads the run's stored trace context when tracing is on) and the resume after it.
"On" is the SDK's `TracerProvider` with a `BatchSpanProcessor` whose exporter drops the spans,
so the cost is recording and batching, not a network. Prints p50 of each and the difference.

Targets (issue 29): a decision costs at most 5 % more with tracing off (the instrumentation
left in place) and 15 % with it on. "Off" here is measured with the instrumentation in place:
compare with `bench_store.py decisions` from before it for the first target.

Metrics cost a decision nothing but its `channel` column: they are read at scrape time
(`approvals.store.metrics_queries`), so the second part times one scrape's reads on a database
of 1 000 to 100 000 runs (half completed after a person's approval, half waiting), copied
in SQL from two real runs. Prometheus scrapes every 15 s by default.

Needs the local PostgreSQL (APPROVALS_BENCH_PG_URL); creates and drops its own databases.
Switching the provider off again is not in the OpenTelemetry API: the benchmark swaps the
global provider directly (`trace._TRACER_PROVIDER`), which no application should do.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from sqlalchemy import Table, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals import Agent, Tool, tracing
from approvals.calls.verdicts import Approve
from approvals.engines.gate import API_ENGINES, HOOK_ENGINES
from approvals.engines.native.models import TestModel
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
from approvals.store.metrics_queries import read_metrics
from approvals.store.models import AuditEventRow, DecisionRow, RunRow, ToolCallRow
from approvals.worker.resumer import AgentRegistry

ROUNDS = 150
WARMUP = 15
STARTER = Actor("svc", "reviewer")
REVIEWER = Actor("alice", "reviewer")


def look(n: int) -> int:
    """Runs at once."""
    return n


def act(n: int) -> int:
    """Waits for a person."""
    return n


bench_agent: Agent[None] = Agent(
    TestModel([[("look", {"n": 1}), ("act", {"n": 1})]], final_text="ok"),
    name="bench",
    tools=[Tool(look), Tool(act, requires_approval=True)],
)


class Dropped(SpanExporter):
    """Takes the spans and sends them nowhere."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


PROVIDER = TracerProvider()
PROVIDER.add_span_processor(BatchSpanProcessor(Dropped()))


def tracing_on(on: bool) -> None:
    trace._TRACER_PROVIDER = PROVIDER if on else None  # see the module docstring
    assert tracing.enabled() is on


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await work()
    return (time.perf_counter() - started) * 1000


async def bench(url: str, kind: str) -> None:
    database = Database(url)
    store = Store(database)
    service = ApprovalService(store, AgentRegistry([bench_agent]))
    times: dict[tuple[str, bool], list[float]] = {}
    try:
        for round_ in range(ROUNDS + WARMUP):
            for on in (False, True) if round_ % 2 else (True, False):
                tracing_on(on)
                run_id = await store.runs.start_run("bench", "go", actor=STARTER)
                step = await timed(lambda: service.resumer.resume(run_id))  # noqa: B023 - awaited at once
                [call] = await store.calls.run_calls(run_id)
                decide = await timed(lambda: service.decide(call.id, Approve(), actor=REVIEWER))  # noqa: B023
                resume = await timed(lambda: service.resumer.resume(run_id))  # noqa: B023
                assert (await store.runs.get_run(run_id)).status == "completed"
                if round_ >= WARMUP:
                    for name, ms in (("agent step (start -> pause)", step), ("decision", decide), ("resume", resume)):
                        times.setdefault((name, on), []).append(ms)
    finally:
        tracing_on(False)
        await database.dispose()
    print(f"\n{kind}: p50 over {ROUNDS} interleaved rounds")
    print(f"  {'':28} {'off ms':>8} {'on ms':>8} {'on vs off':>10}")
    for name in ("agent step (start -> pause)", "decision", "resume"):
        off, on_ = statistics.median(times[(name, False)]), statistics.median(times[(name, True)])
        print(f"  {name:28} {off:8.3f} {on_:8.3f} {100 * (on_ - off) / off:+9.1f}%")


SCRAPE_SIZES = (1_000, 10_000, 100_000)
SCRAPES = 7
_COPIED_KEYS = {"id", "run_id", "call_id", "subject_id"}
"""Columns that name a run or a call: each copy gets its own (`<prefix>-<n>`)."""


def _copies(table: Any, keep_id: bool) -> str:
    """`INSERT … SELECT` of every row of `table` once per `n` of the CTE `copies`, with ids made unique."""
    columns = [c.name for c in cast_table(table).columns if keep_id or c.name != "id"]
    values = [f"substr({c}, 1, 20) || '-' || copies.n" if c in _COPIED_KEYS else c for c in columns]
    return (
        f"INSERT INTO {table.__tablename__} ({', '.join(columns)}) "
        "WITH RECURSIVE copies(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM copies WHERE n < :copies) "
        f"SELECT {', '.join(values)} FROM {table.__tablename__} CROSS JOIN copies"
    )


def cast_table(model: Any) -> Table:
    table: Table = model.__table__
    return table


async def scrape_cost(url: str, size: int) -> float:
    """p50 ms of one scrape's reads on a database of `size` runs: two real runs, then copies of them in SQL."""
    database = Database(url)
    store = Store(database)
    service = ApprovalService(store, AgentRegistry([bench_agent]))
    try:
        done, waiting = [await store.runs.start_run("bench", "go", actor=STARTER) for _ in range(2)]
        for run_id in (done, waiting):
            await service.resumer.resume(run_id)
        [call] = await store.calls.run_calls(done)
        await service.decide(call.id, Approve(), actor=REVIEWER)
        await service.resumer.resume(done)
        async with database.write() as session:
            for model, keep_id in ((RunRow, True), (ToolCallRow, True), (DecisionRow, False), (AuditEventRow, False)):
                await session.execute(text(_copies(model, keep_id)), {"copies": size // 2 - 1})
        if database.is_postgres:
            async with database.write() as session:
                await session.execute(text("ANALYZE"))
        timings = []
        for _ in range(SCRAPES):
            started = time.perf_counter()
            await read_metrics(database, (*API_ENGINES, *HOOK_ENGINES))
            timings.append((time.perf_counter() - started) * 1000)
        return statistics.median(timings)
    finally:
        await database.dispose()


def main() -> None:
    for kind in ("sqlite", "postgresql"):
        with migrated_database(kind) as url:
            anyio.run(bench, url, kind)
    PROVIDER.shutdown()
    for kind in ("sqlite", "postgresql"):
        print(f"\n{kind}: one /metrics scrape's reads (p50 of {SCRAPES})")
        for size in SCRAPE_SIZES:
            with migrated_database(kind) as url:
                print(f"  {size:>8} runs: {anyio.run(scrape_cost, url, size):8.1f} ms")


if __name__ == "__main__":
    main()
