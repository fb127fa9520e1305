"""What one resume costs as a run's history grows (issue 17: it should not grow).

Each run has N prior messages of 200-character texts and is paused on a call that needs
approval. A resume is what a worker does after the approval: claim the run, run the
approved call, ask the model (a no-op function model), and pause again on the next call
(the first resume) or finish (the second). The first resume after the runs were made by
another process is "cold": the worker has never seen the run. The second is "warm": the
same worker paused it and resumes it, which is how a run lives with one worker process.

Prints the median per resume for N = 10, 200 and 1,000, and the ratio of 1,000 to 10.
Needs the local PostgreSQL (APPROVALS_BENCH_PG_URL); creates and drops its own database.
APPROVALS_BENCH_DATABASES picks the backends (default "postgresql,sqlite") and
APPROVALS_BENCH_RUNS the runs per history length (default 25), to compare versions quickly.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals import Agent, Tool
from approvals.calls.verdicts import Approve
from approvals.engines.native.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from approvals.engines.native.models import FunctionModel
from approvals.engines.native.models.function import AgentInfo
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer

HISTORIES = (10, 200, 1000)
RUNS = int(os.environ.get("APPROVALS_BENCH_RUNS", "25"))
DATABASES = os.environ.get("APPROVALS_BENCH_DATABASES", "postgresql,sqlite").split(",")
TEXT = "x" * 200
SERVICE = Actor("svc", "reviewer")
REVIEWER = Actor("rev", "reviewer")


def act(n: int) -> int:
    """Do nothing much."""
    return n


def two_approvals(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for `act` until it ran twice in this run's last turns, then answer."""
    ran = sum(
        1 for m in messages[-6:] if isinstance(m, ModelRequest) and any(p.part_kind == "tool-return" for p in m.parts)
    )
    if ran >= 2:
        return ModelResponse(parts=[TextPart(content="done")])
    return ModelResponse(
        parts=[ToolCallPart(tool_name="act", args={"n": len(messages)}, tool_call_id=f"act-{len(messages)}")]
    )


agent: Agent[None] = Agent(FunctionModel(two_approvals), name="resume-bench", tools=[Tool(act, requires_approval=True)])


def prior_messages(count: int) -> list[ModelRequest | ModelResponse]:
    history: list[ModelRequest | ModelResponse] = []
    while len(history) < count:
        history.append(ModelRequest(parts=[UserPromptPart(content=TEXT)]))
        history.append(ModelResponse(parts=[TextPart(content=TEXT)]))
    history = history[:count]
    if isinstance(history[-1], ModelResponse):  # the run continues from a request, as a paused run does
        history.append(ModelRequest(parts=[UserPromptPart(content=TEXT)]))
    return history


async def paused_runs(store: Store, history: int) -> list[str]:
    """Runs with `history` prior messages, each paused on its first `act` call and approved."""
    runs = []
    maker = Resumer(store, AgentRegistry([agent]), worker_id="maker")
    for _ in range(RUNS):
        run_id = await store.runs.start_run("resume-bench", "go", actor=SERVICE)
        await store.runs.claim("seed", run_id=run_id, lease_seconds=3600)
        await store.runs.append_step(run_id, "seed", prior_messages(history), lease_seconds=3600)
        await store.runs.release(run_id, "seed")
        await maker.resume(run_id)
        runs.append(run_id)
    for run_id in runs:
        run = await store.runs.get_run(run_id)
        assert run.status == "awaiting_approval", (run.status, run.error)
        [call] = [c for c in await store.calls.run_calls(run_id) if c.status == "pending"]
        await store.calls.decide(call.id, Approve(), actor=REVIEWER)
    return runs


async def resume_all(resumer: Resumer, store: Store, runs: list[str]) -> list[float]:
    times = []
    for run_id in runs:
        start = time.perf_counter()
        await resumer.resume(run_id)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def approve_pending(store: Store, runs: list[str]) -> None:
    for run_id in runs:
        for call in await store.calls.run_calls(run_id):
            if call.status == "pending":
                await store.calls.decide(call.id, Approve(), actor=REVIEWER)


async def bench(url: str, label: str) -> None:
    database = Database(url)
    store = Store(database)
    results: dict[int, tuple[float, float]] = {}
    for history in HISTORIES:
        runs = await paused_runs(store, history)
        worker = Resumer(store, AgentRegistry([agent]), worker_id=f"worker-{history}")
        cold = await resume_all(worker, store, runs)  # first sight of each run: it pauses again
        await approve_pending(store, runs)
        warm = await resume_all(worker, store, runs)  # the same worker again: the run completes
        results[history] = (statistics.median(cold), statistics.median(warm))
        print(
            f"[{label}] {history:5d} prior messages: resume cold {results[history][0]:6.2f} ms   warm {results[history][1]:6.2f} ms"
        )
    low, high = results[HISTORIES[0]], results[HISTORIES[-1]]
    print(
        f"[{label}] {HISTORIES[-1]} vs {HISTORIES[0]} messages: cold {high[0] / low[0]:.2f}x   warm {high[1] / low[1]:.2f}x"
    )
    await database.dispose()


def main() -> None:
    for kind in ("postgresql", "sqlite"):
        if kind in DATABASES:
            with migrated_database(kind) as url:
                anyio.run(bench, url, kind)


if __name__ == "__main__":
    main()
