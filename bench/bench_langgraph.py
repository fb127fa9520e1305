"""A full approval cycle beside LangGraph's interrupt cycle, on SQLite and PostgreSQL (issue 17).

The cycle: a run that is paused on a call waiting for approval, with 200 prior messages of
200-character texts, is resumed with an approval; the call runs, the model (a no-op) calls
the tool again, and the run pauses again; it is resumed with a second approval and finishes.

- LangGraph 1.x: a `StateGraph` whose messages channel appends, a model node and a tool
  node that calls `interrupt()`; resumed with `Command(resume=...)`; state kept by
  `SqliteSaver` or `PostgresSaver` (the bench group in pyproject.toml).
- approvals: `Resumer.resume` twice (claim, run the approved call, ask the model, store
  the step and the pause or the end), by the worker that paused the run ("warm") and by
  one that never saw it ("cold"); our decisions are timed apart, as LangGraph's resume
  value is its decision.

The three kinds of cycle take turns, one of each at a time, so a change in the machine's
load meets all of them alike. Prints the median cycle of each and the ratio. `make bench` installs the bench group.
"""

from __future__ import annotations

import operator
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import create_pg_database, drop_pg_database
from bench_resume import REVIEWER, agent, approve_pending, paused_runs
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from approvals.engines.native.usage import RunTotals
from approvals.store import Database, Store
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, Resumer

HISTORY = 200
CYCLES = int(os.environ.get("BENCH_CYCLES", "20"))
"""Cycles measured per system (BENCH_CYCLES= to change)."""
TEXT = "x" * 200


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def model(state: State) -> dict[str, Any]:
    asked = sum(1 for m in state["messages"][-6:] if m["role"] == "tool")
    if asked >= 2:
        return {"messages": [{"role": "assistant", "content": "done"}]}
    return {"messages": [{"role": "assistant", "tool_call": {"name": "act", "args": {"n": len(state["messages"])}}}]}


def tool(state: State) -> dict[str, Any]:
    call = state["messages"][-1]["tool_call"]
    verdict = interrupt({"tool": call["name"], "args": call["args"]})
    return {"messages": [{"role": "tool", "content": call["args"]["n"], "verdict": verdict}]}


def route(state: State) -> str:
    return "tool" if "tool_call" in state["messages"][-1] else END


def langgraph_app(checkpointer: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tool", tool)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tool", END])
    graph.add_edge("tool", "model")
    return graph.compile(checkpointer=checkpointer)


def prior() -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": TEXT} for i in range(HISTORY)]


class LangGraphCycles:
    """LangGraph's side: threads paused at their first interrupt, resumed one cycle at a time."""

    def __init__(self, checkpointer: Any) -> None:
        self.app = langgraph_app(checkpointer)
        self.threads = []
        for index in range(CYCLES):
            config = {"configurable": {"thread_id": f"t{index}"}}
            self.app.invoke({"messages": prior()}, config)  # runs to the first interrupt: the paused run
            self.threads.append(config)

    def cycle(self, index: int) -> float:
        config = self.threads[index]
        start = time.perf_counter()
        self.app.invoke(Command(resume="approved"), config)  # resume -> pause
        self.app.invoke(Command(resume="approved"), config)  # resume -> finish
        elapsed = (time.perf_counter() - start) * 1000
        assert self.app.get_state(config).values["messages"][-1]["content"] == "done"
        return elapsed


async def side_by_side(url: str, theirs: LangGraphCycles) -> tuple[list[float], list[float], list[float], list[float]]:
    """LangGraph's cycle, ours with a warm worker and with a cold one, interleaved; and our decisions."""
    database = Database(url)
    store = Store(database)
    warm_runs = await paused_runs(store, HISTORY)
    cold_runs = await paused_runs(store, HISTORY)
    decisions: list[float] = []

    async def cycle(worker: Resumer, run_id: str) -> float:
        start = time.perf_counter()
        await worker.resume(run_id)
        paused = time.perf_counter()
        await approve_pending(store, [run_id])
        decided = time.perf_counter()
        await worker.resume(run_id)
        elapsed = (time.perf_counter() - start - (decided - paused)) * 1000
        decisions.append((decided - paused) * 1000)
        assert (await store.runs.get_run(run_id)).status == "completed"  # checked outside the timing, as LangGraph's
        return elapsed

    warm_worker = Resumer(store, AgentRegistry([agent]), worker_id="warm")
    for run_id in warm_runs:  # the worker that paused the run resumes it: it holds its history
        history = await store.runs.load_history(run_id)
        warm_worker.histories.keep(run_id, history, RunTotals.of(history, run_id))
    langgraph: list[float] = []
    warm: list[float] = []
    cold: list[float] = []
    for i in range(CYCLES):  # interleaved, so all three meet the same machine (its load, its disk)
        langgraph.append(theirs.cycle(i))
        warm.append(await cycle(warm_worker, warm_runs[i]))
        cold.append(await cycle(Resumer(store, AgentRegistry([agent]), worker_id=f"cold{i}"), cold_runs[i]))
    await database.dispose()
    return langgraph, warm, cold, decisions


def report(label: str, theirs: list[float], warm: list[float], cold: list[float], decisions: list[float]) -> None:
    lg, w, c, d = (statistics.median(x) for x in (theirs, warm, cold, decisions))
    print(
        f"[{label}] approval cycle at {HISTORY} prior messages: LangGraph {lg:6.2f} ms   "
        f"approvals warm {w:6.2f} ms ({w / lg:.2f}x)   cold {c:6.2f} ms ({c / lg:.2f}x)   "
        f"+ one decision {d:5.2f} ms"
    )


def main() -> None:
    assert REVIEWER  # the reviewer bench_resume approves as
    with tempfile.TemporaryDirectory() as tmp:
        connection = sqlite3.connect(f"{tmp}/langgraph.db", check_same_thread=False)
        url = f"sqlite:///{tmp}/approvals.db"
        upgrade(url)
        report("sqlite", *anyio.run(side_by_side, url, LangGraphCycles(SqliteSaver(connection))))
        connection.close()
    pg_url = create_pg_database()
    try:
        with PostgresSaver.from_conn_string(pg_url) as saver:
            saver.setup()
            report("postgresql", *anyio.run(side_by_side, pg_url, LangGraphCycles(saver)))
    finally:
        drop_pg_database(pg_url)


if __name__ == "__main__":
    main()
