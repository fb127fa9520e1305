"""PostgreSQL's decisions (`postgres_decisions`): two round trips, one write, a clean connection after a refusal.

Also what the decision reads with less Python: the call's column names known in advance,
and the call filled as SQLAlchemy fills a loaded row (`loaded_call`, SQLite's path too).

The write statement puts the plan's writes (`plan_statements`, what SQLite runs one by
one) into one statement with the audit appends; the same decisions go through it and
through the statements one by one, on two copies of one database, and every table must
come out the same, audit hashes included.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import inspect

from approvals import Conflict, NotFound
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.store import Actor, Database, Store
from approvals.store.backends import postgres_decisions
from approvals.store.backends.postgres import pooled_connection
from approvals.store.backends.postgres_decisions import pg_decide
from approvals.store.backends.postgres_statements import positional, raw_cursor
from approvals.store.decision_sql import LOCK_CALL, LOCK_CALL_COLUMNS, decide_statements, loaded_call
from approvals.store.migrate import upgrade
from approvals.store.models import ToolCallRow
from approvals.store.run_sql import Tx
from approvals.worker.resumer import AgentRegistry, Resumer

from .agents import shop_agent
from .conftest import BACKENDS, PG_SERVER, connections_in_use
from .test_pg_connections import round_trips, traced

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL's decision path"),
]

SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")
NOW = dt.datetime(2026, 11, 24, 5, 0, 0, 123456, tzinfo=dt.UTC)
TABLES = {"runs": "id", "tool_calls": "id", "decisions": "id", "audit_events": "id"}


@contextmanager
def database(template: str | None = None) -> Iterator[str]:
    """A new database (a copy of `template`, else empty), dropped afterwards."""
    name = f"approvals_dec_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield name
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def url(name: str) -> str:
    return PG_SERVER.rsplit("/", 1)[0] + f"/{name}"


async def paused_runs(store: Store, tmp_path: Path, count: int) -> list[dict[str, str]]:
    """`count` shop runs waiting on their calls: refund (one approval) and delete_customer (two)."""
    runs = []
    for index in range(count):
        run_id = await store.runs.start_run("shop", f"run {index}", actor=SERVICE, deps={"log": str(tmp_path / "log")})
        await Resumer(store, AgentRegistry([shop_agent])).resume(run_id)
        runs.append({call.tool_name: call.id for call in await store.calls.run_calls(run_id)})
    return runs


def statements(call_id: str, verdict: Verdict, actor: Actor, tx: Tx) -> object:
    """The decision's statements one by one, through SQLAlchemy (as on SQLite), its events chained at commit."""
    return decide_statements(tx, call_id, verdict, actor, NOW)


def table_rows(name: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url(name)) as connection:
        return {
            table: connection.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            for table, key in TABLES.items()
        }


async def test_the_one_write_statement_stores_what_the_statements_one_by_one_store(tmp_path: Path) -> None:
    with database() as original:
        upgrade(url(original))
        db = Database(url(original))
        runs = await paused_runs(Store(db), tmp_path, 2)
        await db.dispose()
        decisions: list[tuple[str, Verdict, Actor]] = [
            (runs[0]["refund"], EditAndApprove(args={"order_id": "A-1", "amount": "12.50"}), ALICE),
            (runs[0]["delete_customer"], Approve(), ALICE),  # one of two approvals: the call stays pending
            (runs[0]["delete_customer"], Approve(), BOB),  # the last open call: the run becomes ready
            (runs[1]["refund"], Deny(reason="Too much."), BOB),
            (runs[1]["delete_customer"], Answer(content={"deleted": False, "note": "Lindenstraße"}), ALICE),
        ]
        with database(original) as one_statement, database(original) as one_by_one:
            for name, decide in ((one_statement, pg_decide), (one_by_one, None)):
                db = Database(url(name))
                store = Store(db)
                for call_id, verdict, actor in decisions:
                    if decide is None:
                        await store.runs.run_statements(functools.partial(statements, call_id, verdict, actor))
                    else:
                        await decide(db, call_id, verdict, actor, NOW)
                assert (await store.audit.verify_audit()).ok
                await db.dispose()
            stored, expected = table_rows(one_statement), table_rows(one_by_one)
    assert stored == expected
    assert [row[2] for row in stored["runs"]].count("ready") == 2  # (id, agent_name, status, ...)
    assert len(stored["decisions"]) == 5


async def test_a_decision_takes_two_round_trips(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not store.db.is_postgres:
        pytest.skip("PostgreSQL's decision path")
    (calls,) = await paused_runs(store, tmp_path, 1)
    trace = tmp_path / "trace"
    monkeypatch.setattr(postgres_decisions, "pooled_connection", lambda db: traced(db, trace))
    await store.calls.decide(calls["refund"], Approve(), actor=ALICE)
    assert round_trips(trace) == 2
    assert (await store.calls.get_call(calls["refund"])).status == "approved"


async def backend_pid(store: Store) -> int:
    async with pooled_connection(store.db) as connection:
        row = await (await connection.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_refused_decision_ends_its_transaction_and_keeps_its_connection(store: Store, tmp_path: Path) -> None:
    """A refusal after the first round trip rolls back there: the locks go, the connection stays in the pool."""
    if not store.db.is_postgres:
        pytest.skip("PostgreSQL's decision path")
    (calls,) = await paused_runs(store, tmp_path, 1)
    await store.calls.decide(calls["refund"], Deny(reason="No."), actor=ALICE)
    pid = await backend_pid(store)
    with pytest.raises(Conflict, match="denied by alice"):
        await store.calls.decide(calls["refund"], Approve(), actor=BOB)
    with pytest.raises(NotFound):
        await store.calls.decide("no-such-call", Approve(), actor=BOB)
    assert await backend_pid(store) == pid  # not discarded, as a connection left in a transaction would be
    assert connections_in_use(store) == 0
    await store.calls.decide(calls["delete_customer"], Approve(), actor=BOB)  # the run's lock is free
    assert (await store.calls.get_call(calls["delete_customer"])).status == "pending"  # one of two approvals


async def test_the_call_columns_are_named_as_postgresql_describes_them(store: Store, tmp_path: Path) -> None:
    if not store.db.is_postgres:
        pytest.skip("PostgreSQL's decision path")
    (calls,) = await paused_runs(store, tmp_path, 1)
    lock_call = positional(LOCK_CALL)
    async with pooled_connection(store.db) as connection, connection.transaction():
        cursor = await raw_cursor(connection).execute(lock_call.sql, lock_call.args({"call_id": calls["refund"]}))
        assert tuple(column.name for column in cursor.description or ()) == LOCK_CALL_COLUMNS


def test_a_loaded_call_is_the_call_its_constructor_makes() -> None:
    fields: dict[str, Any] = {column.key: None for column in ToolCallRow.__table__.columns}
    fields |= {"id": "c1", "run_id": "r1", "status": CallStatus.PENDING, "args": {"n": 1}, "args_digest": "d"}
    loaded, constructed = loaded_call(dict(fields)), ToolCallRow(**fields)
    assert inspect(loaded).transient
    assert {key: getattr(loaded, key) for key in fields} == {key: getattr(constructed, key) for key in fields}
    assert loaded.is_open and loaded.current_digest == "d"
    loaded.status, loaded.override_digest = CallStatus.APPROVED, "e"
    assert not loaded.is_open and loaded.current_digest == "e"
