"""A resume through our worker beside the framework resuming itself, per SNAPSHOT engine (issue 38: <= 1.2x).

For each engine whose framework is installed (LangGraph, OpenAI Agents, LlamaIndex), on SQLite
(a temp file, WAL and the store's `synchronous=NORMAL`) and PostgreSQL (a fresh database), with
N = 10 and 200 prior messages:

- ours: a run started through `ApprovalService` and paused by the worker (`Resumer`) on a
  `refund` call that needs approval, after its scripted model made safe `lookup_order` calls
  (in parallel, over a few turns) until the stored history holds about N messages, each call's
  arguments and result about 200 characters. The call is approved through the store (not
  timed); then one `Resumer.resume()` is timed: claim, the framework restores the stored
  snapshot, the approved call runs, the model asks for `refund` again, and the run pauses again
  (history and snapshot written in one transaction). The worker is warm: the one that paused
  the run, past a first untimed resume.
- theirs: the same agent (the conformance harness's: the same tools, the same scripted
  in-process model, so both sides pay the same model cost), paused at the same point by the
  framework alone and kept in the same kind of database; one resume is timed, from reading
  the stored state to writing the next pause's:
  - LangGraph: the same `create_agent` graph compiled with `SqliteSaver` / `PostgresSaver`
    (the bench group), resumed with `Command(resume=...)` approving the interrupt.
  - OpenAI Agents: `RunState.to_json()` kept in a table; read, `RunState.from_json`,
    `state.approve(item)`, `Runner.run(agent, state)`, and the new state written back.
  - LlamaIndex: `ctx.to_dict()` (and the agent's memory, which LlamaIndex leaves out of it)
    kept in a table; read, `Context.from_dict`, the run restarted from it, the approval sent
    as the waiting tool's event, run to the next request, the new context written back.
- the pause: the worker's pause write (`store.runs.pause`: the new messages, the pending call,
  the snapshot) inside each timed resume of ours.

An engine is measured only once a smoke run of it pauses and resumes on the worker; one that
does not (its framework missing, or the engine unfinished) is skipped with a printed line.
Each round resumes one run of every system in turn, so a change in the machine's load meets
all alike. Prints medians, the ratio ours/theirs (and of each side's fastest resume, less
sensitive to a shared machine's load) and the pause write's median.
BENCH_CYCLES (default 10) timed resumes per system and N; APPROVALS_BENCH_DATABASES picks the
backends (default "sqlite,postgresql"); `make bench` installs the bench group.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals.calls.verdicts import Approve
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry, Resumer

CYCLES = int(os.environ.get("BENCH_CYCLES", "10"))
"""Timed resumes per system, engine and N (BENCH_CYCLES= to change)."""
DATABASES = os.environ.get("APPROVALS_BENCH_DATABASES", "sqlite,postgresql").split(",")
HISTORIES = (10, 200)
TARGET = 1.2
AGENT = "bench-engines"
PROMPT = "Refund A-1 " + "x" * 190
STARTER = Actor("svc", "reviewer", person=False)
REVIEWER = Actor("rev", "reviewer")
SMOKE_SECONDS = 60
Turn = list[tuple[str, dict[str, Any]]]

FRAMEWORKS = {
    "langgraph": ("langchain", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres"),  # the bench group
    "openai_agents": ("agents",),
    "llamaindex": ("llama_index.core",),
}
"""The modules each engine's side needs: an engine whose framework is missing is skipped."""


def missing(modules: Sequence[str]) -> str | None:
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its package is missing
            found = False
        if not found:
            return module
    return None


def script(engine: str, history: int) -> list[Turn]:
    """The model's turns: parallel `lookup_order` calls until the history holds about `history` messages,
    then `refund` on every later turn (one for the pause, one per resume)."""
    # stored messages: (before the lookups, per lookup turn, per lookup call, the refund's own)
    fixed, per_turn, per_call, last = {
        "langgraph": (1, 1, 1, 1),  # prompt; an AI message with the calls, a tool message each; the AI message
        "openai_agents": (1, 0, 2, 1),  # prompt; a function_call and its output per call; the function_call
        "llamaindex": (2, 1, 1, 1),  # system prompt and prompt; as LangGraph
    }[engine]
    turns = 1 if history < 50 else 3  # the OpenAI Agents SDK allows 10 model turns a run by default
    calls = max(1, round(((history - fixed - last) / turns - per_turn) / per_call))
    lookups = [[("lookup_order", {"order_id": f"A-{t}-{c}-" + "x" * 190}) for c in range(calls)] for t in range(turns)]
    return [*lookups, *([[("refund", {"order_id": "A-1", "amount": 5})]] * 4)]


class Theirs(Protocol):
    """One framework keeping its own paused runs in a database, resuming them itself."""

    async def pause(self, key: str) -> None:
        """Run a new run of the agent until it waits on `refund`, its state stored under `key`."""
        ...

    async def resume(self, key: str) -> None:
        """Approve the waiting call of `key`'s stored run and run it to its next pause, stored again."""
        ...

    def close(self) -> None: ...


class StateTable:
    """A table of JSON documents by key, in the bench's own database, as a framework's user would keep one."""

    def __init__(self, url: str, sqlite_file: str) -> None:
        # each statement its own transaction (autocommit): a read, and a write that replaces one document
        if url.startswith("sqlite"):
            self.conn: Any = sqlite_connection(sqlite_file)
            self.conn.isolation_level = None
            self.mark = "?"
        else:
            self.conn = psycopg.connect(url, autocommit=True)
            self.mark = "%s"
        self.conn.execute("CREATE TABLE IF NOT EXISTS bench_states (key TEXT PRIMARY KEY, doc TEXT NOT NULL)")

    def put(self, key: str, doc: Any) -> None:
        m = self.mark
        self.conn.execute(
            f"INSERT INTO bench_states (key, doc) VALUES ({m}, {m}) ON CONFLICT (key) DO UPDATE SET doc = excluded.doc",
            (key, json.dumps(doc)),
        )

    def get(self, key: str) -> Any:
        row = self.conn.execute(f"SELECT doc FROM bench_states WHERE key = {self.mark}", (key,)).fetchone()
        return json.loads(row[0])

    def close(self) -> None:
        self.conn.close()


def sqlite_connection(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # as our store's SQLite
    return conn


class LangGraphTheirs:
    def __init__(self, agent: Any, url: str, sqlite_file: str) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.sqlite import SqliteSaver

        if url.startswith("sqlite"):
            self.conn: Any = sqlite_connection(sqlite_file)
            saver: Any = SqliteSaver(self.conn)
        else:
            self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
            saver = PostgresSaver(self.conn)
        saver.setup()
        self.graph = agent.copy(update={"checkpointer": saver})

    async def pause(self, key: str) -> None:
        from langchain_core.messages import HumanMessage

        config: Any = {"configurable": {"thread_id": key}}
        self.graph.invoke({"messages": [HumanMessage(PROMPT)]}, config, context={})
        assert self.graph.get_state(config).interrupts, "the graph did not pause"

    async def resume(self, key: str) -> None:
        from langgraph.types import Command

        config: Any = {"configurable": {"thread_id": key}}  # one interrupt waits: the answer is for it
        self.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config, context={})

    async def check(self, key: str) -> None:
        state = self.graph.get_state({"configurable": {"thread_id": key}})
        assert state.interrupts, "the graph did not pause again"
        assert state.values["messages"][-2].content.startswith("refunded"), "the approved call did not run"

    def close(self) -> None:
        self.conn.close()


class OpenAIAgentsTheirs:
    def __init__(self, agent: Any, url: str, sqlite_file: str) -> None:
        from agents import RunConfig

        self.agent = agent
        self.table = StateTable(url, sqlite_file)
        self.config = RunConfig(tracing_disabled=True)  # as our engine runs it

    async def pause(self, key: str) -> None:
        from agents import Runner

        result = await Runner.run(self.agent, PROMPT, context={}, run_config=self.config)
        assert result.interruptions, "the run did not pause"
        self.table.put(key, result.to_state().to_json())

    async def resume(self, key: str) -> None:
        from agents import Runner, RunState

        state = await RunState.from_json(self.agent, self.table.get(key))
        [waiting] = state.get_interruptions()
        state.approve(waiting)
        result = await Runner.run(self.agent, state, run_config=self.config)
        self.table.put(key, result.to_state().to_json())

    async def check(self, key: str) -> None:
        from agents import RunState

        state = await RunState.from_json(self.agent, self.table.get(key))
        assert len(state.get_interruptions()) == 1, "the run did not pause again"
        assert "refunded" in json.dumps(state.to_json()["generated_items"][-3]), "the approved call did not run"

    def close(self) -> None:
        self.table.close()


class LlamaIndexTheirs:
    def __init__(self, agent: Any, url: str, sqlite_file: str) -> None:
        self.agent = agent
        self.table = StateTable(url, sqlite_file)

    async def _until_waiting(self, handler: Any, key: str, verdict: Any = None) -> None:
        """Follow the run until it waits on a new request, then keep its context (and memory) and stop it."""
        from llama_index.core.memory import BaseMemory
        from workflows.context.serializers import JsonSerializer
        from workflows.events import WorkflowIdleEvent

        from approvals.engines.llamaindex import ApprovalRequest

        asked = None
        async for event in handler.stream_events(expose_internal=True):
            if isinstance(event, ApprovalRequest) and (verdict is None or event.tool_call_id != verdict.tool_call_id):
                asked = event.tool_call_id  # what a person is asked about: kept with the context
            elif isinstance(event, WorkflowIdleEvent) and verdict is not None:
                await handler.send_event(verdict)  # the restored tool waits again: now it takes the approval
                verdict = None
            elif isinstance(event, WorkflowIdleEvent) and asked:
                break
        memory: BaseMemory | None = await handler.ctx.store.get("memory", default=None)
        messages = await memory.aget_all() if memory is not None else []
        doc = {
            "context": handler.ctx.to_dict(serializer=JsonSerializer()),
            "memory": [m.model_dump(mode="json") for m in messages],
            "waiting": asked,
        }
        await handler.cancel_run()
        assert asked, "the run did not pause"
        self.table.put(key, doc)

    async def pause(self, key: str) -> None:
        with quiet():
            handler = self.agent.run(user_msg=PROMPT)
        await self._until_waiting(handler, key)

    async def resume(self, key: str) -> None:
        from llama_index.core.llms import ChatMessage
        from llama_index.core.memory import ChatMemoryBuffer
        from workflows import Context
        from workflows.context.serializers import JsonSerializer

        from approvals.engines.llamaindex import ApprovalVerdict

        doc = self.table.get(key)
        with quiet():
            ctx = Context.from_dict(self.agent, doc["context"], serializer=JsonSerializer())
            handler = self.agent.run(ctx=ctx)
        messages = [ChatMessage.model_validate(m) for m in doc["memory"]]
        await handler.ctx.store.set("memory", ChatMemoryBuffer.from_defaults(chat_history=messages, llm=self.agent.llm))
        await self._until_waiting(handler, key, ApprovalVerdict(tool_call_id=doc["waiting"], verdict="approve"))

    async def check(self, key: str) -> None:
        doc = self.table.get(key)
        assert doc["waiting"], "the run did not pause again"
        assert "refunded" in json.dumps(doc["context"]), "the approved call did not run"

    def close(self) -> None:
        self.table.close()


@contextmanager
def quiet() -> Iterator[None]:
    """LlamaIndex's workflows touch pydantic's deprecated attributes of an agent: not the bench's noise."""
    from pydantic.warnings import PydanticDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PydanticDeprecationWarning)
        yield


def harness(engine: str) -> Any:
    if engine == "langgraph":
        from tests.engines.conformance.harnesses.langgraph import LangGraphHarness

        return LangGraphHarness()
    if engine == "openai_agents":
        from tests.engines.conformance.harnesses.openai_agents import OpenAIAgentsHarness

        return OpenAIAgentsHarness()
    from tests.engines.conformance.harnesses.llamaindex import LlamaIndexHarness

    # LlamaIndex's word that the agent's memory is left out of its context (both sides keep it beside the
    # context), after its import, whose own filter shows it
    warnings.filterwarnings("ignore", message="Skipping serialization of known unserializable key: memory")
    return LlamaIndexHarness()


ROOT = Path(__file__).resolve().parent.parent
HARNESSES = {p.stem for p in (ROOT / "tests/engines/conformance/harnesses").glob("*.py")}
"""The engines the conformance suite has a harness for (the bench builds its agents with them)."""

THEIRS: dict[str, Callable[[Any, str, str], Any]] = {
    "langgraph": LangGraphTheirs,
    "openai_agents": OpenAIAgentsTheirs,
    "llamaindex": LlamaIndexTheirs,
}


class PauseTimer:
    """Times the worker's pause write, `store.runs.pause`, each time it is called."""

    def __init__(self, store: Store) -> None:
        self.inner = store.runs.pause
        self.last = 0.0
        setattr(store.runs, "pause", self.timed)  # noqa: B010 (a method replaced on this one object)

    async def timed(self, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        await self.inner(*args, **kwargs)
        self.last = (time.perf_counter() - start) * 1000


@dataclass
class Ours:
    """One engine's agent on our store, and the warm worker that pauses and resumes its runs."""

    engine: str
    store: Store
    turns: list[Turn]
    registry: AgentRegistry = field(init=False)
    worker: Resumer = field(init=False)

    def __post_init__(self) -> None:
        self.registry = AgentRegistry([harness(self.engine).agent(f"{AGENT}-{self.engine}", self.turns)])
        self.worker = Resumer(self.store, self.registry, worker_id=f"warm-{self.engine}")

    async def pause(self) -> str:
        service = ApprovalService(self.store, self.registry)
        run_id = await service.start_run(f"{AGENT}-{self.engine}", PROMPT, actor=STARTER, deps={})
        assert await self.worker.resume(run_id) == run_id
        await self.approve(run_id)
        return run_id

    async def approve(self, run_id: str) -> None:
        run = await self.store.runs.get_run(run_id)
        assert run.status == "awaiting_approval", (self.engine, run.status, run.error)
        [call] = [c for c in await self.store.calls.run_calls(run_id) if c.status == "pending"]
        await self.store.calls.decide(call.id, Approve(), actor=REVIEWER)

    async def resume(self, run_id: str) -> None:
        await self.worker.resume(run_id)

    async def check(self, run_id: str) -> int:
        run = await self.store.runs.get_run(run_id)
        assert run.status == "awaiting_approval", (self.engine, run.status, run.error)
        return run.message_count


@dataclass
class Side:
    """One engine at one N: its paused runs on both sides, and what their resumes took."""

    engine: str
    ours: Ours
    theirs: Any
    runs: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    stored: int = 0
    ours_ms: list[float] = field(default_factory=list)
    theirs_ms: list[float] = field(default_factory=list)
    pause_ms: list[float] = field(default_factory=list)


async def timed(action: Awaitable[None]) -> float:
    start = time.perf_counter()
    await action
    return (time.perf_counter() - start) * 1000


async def prepare(engine: str, store: Store, url: str, folder: str, history: int, cycles: int = CYCLES) -> Side:
    turns = script(engine, history)
    ours = Ours(engine, store, turns)
    theirs = THEIRS[engine](harness(engine).agent(f"{AGENT}-{engine}", turns), url, f"{folder}/theirs.db")
    side = Side(engine, ours, theirs)
    for i in range(cycles + 1):  # the first of each side is the warm-up resume
        side.runs.append(await ours.pause())
        key = f"{engine}-{history}-{i}"
        await theirs.pause(key)
        side.keys.append(key)
    side.stored = (await store.runs.get_run(side.runs[0])).message_count
    await ours.resume(side.runs[0])
    await theirs.resume(side.keys[0])
    return side


async def smoke(engine: str, store: Store, url: str, folder: str) -> str | None:
    """Why `engine` cannot be measured here (None: it pauses and resumes on both sides)."""
    module = missing(FRAMEWORKS[engine])
    if module is not None:
        return f"{module} is not installed (`make bench` installs the extras and the bench group)"
    if engine not in HARNESSES:
        return "it has no conformance harness yet"
    try:
        with anyio.fail_after(SMOKE_SECONDS):
            side = await prepare(engine, store, url, f"{folder}/smoke", HISTORIES[0], cycles=0)
            await side.ours.check(side.runs[0])
            await side.theirs.check(side.keys[0])
            side.theirs.close()
    except Exception as exc:  # an engine still being written: say why, measure the others
        return f"a smoke run failed ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """LlamaIndex leaves a stopped workflow's result task unread (`WorkflowCancelledByUser`): not worth a traceback."""
    if type(context.get("exception")).__name__ != "WorkflowCancelledByUser":
        loop.default_exception_handler(context)


async def bench(url: str, label: str, folder: str) -> None:
    asyncio.get_running_loop().set_exception_handler(quiet_cancellations)
    database = Database(url)
    store = Store(database)
    engines = []
    for engine in FRAMEWORKS:
        why = await smoke(engine, store, url, folder)
        if why is None:
            engines.append(engine)
        else:
            print(f"[{label}] {engine}: skipped, {why}")
    timer = PauseTimer(store)
    for history in HISTORIES:
        sides = [await prepare(engine, store, url, folder, history) for engine in engines]
        for i in range(1, CYCLES + 1):  # one resume of every system a round
            for side in sides:
                side.ours_ms.append(await timed(side.ours.resume(side.runs[i])))
                side.pause_ms.append(timer.last)
                side.theirs_ms.append(await timed(side.theirs.resume(side.keys[i])))
        for side in sides:
            for run_id, key in zip(side.runs[1:], side.keys[1:], strict=True):  # outside the timing
                await side.ours.check(run_id)
                await side.theirs.check(key)
            side.theirs.close()
            report(label, history, side)
    await database.dispose()


def report(label: str, history: int, side: Side) -> None:
    ours, theirs, pause = (statistics.median(x) for x in (side.ours_ms, side.theirs_ms, side.pause_ms))
    ratio = ours / theirs
    verdict = "ok" if ratio <= TARGET else f"over {TARGET}x"
    fastest = min(side.ours_ms) / min(side.theirs_ms)  # the least disturbed of each: a check on the machine's noise
    print(
        f"[{label}] {side.engine:13s} N={history:3d} ({side.stored:3d} stored): resume ours {ours:7.2f} ms   "
        f"theirs {theirs:7.2f} ms   {ratio:4.2f}x ({verdict}; fastest {fastest:4.2f}x)   "
        f"pause write {pause:6.2f} ms ({pause / ours:4.0%} of ours)"
    )


def main() -> None:
    print(f"{CYCLES} timed resumes per system, engine and N (BENCH_CYCLES), medians")
    for kind in ("sqlite", "postgresql"):
        if kind not in DATABASES:
            continue
        with migrated_database(kind) as url, tempfile.TemporaryDirectory() as folder:
            Path(folder, "smoke").mkdir()
            anyio.run(bench, url, kind, folder)


if __name__ == "__main__":
    main()
