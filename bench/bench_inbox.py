"""The inbox page's server time with 1,000, 100,000 and 1,000,000 pending calls (SQLite up to 100,000).

Targets: p95 under 50 ms for GET / at 100,000 pending calls (the reviewer web app's issue); p95 under
100 ms at 1,000,000 pending on PostgreSQL, with filters (issue 41). Counts by status stop at 10,000
(`COUNT_CAP`), so the page shows "10,000+" and a million rows are never counted.

Each case makes a fresh database (migrated with the real alembic scripts), inserts the
calls in bulk with SQL (a run per ten calls, one shared tool definition), then times
GET / through the ASGI app with a logged-in reviewer: the first page of 50, the counts per
status, rendering. Also timed, for information: a tool filter, the second page (keyset
cursor), and a text search over the arguments (a scan: no index can serve `ILIKE '%x%'`).

Needs the local PostgreSQL (APPROVALS_BENCH_PG_URL, default postgresql://postgres@127.0.0.1/postgres);
creates and drops its own databases. `APPROVALS_BENCH_SIZES=1000,100000` picks the sizes,
`APPROVALS_BENCH_DATABASES=postgresql` the databases. On PostgreSQL the calls past the first
10,000 are copied from them in the server (INSERT ... SELECT), so a million take a minute.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
from sqlalchemy import insert, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from approvals import Agent, Tool
from approvals.calls.canonical import digest
from approvals.engines.native.models import TestModel
from approvals.store import SYSTEM, Store
from approvals.store.migrate import upgrade
from approvals.store.models import RunRow, ToolCallRow, ToolDefinitionRow
from approvals.store.queries import COUNT_CAP
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

PG_SERVER = os.environ.get("APPROVALS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SIZES = [int(n) for n in os.environ.get("APPROVALS_BENCH_SIZES", "1000,100000,1000000").split(",")]
DATABASES = os.environ.get("APPROVALS_BENCH_DATABASES", "sqlite,postgresql").split(",")
SQLITE_AT_MOST = 100_000
"""SQLite is the embedded, single-machine database: a million pending calls is PostgreSQL's scale."""
PASSWORD = "bench-password-1"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer.

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The message.
    """
    return "sent"


def refund(order_id: str, amount: float, reason: str) -> str:
    """Refund an order.

    Args:
        order_id: The order.
        amount: How much.
        reason: Why.
    """
    return "refunded"


TOOLS = [Tool(send_email, requires_approval=True), Tool(refund, requires_approval=True)]
bench_agent: Agent[None] = Agent(TestModel([]), name="support", tools=TOOLS)


def create_pg_database() -> str:
    name = f"approvals_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return PG_SERVER.rsplit("/", 1)[0] + f"/{name}"


def drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SEED = 10_000
"""On PostgreSQL the first SEED calls are inserted as rows, the rest copied from them in the server."""


async def fill(store: Store, pending: int) -> None:
    """`pending` calls waiting for a person, a second apart, oldest first; ten per run."""
    if store.db.is_postgres and pending > SEED and pending % SEED == 0:
        await fill_rows(store, SEED, offset=pending - SEED)
        await copy_in_server(store, pending // SEED - 1)
    else:
        await fill_rows(store, pending)
    await analyze(store)


async def copy_in_server(store: Store, copies: int) -> None:
    """`copies` more of every run and call, each copy SEED seconds older, made by INSERT ... SELECT: a million
    rows in a minute where sending them would take ten."""
    shift = {"created_at", "updated_at", "expires_at"}
    renamed = {"id": "{c} || '-' || s", "run_id": "{c} || '-' || s", "tool_call_id": "{c} || '-' || s"}
    async with store.db.engine.begin() as conn:
        for table in ("runs", "tool_calls"):
            columns = [
                row[0]
                for row in await conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = :t ORDER BY ordinal_position"
                    ),
                    {"t": table},
                )
            ]
            values = []
            for column in columns:
                if column in renamed:
                    values.append(renamed[column].format(c=column))
                elif column in shift:
                    values.append(f"{column} - make_interval(secs => s * {SEED})")
                else:
                    values.append(column)
            names = ", ".join(columns)
            source = f"(SELECT * FROM {table}) AS seed, generate_series(1, {copies}) AS s"
            if table == "tool_calls":
                values[columns.index("id")] = "substr(md5(id || '-' || s), 1, 32)"
            await conn.execute(text(f"INSERT INTO {table} ({names}) SELECT {', '.join(values)} FROM {source}"))


async def fill_rows(store: Store, pending: int, *, offset: int = 0) -> None:
    """`pending` calls inserted as rows, the `offset`-th second onwards."""
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=pending + 60 - offset)
    definitions = {tool.name: tool.tool_def for tool in TOOLS}
    async with store.db.engine.begin() as conn:
        for definition in definitions.values():
            await conn.execute(
                insert(ToolDefinitionRow).values(
                    version=definition.version,
                    name=definition.name,
                    definition={
                        "name": definition.name,
                        "description": definition.description,
                        "parameters_json_schema": definition.parameters_json_schema,
                    },
                    created_at=start,
                )
            )
    batch = 10_000
    for first in range(0, pending, batch):
        runs: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for i in range(first, min(first + batch, pending)):
            at = start + dt.timedelta(seconds=i)
            run_id = f"run{i // 10:012d}"
            if i % 10 == 0:
                runs.append(
                    {"id": run_id, "agent_name": "support", "status": "awaiting_approval", "prompt": f"ticket {i}",
                     "message_count": 0, "created_at": at, "updated_at": at}
                )  # fmt: skip
            if i % 3 == 0:
                tool, args = "refund", {"order_id": f"A-{i}", "amount": 10 + i % 90, "reason": "arrived broken"}
            else:
                tool, args = "send_email", {"to": f"customer{i}@example.com", "subject": "Your order", "body": "Hello"}
            calls.append(
                {"id": uuid.uuid4().hex, "run_id": run_id, "tool_call_id": f"call_{i}", "agent_name": "support",
                 "tool_name": tool, "tool_version": definitions[tool].version, "args": args, "args_digest": digest(args),
                 "status": "pending", "approvals_required": 1, "idempotent": False,
                 "expires_at": at + dt.timedelta(hours=48), "created_at": at, "updated_at": at}
            )  # fmt: skip
        async with store.db.engine.begin() as conn:
            if runs:
                await conn.execute(insert(RunRow), runs)
            await conn.execute(insert(ToolCallRow), calls)


async def analyze(store: Store) -> None:
    async with store.db.engine.connect() as conn:
        await conn.execute(text("ANALYZE"))
        await conn.commit()
    if store.db.is_postgres:
        async with store.db.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            await driver.set_autocommit(True)
            await driver.execute("VACUUM ANALYZE tool_calls")  # as autovacuum would soon do: index-only scans


async def login(client: httpx.AsyncClient) -> None:
    page = await client.get("/login")
    token = CSRF.search(page.text)
    assert token is not None
    response = await client.post(
        "/login", data={"username": "bench", "password": PASSWORD, "csrf_token": token.group(1)}
    )
    assert response.status_code == 303, response.text


async def timed(client: httpx.AsyncClient, path: str, rounds: int) -> tuple[float, float]:
    """p50 and p95 in milliseconds of GET `path`, after a warm-up."""
    for _ in range(5):
        assert (await client.get(path)).status_code == 200
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        response = await client.get(path)
        times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


async def bench(url: str, label: str, pending: int) -> None:
    upgrade(url)
    app = create_app(
        Settings(database_url=url, worker=False, secret_key="bench"), registry=AgentRegistry([bench_agent])
    )
    async with app.router.lifespan_context(app):
        store: Store = app.state.context.store
        began = time.perf_counter()
        await fill(store, pending)
        setup = time.perf_counter() - began
        await store.people.create_user("bench", PASSWORD, role="reviewer", actor=SYSTEM)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            await login(client)
            first = await client.get("/")
            assert first.text.count('<tr id="row-') == 50, "the first page is full"
            shown = f"{COUNT_CAP:,}+" if pending > COUNT_CAP else str(pending)
            assert f'pending <span class="count">{shown}</span>' in first.text
            cursor = re.search(r'href="(/\?[^"]*after=[^"]+)"', first.text)
            assert cursor is not None
            second = cursor.group(1).replace("&amp;", "&")
            rounds = 200 if pending <= 10_000 else 100
            print(f"{label:10} {pending:>7,} pending (setup {setup:5.1f} s)")
            for name, path, n in [
                ("GET /", "/", rounds),
                ("tool filter", "/?tool=refund", rounds),
                ("agent filter", "/?agent=support", rounds),
                ("for me", "/?for_me=1", rounds),
                ("page 2", second, rounds),
                ("text search", "/?q=customer77", 20),
            ]:
                p50, p95 = await timed(client, path, n)
                target = "  (target p95 < 50 ms)" if path == "/" else ""
                print(f"  {name:12} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms{target}")


async def main() -> None:
    for pending in SIZES:
        if "sqlite" in DATABASES and pending <= SQLITE_AT_MOST:
            with tempfile.TemporaryDirectory() as folder:
                await bench(f"sqlite:///{folder}/bench.db", "SQLite", pending)
        if "postgresql" not in DATABASES:
            continue
        url = create_pg_database()
        try:
            await bench(url, "PostgreSQL", pending)
        finally:
            drop_pg_database(url)


if __name__ == "__main__":
    anyio.run(main)
