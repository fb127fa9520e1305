"""PostgreSQL's hot path: a run's writes sent through psycopg in pipeline mode.

A pause, a step or a decision is a handful of statements. Through the ORM each costs a
round trip and most of a millisecond of Python; here they are queued on the connection
and sent together, and the client waits only where it needs an answer (did the lease
hold? which calls moved?). The audit chain is extended by the server itself: after the
advisory lock, each `INSERT ... SELECT` reads the head and hashes `prev_hash || content`
with `sha256`, which is the same hash `event_hash` computes, so no round trip waits on it.

Connections come from the SQLAlchemy engine's pool, so there is one pool and one URL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import anyio
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from sqlalchemy import JSON
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import greenlet_spawn

from ._writes import (
    DECIDED_CALL_STATUSES,
    HELD_RUN_COLUMNS,
    OPEN_CALL_STATUSES,
    ExecutedCall,
    HeldRun,
    WriteTransaction,
    lease_lost,
    load_history_rows,
    message_rows,
    tool_definition_row,
    utcnow,
)
from .audit import AUDIT_LOCK_KEY, GENESIS_HASH, AuditEvent, event_content, event_fields
from .db import json_text
from .models import Base, ToolCallRow

if TYPE_CHECKING:
    from ..messages import ModelRequest, ModelResponse
    from ..tools import ToolDefinition
    from .db import Database

__all__ = ("ClaimedRow", "PgTransaction", "StaleLease", "pg_transaction")

JSON_COLUMNS = frozenset(
    column.name for table in Base.metadata.tables.values() for column in table.columns if isinstance(column.type, JSON)
)
"""Columns stored as JSONB: their values are sent as JSON, `None` included (as JSON `null`, like SQLAlchemy does)."""

_AUDIT_INSERT = """
INSERT INTO audit_events
    (at, actor, action, subject_type, subject_id, run_id, agent_name, tool_name, details, prev_hash, hash)
SELECT %(at)s, %(actor)s, %(action)s, %(subject_type)s, %(subject_id)s, %(run_id)s, %(agent_name)s,
       %(tool_name)s, %(details)s, head.hash, encode(sha256(convert_to(head.hash || %(content)s, 'UTF8')), 'hex')
FROM (SELECT coalesce((SELECT hash FROM audit_events ORDER BY id DESC LIMIT 1), %(genesis)s) AS hash) AS head
"""
"""Chains one event to the head: run after the advisory lock, each statement sees the head as it is then."""


_READY = """
WITH moved AS (
    UPDATE runs SET status = 'ready', updated_at = %(at)s
    WHERE id = %(run_id)s AND status = 'awaiting_approval'
      AND NOT EXISTS (SELECT 1 FROM tool_calls WHERE run_id = %(run_id)s AND status = ANY(%(open)s))
    RETURNING id
), event AS (
    INSERT INTO audit_events
        (at, actor, action, subject_type, subject_id, run_id, agent_name, tool_name, details, prev_hash, hash)
    SELECT %(at)s, %(actor)s, %(action)s, %(subject_type)s, %(subject_id)s, %(run_id)s, %(agent_name)s,
           %(tool_name)s, %(details)s, head.hash,
           encode(sha256(convert_to(head.hash || %(content)s, 'UTF8')), 'hex')
    FROM moved, (SELECT coalesce((SELECT hash FROM audit_events ORDER BY id DESC LIMIT 1), %(genesis)s) AS hash) AS head
)
SELECT pg_notify('approvals_ready', id), pg_notify('approvals_runs', id) FROM moved
"""
"""A paused run with no open call left becomes ready; only then, its audit event and wake-ups. It runs
after the audit lock (the chain's head is current) and while the decision holds the run's row."""


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=json_text)


_ROWS_PER_INSERT = 500


@cache
def _insert_sql(table: str, columns: tuple[str, ...], rows: int, on_conflict: bool = False) -> str:
    row = sql.SQL("({})").format(sql.SQL(", ").join([sql.Placeholder()] * len(columns)))
    statement = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join([row] * rows),
    )
    if on_conflict:
        statement += sql.SQL(" ON CONFLICT DO NOTHING")
    return statement.as_string()


@cache
def _hold_sql(columns: tuple[str, ...]) -> str:
    assignments = sql.SQL("").join(sql.SQL(", {} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c in columns)
    return (
        sql.SQL(
            "UPDATE runs SET message_count = message_count + %(grow)s, updated_at = %(now)s{} "
            "WHERE id = %(run_id)s AND status = 'resuming' AND lease_owner = %(worker_id)s "
            "RETURNING agent_name, message_count"
        )
        .format(assignments)
        .as_string()
    )


@cache
def _finish_sql(lock: bool, notifications: int) -> str:
    """One statement for the audit lock and the wake-ups, as each costs the client a statement's work."""
    calls = [sql.SQL("pg_advisory_xact_lock(%s)")] if lock else []
    calls += [sql.SQL("pg_notify(%s, %s)")] * notifications
    return sql.SQL("SELECT {}").format(sql.SQL(", ").join(calls)).as_string()


@cache
def _update_call_sql(columns: tuple[str, ...]) -> str:
    assignments = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c in columns)
    return sql.SQL("UPDATE tool_calls SET {} WHERE id = %(call_id)s").format(assignments).as_string()


_CALL_COLUMNS = tuple(column.name for column in ToolCallRow.__table__.columns)
_LOCK_CALL = (
    sql.SQL(
        "SELECT {}, runs.started_by FROM tool_calls JOIN runs ON runs.id = tool_calls.run_id "
        "WHERE tool_calls.id = %s FOR UPDATE OF tool_calls"
    )
    .format(sql.SQL(", ").join(sql.Identifier("tool_calls", c) for c in _CALL_COLUMNS))
    .as_string()
)


@dataclass(frozen=True)
class StoredRunState:
    """Reads sent in a pipeline: their rows arrive with the commit and stay with their cursors."""

    messages: psycopg.AsyncCursor[tuple[Any, ...]]
    calls: psycopg.AsyncCursor[tuple[Any, ...]]

    async def fetch(self) -> tuple[list[ModelRequest | ModelResponse], dict[str, ToolCallRow]]:
        """The history and the decided calls by tool call id (no I/O: the rows are already here)."""
        history = load_history_rows(await self.messages.fetchall())
        calls = [_call_row(row) for row in await self.calls.fetchall()]
        return history, {call.tool_call_id: call for call in calls}


@dataclass(frozen=True)
class ClaimedRow:
    """The run `claim_next` leased."""

    id: str
    agent_name: str
    prompt: str | None
    deps: Any
    message_count: int


@dataclass(frozen=True)
class StaleLease:
    """A run whose worker's lease expired: it needs crash recovery before anyone continues it."""

    id: str


@cache
def _claim_sql(by_id: bool, by_agent: bool) -> str:
    filters = sql.SQL("").join(
        [
            sql.SQL(" AND id = %(run_id)s") if by_id else sql.SQL(""),
            sql.SQL(" AND agent_name = ANY(%(agents)s)") if by_agent else sql.SQL(""),
        ]
    )
    return (
        sql.SQL(
            """
            WITH stale AS (
                SELECT id FROM runs WHERE status = 'resuming' AND lease_expires_at < %(now)s{filters}
                ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED
            ), ready AS (
                SELECT id FROM runs WHERE status = 'ready' AND NOT EXISTS (SELECT 1 FROM stale){filters}
                ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE runs SET status = 'resuming', lease_owner = %(worker_id)s, lease_expires_at = %(lease)s,
                    updated_at = %(now)s
                FROM ready WHERE runs.id = ready.id
                RETURNING runs.id, runs.agent_name, runs.prompt, runs.deps, runs.message_count
            )
            SELECT 'stale', id, NULL, NULL, NULL, NULL FROM stale
            UNION ALL
            SELECT 'claimed', id, agent_name, prompt, deps, message_count FROM claimed
            """
        )
        .format(filters=filters)
        .as_string()
    )


_DECIDED_CALLS = (
    sql.SQL("SELECT {} FROM tool_calls WHERE run_id = %s AND status = ANY(%s)")
    .format(sql.SQL(", ").join(map(sql.Identifier, _CALL_COLUMNS)))
    .as_string()
)


def _call_row(values: Sequence[Any]) -> ToolCallRow:
    return ToolCallRow(**dict(zip(_CALL_COLUMNS, values, strict=True)))


def _adapt(row: dict[str, Any], *, none_as_null: bool = False) -> dict[str, Any]:
    """JSON columns' values as JSONB; with `none_as_null`, None stays SQL NULL (as the ORM leaves an unset value)."""
    return {k: jsonb(v) if k in JSON_COLUMNS and not (none_as_null and v is None) else v for k, v in row.items()}


class PgTransaction(WriteTransaction):
    """One transaction on a psycopg connection in pipeline mode; `pg_transaction` opens and commits it."""

    def __init__(self, connection: psycopg.AsyncConnection[Any], stored_tool_versions: set[str]) -> None:
        super().__init__()
        self.connection = connection
        self.cursor = connection.cursor()
        self._stored_tool_versions = stored_tool_versions
        self.new_tool_versions: set[str] = set()
        """Tool definitions this transaction stores; known to be stored once it commits."""
        self._ready_checks: list[AuditEvent] = []

    async def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> None:
        """Queue a statement; its errors surface at the next answer the client waits for."""
        await self.cursor.execute(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> tuple[Any, ...] | None:
        """Run a statement and wait for its first row."""
        cursor = await self.connection.execute(sql, params)
        return await cursor.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a statement and wait for all its rows."""
        cursor = await self.connection.execute(sql, params)
        return await cursor.fetchall()

    async def insert(self, table: str, rows: list[dict[str, Any]], *, on_conflict: bool = False) -> None:
        """Queue inserts of rows that share their columns, as few multi-row statements."""
        columns = tuple(rows[0]) if rows else ()
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            params = [value for row in chunk for value in _adapt({c: row[c] for c in columns}).values()]
            await self.execute(_insert_sql(table, columns, len(chunk), on_conflict), params)

    async def hold(self, run_id: str, worker_id: str, *, grow: int = 0, **values: Any) -> HeldRun:
        unknown = set(values) - HELD_RUN_COLUMNS
        if unknown:
            raise ValueError(f"a held run's write cannot set {sorted(unknown)}")
        params = {"grow": grow, "now": utcnow(), "run_id": run_id, "worker_id": worker_id, **_adapt(values)}
        row = await self.fetchone(_hold_sql(tuple(values)), params)
        if row is None:
            status = await self.fetchone("SELECT status FROM runs WHERE id = %s", (run_id,))
            raise lease_lost(run_id, worker_id, status[0] if status else None)
        agent_name, message_count = row
        return HeldRun(id=run_id, agent_name=agent_name, next_seq=message_count - grow, worker_id=worker_id)

    async def append_messages(self, run: HeldRun, messages: Sequence[ModelRequest | ModelResponse]) -> None:
        await self.insert("messages", message_rows(run, messages))

    async def ensure_tool_definition(self, definition: ToolDefinition) -> str:
        if definition.version not in self._stored_tool_versions:  # a version's definition never changes
            await self.insert("tool_definitions", [tool_definition_row(definition)], on_conflict=True)
            self.new_tool_versions.add(definition.version)
        return definition.version

    async def insert_calls(self, rows: list[dict[str, Any]]) -> None:
        await self.insert("tool_calls", rows)

    async def start_executing(self, run_id: str, tool_call_ids: Sequence[str]) -> list[ExecutedCall]:
        rows = await self.fetchall(
            """
            WITH moved AS (
                UPDATE tool_calls SET status = 'executing', updated_at = %(now)s
                WHERE run_id = %(run_id)s AND tool_call_id = ANY(%(ids)s) AND status = 'approved'
                RETURNING id, tool_call_id, tool_name, args_digest, override_digest
            ), consumed AS (
                UPDATE decisions SET consumed_at = %(now)s
                WHERE call_id IN (SELECT id FROM moved) AND consumed_at IS NULL
            )
            SELECT id, tool_call_id, tool_name, args_digest, override_digest FROM moved
            """,
            {"now": utcnow(), "run_id": run_id, "ids": list(tool_call_ids)},
        )
        return [ExecutedCall(*row) for row in rows]

    async def executing_call_ids(self, run_id: str) -> list[str]:
        rows = await self.fetchall(
            "SELECT tool_call_id FROM tool_calls WHERE run_id = %s AND status = 'executing'", (run_id,)
        )
        return [row[0] for row in rows]

    async def settle_executing(self, run_id: str, outcomes: dict[str, tuple[str, Any]]) -> list[ExecutedCall]:
        settled = []
        now = utcnow()
        for tool_call_id, (status, result) in outcomes.items():
            row = await self.fetchone(
                """
                UPDATE tool_calls SET status = %s, result = %s, updated_at = %s
                WHERE run_id = %s AND tool_call_id = %s AND status = 'executing'
                RETURNING id, tool_call_id, tool_name, args_digest, override_digest
                """,
                (status, None if result is None else jsonb(result), now, run_id, tool_call_id),
            )
            if row is not None:
                settled.append(ExecutedCall(*row))
        return settled

    async def lock_call(self, call_id: str) -> tuple[ToolCallRow, str | None] | None:
        # the run first, then the call: the order every writer takes them in, so none waits for another in a cycle
        await self.execute(
            "SELECT 1 FROM runs WHERE id = (SELECT run_id FROM tool_calls WHERE id = %s) FOR UPDATE", (call_id,)
        )
        row = await self.fetchone(_LOCK_CALL, (call_id,))
        if row is None:
            return None
        *values, started_by = row
        return _call_row(values), started_by

    async def add_decision(self, row: dict[str, Any]) -> None:
        await self.insert("decisions", [row])

    async def count_approvals(self, call_id: str, args_digest: str) -> int:
        row = await self.fetchone(
            "SELECT count(DISTINCT actor) FROM decisions WHERE call_id = %s AND verdict IN ('approve', 'edit') "
            "AND args_digest = %s AND consumed_at IS NULL",
            (call_id, args_digest),
        )
        return int(row[0]) if row else 0

    async def update_call(self, call: ToolCallRow, **changes: Any) -> None:
        for column, value in changes.items():
            setattr(call, column, value)
        await self.execute(_update_call_sql(tuple(changes)), {**_adapt(changes, none_as_null=True), "call_id": call.id})

    async def ready_if_decided(self, run_id: str, agent_name: str) -> None:
        # queued for the end: under the audit lock, the update and, only if it happened, its event and wake-ups
        self._ready_checks.append(
            AuditEvent("system", "run.ready", "run", run_id, run_id=run_id, agent_name=agent_name)
        )

    async def claim_next(
        self, worker_id: str, lease_expires_at: dt.datetime, run_id: str | None, agent_names: Sequence[str] | None
    ) -> ClaimedRow | StaleLease | None:
        """Lease the oldest ready run in one statement, unless a run whose worker died waits first.

        A run with an expired lease is only reported (and left locked until this transaction
        ends): settling what its dead worker left behind takes the careful path.
        """
        now = utcnow()
        params = {"now": now, "worker_id": worker_id, "lease": lease_expires_at, "run_id": run_id}
        if agent_names is not None:
            params["agents"] = list(agent_names)
        row = await self.fetchone(_claim_sql(run_id is not None, agent_names is not None), params)
        if row is None:
            return None
        kind, claimed_id, agent_name, prompt, deps, message_count = row
        if kind == "stale":
            return StaleLease(claimed_id)
        return ClaimedRow(claimed_id, agent_name, prompt, deps, message_count)

    async def read_run_state(self, run_id: str) -> StoredRunState:
        """Queue reads of the run's messages and decided calls; fetch them once the transaction ended."""
        messages = self.connection.cursor()
        await messages.execute("SELECT data, format_version FROM messages WHERE run_id = %s ORDER BY seq", (run_id,))
        calls = self.connection.cursor()
        await calls.execute(_DECIDED_CALLS, (run_id, list(DECIDED_CALL_STATUSES)))
        return StoredRunState(messages, calls)

    async def _finish(self) -> None:
        """Queue the wake-ups, the audit events and COMMIT behind the operation's statements."""
        announcements = list(dict.fromkeys(self.announcements))
        lock = bool(self.events or self._ready_checks)
        if lock or announcements:
            params: list[Any] = [AUDIT_LOCK_KEY] if lock else []
            params += [value for pair in announcements for value in pair]
            await self.execute(_finish_sql(lock, len(announcements)), params)
        if self.events:
            await self.cursor.executemany(_AUDIT_INSERT, [_audit_params(event) for event in self.events])
        for event in self._ready_checks:
            await self.execute(_READY, {**_audit_params(event), "open": list(OPEN_CALL_STATUSES)})
        await self.execute("COMMIT")


def _audit_params(event: AuditEvent) -> dict[str, Any]:
    fields = event_fields(event)
    return {**fields, "details": jsonb(fields["details"]), "content": event_content(event), "genesis": GENESIS_HASH}


@asynccontextmanager
async def pg_transaction(db: Database, stored_tool_versions: set[str]) -> AsyncIterator[PgTransaction]:
    """A pipelined transaction on a pooled connection: committed when the block ends, rolled back on error.

    `stored_tool_versions` are the tool definitions known to be in this database already.

    Cancellation waits until the transaction is over: a pipeline abandoned halfway leaves
    the connection mid-protocol, and the next user of it would read another query's results.
    """
    # straight from the engine's pool: the hot path needs the driver's connection, not SQLAlchemy's wrapper
    pooled = await greenlet_spawn(db.engine.sync_engine.pool.connect)
    try:
        with anyio.CancelScope(shield=True):
            connection = cast("psycopg.AsyncConnection[Any]", pooled.driver_connection)
            try:
                async with connection.pipeline():
                    tx = PgTransaction(connection, stored_tool_versions)
                    yield tx
                    await tx._finish()
                stored_tool_versions.update(tx.new_tool_versions)
            except BaseException as exc:
                if not await _rolled_back(connection):
                    # a connection in an unknown state never goes back to the pool
                    await greenlet_spawn(pooled.invalidate)
                if not isinstance(exc, psycopg.Error):
                    raise
                if connection.broken:  # the server went away: its other pooled connections are gone too
                    await db.engine.dispose()
                # the same exceptions SQLAlchemy raises on the other path: IntegrityError, OperationalError, ...
                raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await greenlet_spawn(pooled.close)  # back to the pool


async def _rolled_back(connection: psycopg.AsyncConnection[Any]) -> bool:
    with anyio.move_on_after(10):
        try:
            await connection.rollback()
        except Exception:
            return False
        return True
    return False
