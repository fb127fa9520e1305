"""Decisions per second through the JSON API: the ASGI app in process (httpx ASGITransport), SQLite and PostgreSQL.

What one API decision costs on top of `store.calls.decide`: bearer-token lookup, CSRF and role
checks, body validation, the decision's transaction, and the response. Measured one at a
time (latency) and with several clients at once (throughput), beside `store.calls.decide` called
directly, and the inbox read (`GET /api/calls`) for comparison.

Run by hand: `.venv/bin/python bench/bench_api.py`. Needs the local PostgreSQL
(APPROVALS_BENCH_PG_URL, default postgresql://postgres@127.0.0.1/postgres); creates and
drops its own databases.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import create_pg_database, drop_pg_database

from approvals import Agent, Tool
from approvals.calls.verdicts import Approve
from approvals.engines.native.models import TestModel
from approvals.store import SYSTEM, Actor, Store
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, Resumer
from approvals_web.app import create_app
from approvals_web.settings import Settings

SERVICE = Actor("svc", "reviewer")
SEQUENTIAL = 300
CONCURRENT = 600
CLIENTS = 8


def act(n: int) -> int:
    """Do nothing much."""
    return n


bench_agent: Agent[None] = Agent(
    TestModel([("act", {"n": 1})], final_text="ok"), name="bench", tools=[Tool(act, requires_approval=True)]
)


async def pending_calls(store: Store, runs: int) -> list[str]:
    """Start `runs` runs and resume each until it waits for approval of its one call."""
    resumer = Resumer(store, AgentRegistry([bench_agent]), worker_id="setup")
    for _ in range(runs):
        await store.runs.start_run("bench", "go", actor=SERVICE)
    while await resumer.resume() is not None:
        pass
    ids: list[str] = []
    cursor = None
    while True:
        page = await store.calls.list_calls(limit=500, after=cursor)
        ids.extend(c.id for c in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return ids


async def bench(url: str, label: str) -> None:
    app = create_app(
        Settings(database_url=url, worker=False, secret_key="bench"), registry=AgentRegistry([bench_agent])
    )
    async with app.router.lifespan_context(app):
        store: Store = app.state.context.store
        await store.people.create_user("bench-reviewer", "bench-password-1", role="reviewer", actor=SYSTEM)
        token = await store.people.create_token("bench", role="reviewer", actor=SYSTEM, user="bench-reviewer")
        ids = await pending_calls(store, SEQUENTIAL * 2 + CONCURRENT)
        direct, sequential, concurrent = ids[:SEQUENTIAL], ids[SEQUENTIAL : 2 * SEQUENTIAL], ids[2 * SEQUENTIAL :]
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers) as client:
            samples = []
            for _ in range(50):
                start = time.perf_counter()
                response = await client.get("/api/calls", params={"limit": 50})
                samples.append(time.perf_counter() - start)
                assert response.status_code == 200, response.text
            print(
                f"[{label}] GET /api/calls (50 of {len(ids)} pending, with counts): p50 {statistics.median(samples) * 1e3:6.2f} ms"
            )

            start = time.perf_counter()
            for call_id in direct:
                await store.calls.decide(call_id, Approve(), actor=Actor("direct", "reviewer"))
            seconds = time.perf_counter() - start
            print(
                f"[{label}] store.calls.decide directly, one at a time:       {len(direct) / seconds:6.0f} decisions/s"
            )

            samples = []
            start = time.perf_counter()
            for call_id in sequential:
                began = time.perf_counter()
                response = await client.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})
                samples.append(time.perf_counter() - began)
                assert response.status_code == 200, response.text
            seconds = time.perf_counter() - start
            print(
                f"[{label}] POST /api/calls/{{id}}/decision, one at a time: {len(sequential) / seconds:6.0f} decisions/s"
                f"   p50 {statistics.median(samples) * 1e3:.2f} ms, p99 {sorted(samples)[int(len(samples) * 0.99)] * 1e3:.2f} ms"
            )

            async def decide_all(chunk: list[str]) -> None:
                for call_id in chunk:
                    response = await client.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})
                    assert response.status_code == 200, response.text

            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for i in range(CLIENTS):
                    group.start_soon(decide_all, concurrent[i::CLIENTS])
            seconds = time.perf_counter() - start
            print(
                f"[{label}] POST .../decision, {CLIENTS} concurrent clients:       {len(concurrent) / seconds:6.0f} decisions/s"
            )
        page = await store.calls.list_calls(status="approved", limit=500)
        approved = len(page.items)
        while page.next_cursor:
            page = await store.calls.list_calls(status="approved", limit=500, after=page.next_cursor)
            approved += len(page.items)
        assert approved == len(ids), (approved, len(ids))


def main() -> None:
    pg_url = create_pg_database()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_url = f"sqlite:///{tmp}/bench.db"
            upgrade(sqlite_url)
            anyio.run(bench, sqlite_url, "sqlite")
        anyio.run(bench, pg_url, "postgresql")
    finally:
        drop_pg_database(pg_url)


if __name__ == "__main__":
    main()
