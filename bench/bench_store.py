"""The durable store under load: write cost per step, pause latency, wake-up latency, throughput.

`python bench/bench_store.py decisions` measures only the decisions: one client's latency
on both databases and 4 clients' throughput on PostgreSQL.

Targets (issues 4 and 15):
- bytes written per step stay the size of the step's new messages at any history length;
- a pause costs under 3 ms on PostgreSQL at any history length;
- a decision wakes the resumer in under 50 ms (LISTEN/NOTIFY, no polling sleep);
- at least 700 decisions/s and 300 resumes/s (no-op model) with 4 workers on PostgreSQL;
- a decision's p50 at most 5 ms on PostgreSQL with one client.

The 4 workers are measured three ways, as `run_worker` can hold several runs at once:
4 processes of 1 run each, 2 processes of 2, and 1 process of 4. The tables are analyzed
once the runs are made, as autovacuum would on a live database; one poller in the parent
process, not in the workers, sees when every run is resumed.

Needs the local PostgreSQL (APPROVALS_BENCH_PG_URL, default postgresql://postgres@127.0.0.1/postgres);
creates and drops its own databases.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import create_pg_database, drop_pg_database

from approvals import Agent, Tool
from approvals.calls.verdicts import Approve
from approvals.engines.native.deferred import DeferredToolCall, DeferredToolRequests
from approvals.engines.native.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, dump_message
from approvals.engines.native.models import TestModel
from approvals.store import Actor, Database, Store
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, Resumer, run_worker

PAUSE_SAMPLES = 40
PAUSE_WARMUP = 10
SERVICE = Actor("svc", "reviewer")


def act(n: int) -> int:
    """Do nothing much."""
    return n


bench_agent: Agent[None] = Agent(
    TestModel([("act", {"n": 1})], final_text="ok"), name="bench", tools=[Tool(act, requires_approval=True)]
)


def step_messages(i: int) -> list[ModelRequest | ModelResponse]:
    call_id = f"c{i}"
    return [
        ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"order_id": f"A-{i}"}, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart(tool_name="lookup", content={"total": "10.00"}, tool_call_id=call_id)]),
    ]


def deferred(i: int) -> DeferredToolRequests:
    definition = bench_agent.tools["act"].tool_def
    return DeferredToolRequests(
        approvals=[
            DeferredToolCall(
                tool_name="act", tool_call_id=f"d{i}", args={"n": i}, args_digest="0" * 64, tool_def=definition
            )
        ]
    )


async def wal_lsn(store: Store) -> int | None:
    if not store.db.is_postgres:
        return None
    async with store.db.engine.connect() as conn:
        return int(await conn.scalar(text("SELECT pg_current_wal_lsn() - '0/0'")))


async def run_with_history(store: Store, messages: int) -> str:
    run_id = await store.runs.start_run("bench", "go", actor=SERVICE)
    await store.runs.claim("bench-worker", run_id=run_id, lease_seconds=3600)
    steps = [m for i in range(messages // 2) for m in step_messages(i)]
    for start in range(0, len(steps), 200):
        await store.runs.append_step(run_id, "bench-worker", steps[start : start + 200], lease_seconds=3600)
    return run_id


async def bench_steps(url: str, label: str) -> None:
    """Appends and pauses as the resumer makes them: it names the calls it executed (here none)."""
    database = Database(url)
    store = Store(database)
    print(f"\n[{label}] per step (2 new messages) as history grows")
    for history in (10, 100, 1000):
        run_id = await run_with_history(store, history)
        times, wal = [], []
        payload = sum(len(str(dump_message(m))) for m in step_messages(10_000))
        for i in range(30):
            before = await wal_lsn(store)
            start = time.perf_counter()
            await store.runs.append_step(run_id, "bench-worker", step_messages(10_000 + i), lease_seconds=3600)
            times.append(time.perf_counter() - start)
            after = await wal_lsn(store)
            if before is not None and after is not None:
                wal.append(after - before)
        wal_text = f"   WAL written {statistics.median(wal):7.0f} B" if wal else ""
        print(
            f"  history {history:5d} msgs: append {statistics.median(times) * 1e3:6.2f} ms (p50)"
            f"   payload {payload} B{wal_text}"
        )
    print(f"[{label}] pause latency (messages + pending call + status + audit, one transaction)")
    for i in range(PAUSE_WARMUP):  # a worker's connection has its statements prepared after its first pauses
        await store.runs.pause(await run_with_history(store, 2), "bench-worker", step_messages(i), deferred(i))
    for history in (10, 100, 1000):
        runs = [await run_with_history(store, history) for _ in range(PAUSE_SAMPLES)]
        samples = []
        for i, run_id in enumerate(runs):
            start = time.perf_counter()
            await store.runs.pause(run_id, "bench-worker", step_messages(i), deferred(i))
            samples.append(time.perf_counter() - start)
        print(
            f"  history {history:5d} msgs: pause p50 {statistics.median(samples) * 1e3:6.2f} ms"
            f"   p90 {statistics.quantiles(samples, n=10)[-1] * 1e3:6.2f} ms   ({PAUSE_SAMPLES} pauses)"
        )
    await database.dispose()


async def bench_wakeup(url: str, label: str) -> None:
    worker_db, reviewer_db = Database(url), Database(url)
    worker_store = Store(worker_db)
    reviewer_store = Store(reviewer_db, worker_store.notifier if worker_db.is_sqlite else None)
    claimed_at: dict[str, float] = {}
    original_claim = worker_store.runs.claim

    async def timed_claim(*args: Any, **kwargs: Any) -> Any:
        result = await original_claim(*args, **kwargs)
        if result is not None:
            claimed_at[result.run_id] = time.perf_counter()
        return result

    worker_store.runs.claim = timed_claim  # type: ignore[method-assign]
    registry = AgentRegistry([bench_agent])
    latencies = []
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(
            lambda: run_worker(worker_store, registry, poll_interval=3600, expire_interval=3600, stop=stop)
        )
        await anyio.sleep(0.3)
        for _ in range(20):
            run_id = await reviewer_store.runs.start_run("bench", "go", actor=SERVICE)
            while (await reviewer_store.runs.get_run(run_id)).status != "awaiting_approval":
                await anyio.sleep(0.005)
            [call] = await reviewer_store.calls.run_calls(run_id)
            await reviewer_store.calls.decide(call.id, Approve(), actor=Actor("alice", "reviewer"))
            decided = time.perf_counter()
            while run_id not in claimed_at or (await reviewer_store.runs.get_run(run_id)).status != "completed":
                await anyio.sleep(0.005)
            latencies.append(claimed_at[run_id] - decided)
        stop.set()
    print(
        f"[{label}] decision -> resumer claims the run: p50 {statistics.median(latencies) * 1e3:.1f} ms, "
        f"max {max(latencies) * 1e3:.1f} ms (poll interval 3600 s, so this is the wake-up)"
    )
    await worker_db.dispose()
    await reviewer_db.dispose()


def _decide_worker(url: str, call_ids: list[str], actor: str, tasks: int, barrier: Any) -> None:
    """One process deciding `call_ids`, `tasks` at a time (as a web process serves several reviewers)."""

    async def decide_all(store: Store, ids: list[str]) -> None:
        for call_id in ids:
            await store.calls.decide(call_id, Approve(), actor=Actor(actor, "reviewer"))

    async def main() -> None:
        database = Database(url)
        store = Store(database)
        barrier.wait()
        async with anyio.create_task_group() as group:
            for task in range(tasks):
                group.start_soon(decide_all, store, call_ids[task::tasks])
        await database.dispose()

    anyio.run(main)


def _worker_process(url: str, concurrency: int, drained: Any, barrier: Any) -> None:
    """`run_worker` in its own process, stopped once the parent saw no run left to resume."""

    async def stop_when_drained(stop: anyio.Event) -> None:
        await anyio.to_thread.run_sync(drained.wait)
        stop.set()

    async def main() -> None:
        database = Database(url)
        store = Store(database)
        stop = anyio.Event()
        barrier.wait()
        async with anyio.create_task_group() as group:
            group.start_soon(stop_when_drained, stop)
            await run_worker(
                store,
                AgentRegistry([bench_agent]),
                concurrency=concurrency,
                poll_interval=0.05,
                expire_interval=3600,
                stop=stop,
            )
        await database.dispose()

    anyio.run(main)


def resume_all(url: str, processes: int, concurrency: int) -> float:
    """Seconds until `processes` workers have resumed every ready run; one poller (here) watches for that."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes + 1)
    drained = context.Event()
    workers = [
        context.Process(target=_worker_process, args=(url, concurrency, drained, barrier)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
        barrier.wait()
        start = time.perf_counter()
        # EXISTS stops at the first live row (and its index scans skip what they found dead before)
        left = "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'ready' OR status = 'resuming')"
        while (row := connection.execute(left).fetchone()) and row[0]:
            time.sleep(0.02)
        seconds = time.perf_counter() - start
    drained.set()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise SystemExit(f"worker failed with exit code {worker.exitcode}")
    return seconds


async def analyze(database: Database) -> None:
    """Table statistics, as autovacuum would gather them on a live database (it may be off where this runs).

    Without them the planner takes a table it has never measured for a handful of rows, and
    sorts every ready run to find the oldest instead of reading the index in order.
    """
    async with database.engine.connect() as connection:
        await connection.execute(text("ANALYZE"))
        await connection.commit()


async def prepare_paused_runs(url: str, count: int) -> list[str]:
    database = Database(url)
    store = Store(database)
    resumer = Resumer(store, AgentRegistry([bench_agent]), worker_id="setup")
    for _ in range(count):
        await store.runs.start_run("bench", "go", actor=SERVICE)
    await analyze(database)
    while await resumer.resume() is not None:
        pass
    await analyze(database)
    page = await store.calls.list_calls(limit=500)
    ids = [c.id for c in page.items]
    while page.next_cursor:
        page = await store.calls.list_calls(limit=500, after=page.next_cursor)
        ids.extend(c.id for c in page.items)
    await database.dispose()
    return ids


def parallel(target: Any, args_list: list[tuple[Any, ...]]) -> float:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(args_list) + 1)
    processes = [context.Process(target=target, args=(*args, barrier)) for args in args_list]
    for process in processes:
        process.start()
    barrier.wait()
    start = time.perf_counter()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"worker failed with exit code {process.exitcode}")
    return time.perf_counter() - start


async def bench_decision_latency(url: str, label: str, count: int = 300) -> None:
    """One reviewer deciding paused calls one after another: the latency of one decision."""
    ids = await prepare_paused_runs(url, count)
    database = Database(url)
    store = Store(database)
    reviewer = Actor("reviewer", "reviewer")
    samples = []
    for call_id in ids:
        start = time.perf_counter()
        await store.calls.decide(call_id, Approve(), actor=reviewer)
        samples.append((time.perf_counter() - start) * 1000)
    await database.dispose()
    samples = samples[20:]  # warm-up: connections, prepared statements
    p50, p95 = statistics.median(samples), statistics.quantiles(samples, n=20)[18]
    print(f"[{label}] decision, one client: p50 {p50:.2f} ms, p95 {p95:.2f} ms ({len(samples)} decisions)")


THROUGHPUT_SHAPES = ((4, 1), (2, 2), (1, 4))
"""4 workers as (processes, runs each continues at once): one per process, two per process, all in one."""


def bench_throughput(url: str, processes: int, concurrency: int, runs: int = 2000, *, resumes: bool = True) -> None:
    ids = anyio.run(prepare_paused_runs, url, runs)
    chunks = [ids[i::processes] for i in range(processes)]
    shape = f"{processes} process{'es' if processes > 1 else ''} x {concurrency}"
    seconds = parallel(_decide_worker, [(url, chunk, f"reviewer{i}", concurrency) for i, chunk in enumerate(chunks)])
    print(f"[postgresql] {shape}: {len(ids)} decisions {len(ids) / seconds:6.0f} /s", end="" if resumes else "\n")
    if not resumes:
        return
    seconds = resume_all(url, processes, concurrency)
    print(f"   {len(ids)} resumes {len(ids) / seconds:6.0f} /s (no-op model)")


def main() -> None:
    only_decisions = sys.argv[1:] == ["decisions"]
    pg_url = create_pg_database()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_url = f"sqlite:///{tmp}/decisions.db"
        upgrade(sqlite_url)
        try:
            anyio.run(bench_decision_latency, pg_url, "postgresql")
            anyio.run(bench_decision_latency, sqlite_url, "sqlite")
        finally:
            drop_pg_database(pg_url)
    if only_decisions:
        decisions_url = create_pg_database()
        try:
            bench_throughput(decisions_url, 4, 1, resumes=False)
        finally:
            drop_pg_database(decisions_url)
        return
    pg_url = create_pg_database()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_url = f"sqlite:///{tmp}/bench.db"
        upgrade(sqlite_url)
        try:
            anyio.run(bench_steps, pg_url, "postgresql")
            anyio.run(bench_steps, sqlite_url, "sqlite")
            anyio.run(bench_wakeup, pg_url, "postgresql")
            anyio.run(bench_wakeup, sqlite_url, "sqlite")
        finally:
            drop_pg_database(pg_url)
    print("4 workers, no-op model; deciders are shaped like the workers:")
    for processes, concurrency in THROUGHPUT_SHAPES:
        throughput_url = create_pg_database()
        try:
            bench_throughput(throughput_url, processes, concurrency)
        finally:
            drop_pg_database(throughput_url)


if __name__ == "__main__":
    main()
