"""A worker's write has two implementations on PostgreSQL's hot path; random sequences prove them equal.

`_run_writes.apply_write` (SQLAlchemy Core, what SQLite runs) and `approvals_run_write_v2` (one
function call, what PostgreSQL runs) are driven with the same random sequence of writes,
each on its own PostgreSQL database. After every write both must have refused it the same
way or stored the same rows, and their audit chains must have the same hashes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from approvals.store import Database, Store
from approvals.store._pg import pg_run_write
from approvals.store._run_writes import apply_write
from approvals.store._writes import Interrupted, RunEvent, RunWrite, tool_definition_row
from approvals.store.migrate import upgrade
from approvals.tools import ToolDefinition

from .conftest import BACKENDS
from .test_migrations import empty_database

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="both paths run on PostgreSQL")

RUN, WORKER, AGENT = "run1", "w1", "agent"
START = dt.datetime(2026, 11, 24, 3, 0, tzinfo=dt.UTC)
TOOL = ToolDefinition(name="act", description="Act.", parameters_json_schema={"type": "object"})
CALL_IDS = [f"tc{i}" for i in range(4)]
ODD = st.one_of(
    st.integers(-5, 5), st.sampled_from([1e16, -0.0, 2.5e-7, 1.5, 10**20]), st.text(max_size=5).filter("\x00".__ne__)
)
PAUSED = [("pause", CALL_IDS[:3]), ("approve", "tc0"), ("approve", "tc1")]
EXECUTING = [*PAUSED, ("execute", ["tc0", "tc1"])]
PREAMBLES = [PAUSED, EXECUTING, [*EXECUTING, ("release", ["tc1"])], [*EXECUTING, ("interrupt", "tc0")]]
"""Every sequence starts with approved or executing calls, so starting, settling and releasing them is reached."""
TABLES = {
    "runs": "id",
    "messages": "run_id, seq",
    "tool_calls": "id",
    "decisions": "id",
    "audit_events": "id",
    "tool_definitions": "version",
}

ops = st.one_of(
    st.tuples(st.just("step"), st.lists(st.text(max_size=8).filter("\x00".__ne__), min_size=1, max_size=3)),
    st.tuples(st.just("pause"), st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("approve"), st.sampled_from(CALL_IDS)),
    st.tuples(st.just("execute"), st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True)),
    st.tuples(
        st.just("settle"),
        st.dictionaries(
            st.sampled_from(CALL_IDS), st.tuples(st.sampled_from(["succeeded", "failed"]), ODD), max_size=2
        ),
    ),
    st.tuples(st.just("release"), st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("interrupt"), st.one_of(st.none(), st.sampled_from(CALL_IDS))),
    st.tuples(st.just("event"), st.dictionaries(st.sampled_from(["a", "b"]), ODD, max_size=2)),
    st.tuples(st.just("let_go"), st.none()),
    st.tuples(st.just("hold_again"), st.none()),
)


def write_for(op: str, arg: Any, index: int, now: dt.datetime) -> RunWrite | str:
    """The write an operation makes, or the SQL it runs on both databases alike (what a reviewer or a claim does)."""
    base: dict[str, Any] = {"run_id": RUN, "worker_id": WORKER, "now": now}
    if op == "step":
        return RunWrite(**base, messages=[ModelResponse(parts=[TextPart(content=t)]) for t in arg])
    if op == "pause":
        calls = [
            {
                "id": f"{index}-{tool_call_id}",
                "tool_call_id": tool_call_id,
                "tool_name": TOOL.name,
                "tool_version": TOOL.version,
                "args": {"n": index},
                "args_digest": "0" * 64,
                "reason": None,
                "approvals_required": 1,
                "idempotent": False,
                "expires_at": None,
            }
            for tool_call_id in arg
        ]
        parts: list[TextPart | ThinkingPart | ToolCallPart] = [
            ToolCallPart(tool_name=TOOL.name, args={"n": index}, tool_call_id=t) for t in arg
        ]
        return RunWrite(**base, messages=[ModelResponse(parts=parts)], calls=calls, tool_definitions=[TOOL])
    if op == "approve":
        return (
            f"WITH c AS (UPDATE tool_calls SET status = 'approved' WHERE tool_call_id = '{arg}' AND status = 'pending' "
            "RETURNING id) INSERT INTO decisions (call_id, actor, verdict, args_digest, created_at) "
            f"SELECT id, 'alice', 'approve', repeat('0', 64), '{now.isoformat()}' FROM c"
        )
    if op == "execute":
        return RunWrite(**base, start_executing=arg)
    if op == "settle":
        return RunWrite(**base, results=arg)
    if op == "release":
        return RunWrite(**base, released=arg)
    if op == "interrupt":
        return RunWrite(**base, interrupted=Interrupted(failed_tool_call_id=arg, error=f"boom {index}"))
    if op == "event":
        return RunWrite(**base, events=[RunEvent("run.noted", "run", RUN, None, arg)])
    if op == "let_go":
        return RunWrite(**base, changes={"status": "awaiting_approval", "lease_owner": None, "lease_expires_at": None})
    return f"UPDATE runs SET status = 'resuming', lease_owner = '{WORKER}' WHERE id = '{RUN}'"


def rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall() for table, order in TABLES.items()
        }


def fresh(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        conn.execute(
            "INSERT INTO runs (id, agent_name, status, message_count, lease_owner, created_at, updated_at) "
            "VALUES (%s, %s, 'resuming', 0, %s, %s, %s)",
            (RUN, AGENT, WORKER, START, START),
        )
        definition = tool_definition_row(TOOL, START)
        conn.execute(
            "INSERT INTO tool_definitions (version, name, definition, created_at) VALUES (%s, %s, %s, %s)",
            (definition["version"], definition["name"], psycopg.types.json.Jsonb(definition["definition"]), START),
        )


@asynccontextmanager
async def two_databases(tmp_path: Path) -> AsyncIterator[tuple[tuple[str, Store], tuple[str, Store]]]:
    with empty_database("postgresql", tmp_path) as python_url, empty_database("postgresql", tmp_path) as sql_url:
        upgrade(python_url)
        upgrade(sql_url)
        python_db, sql_db = Database(python_url), Database(sql_url)
        try:
            yield (python_url, Store(python_db)), (sql_url, Store(sql_db))
        finally:
            await python_db.dispose()
            await sql_db.dispose()


async def outcome(coroutine: Any) -> str:
    """What a write came to: stored, or the kind of refusal."""
    try:
        await coroutine
    except Exception as exc:
        return type(exc).__name__
    return "stored"


async def by_python(store: Store, write: RunWrite) -> None:
    await store.run_statements(lambda tx: apply_write(tx, write))


def test_random_writes_store_the_same_rows_and_audit_hashes_on_both_paths(tmp_path: Path) -> None:
    async def check(sequences: list[list[tuple[str, Any]]]) -> None:
        async with two_databases(tmp_path) as ((python_url, python_store), (sql_url, sql_store)):
            for sequence in sequences:
                fresh(python_url)
                fresh(sql_url)
                for index, (op, arg) in enumerate(sequence):
                    write = write_for(op, arg, index, START + dt.timedelta(seconds=index))
                    if isinstance(write, str):
                        for url in (python_url, sql_url):
                            with psycopg.connect(url, autocommit=True) as conn:
                                conn.execute(write.encode())
                        continue
                    by_sql = await outcome(pg_run_write(sql_store.db, write, set()))
                    assert await outcome(by_python(python_store, write)) == by_sql, (index, op, arg)
                    assert rows(python_url) == rows(sql_url), (index, op, arg)
                verification = await sql_store.verify_audit()
                assert verification.ok, verification.problem

    collected: list[list[tuple[str, Any]]] = []

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(PREAMBLES), st.lists(ops, min_size=1, max_size=14))
    def gather(preamble: list[tuple[str, Any]], sequence: list[tuple[str, Any]]) -> None:
        collected.append([*preamble, *sequence])

    gather()
    anyio.run(check, collected)
