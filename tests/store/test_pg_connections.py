"""PostgreSQL's hot path keeps a few connections in autocommit mode between calls, and pipelines its statements.

What that must not change: the pool's sessions still get connections in transaction
mode, a connection the server dropped is never used twice, and disposing of the
database closes the kept ones too (the pool's own dispose cannot reach them). What the
pipeline costs in round trips, and that a write it refuses leaves its connection usable.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from approvals import Conflict, LeaseLost
from approvals.calls.states import CallStatus
from approvals.engines.native.messages import ModelResponse, TextPart
from approvals.store import ClaimedRun, Database, Store
from approvals.store.backends import postgres
from approvals.store.backends.postgres import pooled_connection

from .conftest import BACKENDS, connections_in_use
from .test_run_writes import decided_shop_run

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL's hot path"),
]


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[Database]:
    database = Database(postgres_url)
    try:
        yield database
    finally:
        await database.dispose()


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)


async def backend_pid(database: Database) -> int:
    async with pooled_connection(database) as connection:
        assert connection.autocommit
        row = await (await connection.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return int(row[0])


async def test_calls_reuse_a_kept_connection_and_sessions_still_get_transactions(database: Database) -> None:
    first = await backend_pid(database)
    assert await backend_pid(database) == first
    assert database.autocommit_connections is not None and database.autocommit_connections.idle == 1
    async with database.write() as session:  # the pool's own connections are in transaction mode
        await session.execute(text("CREATE TEMP TABLE scratch (n int)"))
        await session.execute(text("INSERT INTO scratch VALUES (1)"))
        assert (await session.execute(text("SELECT count(*) FROM scratch"))).scalar() == 1
        await session.rollback()  # undoes it all: a connection in autocommit mode could not
        with pytest.raises(DBAPIError, match="scratch"):
            await session.execute(text("SELECT count(*) FROM scratch"))


async def test_a_kept_connection_the_server_dropped_fails_one_call_and_is_replaced(
    database: Database, postgres_url: str
) -> None:
    dropped = await backend_pid(database)
    with admin(postgres_url) as connection:
        connection.execute("SELECT pg_terminate_backend(%s)", (dropped,))
    with pytest.raises(DBAPIError):  # a transient error the caller retries, as any dropped connection
        await backend_pid(database)
    assert database.autocommit_connections is not None and database.autocommit_connections.idle == 0
    assert await backend_pid(database) != dropped


async def test_kept_connections_plan_for_the_hot_path_and_the_pools_as_usual(database: Database) -> None:
    """Kept connections plan without bitmap scans and with generic plans at once; the pool's plan as usual."""
    kept = database.autocommit_connections
    assert kept is not None
    pooled, since = await kept.take()
    connection = cast("psycopg.AsyncConnection[Any]", pooled.driver_connection)
    assert await (await connection.execute("SHOW enable_bitmapscan")).fetchone() == ("off",)
    assert await (await connection.execute("SHOW plan_cache_mode")).fetchone() == ("force_generic_plan",)
    await kept.give_back(pooled, since, keep=False)  # back to the pool
    async with database.engine.connect() as session_connection:
        assert (await session_connection.execute(text("SHOW enable_bitmapscan"))).scalar() == "on"
        assert (await session_connection.execute(text("SHOW plan_cache_mode"))).scalar() == "auto"


async def test_disposing_closes_the_kept_connections(database: Database, postgres_url: str) -> None:
    kept = await backend_pid(database)
    await database.dispose()
    with admin(postgres_url) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (kept,)).fetchone()
    assert row == (0,)


def postgres_only(store: Store) -> None:
    if not store.db.is_postgres:
        pytest.skip("PostgreSQL's pipeline")


@asynccontextmanager
async def traced(db: Database, trace: Path) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """`pooled_connection`, with the messages sent and received written to `trace` (libpq's trace)."""
    async with pooled_connection(db) as connection:
        with trace.open("a") as file:
            connection.pgconn.trace(file.fileno())
            connection.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                yield connection
            finally:
                connection.pgconn.untrace()


def round_trips(trace: Path) -> int:
    """Round trips in `trace`: the Sync messages sent, each answered once the server has run what came before."""
    return sent(trace, "Sync")


def statements(trace: Path) -> int:
    """Statements in `trace`: the Bind messages sent (BEGIN and COMMIT among them)."""
    return sent(trace, "Bind")


def sent(trace: Path, message: str) -> int:
    if not trace.exists():
        return 0
    return sum(1 for line in trace.read_text().splitlines() if line.split("\t")[0] == "F" and f"\t{message}" in line)


async def test_a_worker_write_is_one_round_trip_and_a_claim_two(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What each of a worker's operations costs in round trips and statements, audit appends and COMMIT included:
    a write that moves no call is one statement."""
    postgres_only(store)
    run_id, ids = await decided_shop_run(store, tmp_path)
    store.runs._stale_leases.checked_at = time.monotonic()  # no look for dead workers' runs now
    trace = tmp_path / "trace"
    monkeypatch.setattr(postgres, "pooled_connection", lambda db: traced(db, trace))
    costs = []

    async def cost(write: Awaitable[object]) -> object:
        before = round_trips(trace), statements(trace)
        result = await write
        costs.append((round_trips(trace) - before[0], statements(trace) - before[1]))
        return result

    claimed = await cost(store.runs.claim("w1", run_id=run_id))  # lease, start the calls; history, audit, COMMIT
    assert isinstance(claimed, ClaimedRun) and claimed.executing
    step = [ModelResponse(parts=[TextPart(content="refunded")])]
    await cost(store.runs.append_step(run_id, "w1", step))  # its steps, guards and audit appends: one statement
    results = {call_id: (CallStatus.SUCCEEDED, "ok") for call_id in claimed.executing}
    await cost(store.runs.append_step(run_id, "w1", step, results=results))  # the server names the calls it settled
    await cost(store.runs.finish(run_id, "w1", step, output="done"))  # guards raise in the server: audited, one trip
    assert costs == [(2, 7), (1, 1), (1, 1), (1, 1)]
    assert (await store.runs.get_run(run_id)).status == "completed"
    assert (await store.calls.get_call(ids["refund"])).status == "succeeded"
    assert (await store.audit.verify_audit()).ok


async def test_a_refused_write_ends_its_transaction_and_keeps_its_connection(store: Store, tmp_path: Path) -> None:
    """A write whose guard did not hold rolls back (or committed nothing): the connection stays in the pool."""
    postgres_only(store)
    run_id, ids = await decided_shop_run(store, tmp_path)
    assert await store.runs.claim("w1", run_id=run_id) is not None
    stored = (await store.runs.get_run(run_id)).message_count
    pid = await backend_pid(store.db)
    step = [ModelResponse(parts=[TextPart(content="late")])]
    with pytest.raises(LeaseLost):
        await store.runs.append_step(run_id, "someone-else", step)  # committed with nothing written
    with pytest.raises(LeaseLost):
        await store.runs.finish(run_id, "someone-else", step, output="done")  # rolled back
    with pytest.raises(Conflict, match="not every call to execute is approved"):
        await store.runs.mark_executing(
            run_id, "w1", [(await store.calls.get_call(ids["delete_customer"])).tool_call_id]
        )
    assert await backend_pid(store.db) == pid
    assert connections_in_use(store) == 0
    run = await store.runs.get_run(run_id)
    assert (run.status, run.lease_owner, run.message_count) == ("resuming", "w1", stored)
    await store.runs.finish(run_id, "w1", step, output="done")  # the run's lock is free
    assert (await store.runs.get_run(run_id)).status == "completed"
    assert (await store.audit.verify_audit()).ok


async def test_a_claim_that_finds_no_run_keeps_its_connections_prepared_statements(
    store: Store, tmp_path: Path
) -> None:
    """An idle worker's claim leases nothing and ends with COMMIT: a ROLLBACK would deallocate them all."""
    postgres_only(store)
    run_id, _ = await decided_shop_run(store, tmp_path)
    assert await store.runs.claim("w1", run_id=run_id) is not None  # the hot path's statements are prepared now
    pid = await backend_pid(store.db)
    for _ in range(2):
        assert await store.runs.claim("w2") is None  # nothing is ready
    async with pooled_connection(store.db) as connection:
        await connection.execute("SELECT 1")  # psycopg deallocates what it forgot before its next statement
        prepared = await connection.execute("SELECT pg_backend_pid(), count(*) FROM pg_prepared_statements")
        row = await prepared.fetchone()
    assert row is not None
    assert (row[0], row[1] > 0) == (pid, True)
