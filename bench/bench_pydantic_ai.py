"""A pydantic-ai resume through our store and worker, beside pydantic-ai alone, on SQLite and PostgreSQL.

The agent is a real `pydantic_ai.Agent` with pydantic-ai's `FunctionModel` (instant and
scripted: it calls `act`, a `requires_approval=True` tool, and once it has the result it
answers with text). A run has N prior messages of 200-character texts (N = 200 and 10) and
is paused on its `act` call. One cycle is what follows the approval: the call runs, the
model answers, the run finishes.

- pydantic-ai alone: `agent.run(None, message_history=<history with the pending call>,
  deferred_tool_results=DeferredToolResults(approvals={id: True}))`, in memory, nothing stored.
- approvals: the same agent wrapped as `PydanticAIAgent`, its paused run stored on SQLite (a
  file) or PostgreSQL (a throwaway database), the decision made (`store.calls.decide`) before the
  timing. Timed is `Resumer.resume(run_id)`: claim the run, commit the call as executing,
  run it, store the step, ask the model, finish; by the worker that paused the run ("warm":
  it holds the history) and by a fresh one ("cold": it reads the history from the store).

Paused runs are made in batches outside the timing: pydantic-ai runs to the pause in memory,
and for ours its messages and pending call are stored as a worker stores a pause (see
`paused_stored`), then approved; a batch stays within what a worker's history cache holds.
The three kinds of cycle take turns, one of each at a time, so a change in the machine's load
meets all of them alike; the first WARMUP cycles of each kind are not counted. Prints the
median and p90 of each, and ours / pydantic-ai's (medians), per backend and history length.

APPROVALS_BENCH_RUNS: cycles measured per kind, backend and history length (default 80);
APPROVALS_BENCH_DATABASES: backends (default "sqlite,postgresql");
APPROVALS_BENCH_HISTORIES: prior messages (default "200,10");
APPROVALS_BENCH_PG_URL: the PostgreSQL server the throwaway database is made on.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from approvals.calls.verdicts import Approve
from approvals.engines.native.usage import RunTotals
from approvals.engines.pydantic_ai import PydanticAIAgent
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer

RUNS = int(os.environ.get("APPROVALS_BENCH_RUNS", "80"))
DATABASES = os.environ.get("APPROVALS_BENCH_DATABASES", "sqlite,postgresql").split(",")
HISTORIES = [int(n) for n in os.environ.get("APPROVALS_BENCH_HISTORIES", "200,10").split(",")]
WARMUP = 2
"""Cycles of each kind run first and not counted (first imports, caches, connections)."""
BATCH = 32
"""Paused runs made at a time: a worker holds the histories of its last 64 paused runs."""
TEXT = "x" * 200
SERVICE = Actor("svc", "reviewer")
REVIEWER = Actor("rev", "reviewer")


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call `act` on the first turn; answer once the last request carries its result."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart(content="done")])
    return ModelResponse(parts=[ToolCallPart(tool_name="act", args={"n": len(messages)})])


agent = Agent(
    FunctionModel(respond, model_name="bench"),
    name="pai-resume-bench",
    output_type=[str, DeferredToolRequests],
)


@agent.tool_plain(requires_approval=True)
def act(n: int) -> int:
    """Do nothing much."""
    return n


wrapped = PydanticAIAgent(agent)
registry = AgentRegistry([wrapped])


def prior_messages(count: int) -> list[ModelMessage]:
    """`count` alternating prompts and answers, then a prompt: the run continues from a request."""
    history: list[ModelMessage] = []
    while len(history) < count:
        history.append(ModelRequest(parts=[UserPromptPart(content=TEXT)]))
        history.append(ModelResponse(parts=[TextPart(content=TEXT)]))
    history = history[:count]
    if not history or isinstance(history[-1], ModelResponse):
        history.append(ModelRequest(parts=[UserPromptPart(content=TEXT)]))
    return history


async def paused_in_memory(count: int) -> tuple[list[ModelMessage], DeferredToolRequests]:
    """pydantic-ai's paused run: its history, ending with the pending call, and what it waits for."""
    result = await agent.run(None, message_history=prior_messages(count))
    assert isinstance(result.output, DeferredToolRequests), result.output
    assert len(result.output.approvals) == 1, result.output
    return result.all_messages(), result.output


async def paused_stored(store: Store, worker: Resumer, count: int, *, holds: bool) -> str:
    """Our paused run, approved: paused by `worker` as its resume pauses a run, so `holds` keeps the history.

    pydantic-ai's pause is stored as the worker stores it: the run claimed by `worker`, then its
    messages and pending call in one `store.runs.pause`, and (`holds`) the history kept in the
    worker's cache, as `Resumer` keeps it. A worker cannot make the pause itself from seeded
    messages: pydantic-ai re-stamps a history's trailing request, which our agent refuses.
    """
    messages, requests = await paused_in_memory(count)
    history = cast(list[Any], messages)  # the store and the worker take pydantic-ai's messages as they are
    run_id = await store.runs.start_run(wrapped.name, "go", actor=SERVICE)
    assert await store.runs.claim(worker.worker_id, run_id=run_id, lease_seconds=worker.lease_seconds) is not None
    await store.runs.pause(run_id, worker.worker_id, history, wrapped.pending_calls(requests))
    if holds:
        worker.histories.keep(run_id, history, RunTotals(run_id=run_id, count=len(history)))
    [call] = [c for c in await store.calls.run_calls(run_id) if c.status == "pending"]
    await store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=REVIEWER)
    return run_id


async def theirs(history: list[ModelMessage], requests: DeferredToolRequests) -> float:
    approvals = DeferredToolResults(approvals={requests.approvals[0].tool_call_id: True})  # the decision
    start = time.perf_counter()
    result = await agent.run(None, message_history=history, deferred_tool_results=approvals)
    elapsed = (time.perf_counter() - start) * 1000
    assert result.output == "done", result.output
    return elapsed


async def ours(store: Store, worker: Resumer, run_id: str) -> float:
    start = time.perf_counter()
    await worker.resume(run_id)
    elapsed = (time.perf_counter() - start) * 1000
    run = await store.runs.get_run(run_id)  # checked outside the timing, as pydantic-ai's output
    assert run.status == "completed", (run.status, run.error)
    assert run.output == "done", run.output
    return elapsed


async def side_by_side(store: Store, count: int) -> tuple[list[float], list[float], list[float]]:
    """pydantic-ai's cycle, ours warm and ours cold, interleaved."""
    pydantic_ai: list[float] = []
    warm: list[float] = []
    cold: list[float] = []
    warm_worker = Resumer(store, registry, worker_id=f"warm-{count}")
    maker = Resumer(store, registry, worker_id=f"maker-{count}")
    total = WARMUP + RUNS
    done = 0
    while done < total:
        size = min(BATCH, total - done)
        histories = [await paused_in_memory(count) for _ in range(size)]
        warm_runs = [await paused_stored(store, warm_worker, count, holds=True) for _ in range(size)]
        cold_runs = [await paused_stored(store, maker, count, holds=False) for _ in range(size)]
        cold_workers = [Resumer(store, registry, worker_id=f"cold-{count}-{done + i}") for i in range(size)]
        for i in range(size):  # interleaved, so all three meet the same machine (its load, its disk)
            pydantic_ai.append(await theirs(*histories[i]))
            warm.append(await ours(store, warm_worker, warm_runs[i]))
            cold.append(await ours(store, cold_workers[i], cold_runs[i]))
        done += size
    return pydantic_ai[WARMUP:], warm[WARMUP:], cold[WARMUP:]


def p90(times: list[float]) -> float:
    return statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]


async def bench(url: str, label: str) -> None:
    database = Database(url)
    store = Store(database)
    for count in HISTORIES:
        pydantic_ai, warm, cold = await side_by_side(store, count)
        base = statistics.median(pydantic_ai)
        line = f"[{label}] {count:4d} prior messages: pydantic-ai {base:6.2f} ms (p90 {p90(pydantic_ai):6.2f})"
        for kind, times in (("warm", warm), ("cold", cold)):
            median = statistics.median(times)
            line += f"   approvals {kind} {median:6.2f} ms (p90 {p90(times):6.2f}) {median / base:5.2f}x"
        print(line, flush=True)
    await database.dispose()


def main() -> None:
    print(f"{RUNS} cycles of each kind per line; medians, p90 and ours / pydantic-ai's medians")
    for kind in ("sqlite", "postgresql"):
        if kind in DATABASES:
            with migrated_database(kind) as url:
                anyio.run(bench, url, kind)


if __name__ == "__main__":
    main()
