"""A worker's write has one implementation; random sequences prove every way of running it stores the same.

`run_sql.write_steps` makes a write's statements. They run three ways: on SQLite one by
one on the `sqlite3` cursor (`apply_write`), on PostgreSQL in a psycopg pipeline
(`backends.postgres.pg_run_write`), and on PostgreSQL through SQLAlchemy (`apply_write` in
`run_statements`, as crash recovery and paused runs take it). The same random sequence of
writes goes to a database of each. After every write all three must have refused it the
same way or stored the same rows, and their audit chains must have the same hashes: the one
SQLite's Python chains and the two the server chains.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import JSON, Table, delete, insert, select, text, update

from approvals.calls.canonical import canonical_json
from approvals.engines.native.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from approvals.engines.native.tools import ToolDefinition
from approvals.store import Database, Store
from approvals.store.migrate import upgrade
from approvals.store.models import (
    AuditEventRow,
    DecisionRow,
    MessageRow,
    RunRow,
    ToolCallRow,
    ToolDefinitionRow,
)
from approvals.store.run_plan import Interrupted, RunEvent, RunWrite, tool_definition_row
from approvals.store.run_sql import Tx, apply_write

from .conftest import BACKENDS
from .test_migrations import empty_database

pytestmark = pytest.mark.skipif(not {"sqlite", "postgresql"} <= set(BACKENDS), reason="compares SQLite with PostgreSQL")

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
MODELS = (RunRow, MessageRow, ToolDefinitionRow, ToolCallRow, DecisionRow, AuditEventRow)
ORDER = {"runs": "id", "messages": "run_id, seq", "tool_definitions": "version", "tool_calls": "id"}
"""Each table's order; decisions and audit events in the order they were written (their ids)."""

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


def write_for(op: str, arg: Any, index: int, now: dt.datetime) -> RunWrite | Callable[[Tx], None]:
    """The write an operation makes, or the statements it runs on every database alike (a reviewer's, a claim's)."""
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
        return lambda tx: approve(tx, arg, now)
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
    return hold_again


def hold_again(tx: Tx) -> None:
    tx.session.execute(update(RunRow).where(RunRow.id == RUN).values(status="resuming", lease_owner=WORKER))


def approve(tx: Tx, tool_call_id: str, now: dt.datetime) -> None:
    approved = tx.session.execute(
        update(ToolCallRow)
        .where(ToolCallRow.tool_call_id == tool_call_id, ToolCallRow.status == "pending")
        .values(status="approved")
        .returning(ToolCallRow.id)
    ).scalar()
    if approved is not None:
        decision = {"call_id": approved, "actor": "alice", "verdict": "approve", "args_digest": "0" * 64}
        tx.session.execute(insert(DecisionRow), [{**decision, "created_at": now}])


def fresh(tx: Tx) -> None:
    for model in reversed(MODELS):
        tx.session.execute(delete(model))
    if tx.session.dialect.name == "postgresql":  # SQLite numbers rows after the largest one left: none
        tx.session.execute(text("ALTER SEQUENCE decisions_id_seq RESTART"))
        tx.session.execute(text("ALTER SEQUENCE audit_events_id_seq RESTART"))
    run = {"id": RUN, "agent_name": AGENT, "status": "resuming", "message_count": 0, "lease_owner": WORKER}
    tx.session.execute(insert(RunRow), [{**run, "created_at": START, "updated_at": START}])
    tx.session.execute(insert(ToolDefinitionRow), [tool_definition_row(TOOL, START)])


async def rows(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every table as the store reads it back; JSON as its canonical text (PostgreSQL keeps `1e16` as an integer)."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    async with store.db.read() as session:
        for model in MODELS:
            table = cast(Table, model.__table__)
            order = [table.c[column.strip()] for column in ORDER.get(table.name, "id").split(",")]
            found = (await session.execute(select(table).order_by(*order))).all()
            canonical = [isinstance(column.type, JSON) for column in table.columns]
            tables[table.name] = [
                tuple(canonical_json(v) if json else v for v, json in zip(row, canonical, strict=True)) for row in found
            ]
    return tables


@asynccontextmanager
async def three_stores(tmp_path: Path) -> AsyncIterator[list[tuple[str, Store]]]:
    async with AsyncExitStack() as stack:
        urls = [
            stack.enter_context(empty_database("sqlite", tmp_path)),
            stack.enter_context(empty_database("postgresql", tmp_path)),
            stack.enter_context(empty_database("postgresql", tmp_path)),
        ]
        stores = []
        for url in urls:
            upgrade(url)
            database = Database(url)
            stack.push_async_callback(database.dispose)
            stores.append(Store(database))
        yield [("sqlite", stores[0]), ("postgresql pipelined", stores[1]), ("postgresql sqlalchemy", stores[2])]


async def outcome(coroutine: Awaitable[Any]) -> str:
    """What a write came to: stored, or the kind of refusal."""
    try:
        await coroutine
    except Exception as exc:
        return type(exc).__name__
    return "stored"


def run_write(path: str, store: Store, write: RunWrite) -> Awaitable[None]:
    """The write as the store runs it (SQLite's statements, PostgreSQL's pipeline), or through SQLAlchemy."""
    if path == "postgresql sqlalchemy":
        return store.runs.run_statements(lambda tx: apply_write(tx, write))
    return store.runs.write_run(write)


def test_random_writes_store_the_same_rows_and_audit_hashes_every_way(tmp_path: Path) -> None:
    async def check(sequences: list[list[tuple[str, Any]]]) -> None:
        async with three_stores(tmp_path) as stores:
            for sequence in sequences:
                for _, store in stores:
                    await store.runs.run_statements(fresh)
                for index, (op, arg) in enumerate(sequence):
                    write = write_for(op, arg, index, START + dt.timedelta(seconds=index))
                    if not isinstance(write, RunWrite):
                        for _, store in stores:
                            await store.runs.run_statements(write)
                        continue
                    outcomes = {path: await outcome(run_write(path, store, write)) for path, store in stores}
                    assert len(set(outcomes.values())) == 1, (index, op, arg, outcomes)
                    [(_, first), *others] = stores
                    expected = await rows(first)
                    for path, store in others:
                        assert await rows(store) == expected, (index, op, arg, path)
                for path, store in stores:
                    verification = await store.audit.verify_audit()
                    assert verification.ok, (path, verification.problem)

    collected: list[list[tuple[str, Any]]] = []

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(PREAMBLES), st.lists(ops, min_size=1, max_size=14))
    def gather(preamble: list[tuple[str, Any]], sequence: list[tuple[str, Any]]) -> None:
        collected.append([*preamble, *sequence])

    gather()
    anyio.run(check, collected)
