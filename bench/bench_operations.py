"""The cost of tracing on an agent step and on a decision.

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

What a `/metrics` scrape costs is `bench_metrics_scrape.py`'s to measure.

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

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals import Agent, Tool, tracing
from approvals.calls.verdicts import Approve
from approvals.engines.native.models import TestModel
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
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


def main() -> None:
    for kind in ("sqlite", "postgresql"):
        with migrated_database(kind) as url:
            anyio.run(bench, url, kind)
    PROVIDER.shutdown()


if __name__ == "__main__":
    main()
