"""PostgreSQL's hot path: a claim and each of a run's writes is one function call.

Through the ORM every statement costs a round trip and most of a millisecond of Python,
and a claim or a step is five to ten statements. Here each is one call, in autocommit
mode, to a PL/pgSQL function from `sql/hot_path_v2.sql` (names from `hot_path_sql`) that
makes the same guarded updates, inserts, audit appends and wake-ups as the SQLAlchemy
path does on SQLite:

- `approvals_claim` leases a ready run and returns what the worker needs to continue;
- `approvals_run_write` applies a `RunWrite` (mark executing, a step, a pause, the end),
  sent as one JSON document.

Decisions are not here: they have one implementation, in Python (`decisions.py`), on both
databases (migration 0010 dropped the function that repeated it).

The server extends the audit chain: after the advisory lock it reads the head and hashes
`prev_hash || content`, where `approvals_event_content` builds the same canonical JSON as
`event_content`, so `verify_audit_chain` checks events from either path.

Connections come from the SQLAlchemy engine's pool, so there is one pool and one URL.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import psycopg
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import greenlet_spawn

from .._canonical import canonical_json
from ..exceptions import Conflict
from ..messages import dump_message, format_version_of, load_stored_array
from ._writes import RELEASED_DETAILS, DecidedCall, RunWrite, lease_lost, tool_definition_row, utcnow
from .audit import event_document
from .db import json_text
from .hot_path_sql import function_name

if TYPE_CHECKING:
    from ..messages import ModelRequest, ModelResponse
    from .db import Database

__all__ = ("ClaimedRow", "StaleLease", "pg_claim", "pg_run_write", "pooled_connection")


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=json_text)


@dataclass(frozen=True)
class ClaimedRow:
    """The run `pg_claim` leased, with its stored history and the verdicts it has yet to act on."""

    id: str
    agent_name: str
    prompt: str | None
    deps: Any
    message_count: int
    history: list[ModelRequest | ModelResponse]
    history_from: int
    decided_calls: dict[str, DecidedCall]
    executing: frozenset[str]


@dataclass(frozen=True)
class StaleLease:
    """A run whose worker's lease expired: it needs crash recovery before anyone continues it."""

    id: str


_RUN_WRITE = f"SELECT {function_name('run_write')}(%s)"
_CLAIM = f"SELECT * FROM {function_name('claim')}(%s)"  # noqa: S608 (a constant name, no input)
_LEASE_LOST = "AP001"
"""SQLSTATE `approvals_run_write` raises when the worker does not hold the run; DETAIL is its status."""
_NOT_APPROVED = "AP002"
"""SQLSTATE `approvals_run_write` raises when a call to execute is not approved."""


@asynccontextmanager
async def pooled_connection(db: Database) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A pooled connection in autocommit mode: each statement (a function call) is its own transaction.

    It comes from the few kept in autocommit mode between calls (`AutocommitConnections`).
    Errors our functions raise on purpose (SQLSTATE class AP) come out as they are; other
    driver errors, also a failure to connect, as SQLAlchemy's, as on the ORM path.
    Cancellation waits for the statement.
    """
    kept = db.autocommit_connections
    if kept is None:
        raise RuntimeError("pooled_connection is for PostgreSQL")
    try:
        pooled, since = await kept.take()
    except psycopg.Error as exc:  # no connection could be made: the server is down, say (the caller's 503)
        raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc
    connection = cast("psycopg.AsyncConnection[Any]", pooled.driver_connection)
    with anyio.CancelScope(shield=True):
        try:
            yield connection
        except BaseException as exc:
            if connection.broken:  # the server went away: its other connections are gone too
                await greenlet_spawn(pooled.invalidate)
                await kept.close()
                await db.engine.dispose()
            else:
                await kept.give_back(pooled, since)
            if not isinstance(exc, psycopg.Error) or (exc.sqlstate or "").startswith("AP"):
                raise
            raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc
        await kept.give_back(pooled, since)


async def pg_run_write(db: Database, write: RunWrite, stored_tool_versions: set[str]) -> None:
    """Apply a worker's write in one statement (`approvals_run_write`, migration 0004).

    `stored_tool_versions` are the tool definitions known to be in this database already: a
    version's definition never changes, so they are not sent again.
    """
    document = jsonb(_run_write_document(write, stored_tool_versions))
    try:
        async with pooled_connection(db) as connection:
            await connection.execute(_RUN_WRITE, (document,))
    except psycopg.Error as exc:
        if exc.sqlstate == _LEASE_LOST:
            raise lease_lost(write.run_id, write.worker_id, exc.diag.message_detail or None) from None
        if exc.sqlstate == _NOT_APPROVED:
            raise Conflict(exc.diag.message_primary or "Not every call to execute is approved") from None
        raise
    stored_tool_versions.update(definition.version for definition in write.tool_definitions)


def _run_write_document(write: RunWrite, stored_tool_versions: set[str]) -> dict[str, Any]:
    """The write as the JSON document `approvals_run_write` reads; audit details go with their canonical text."""
    document: dict[str, Any] = {
        "run_id": write.run_id,
        "worker_id": write.worker_id,
        "now": write.now.isoformat(),
        "format_version": format_version_of(write.messages),
    }
    if write.changes:
        document["set"] = {k: _json_time(v) for k, v in write.changes.items()}
    if write.messages:
        document["messages"] = [{"kind": m.kind, "data": dump_message(m)} for m in write.messages]
    definitions = [d for d in write.tool_definitions if d.version not in stored_tool_versions]
    if definitions:
        document["tool_definitions"] = [tool_definition_row(d, write.now) | {"created_at": None} for d in definitions]
    if write.calls:
        document["calls"] = [{k: _json_time(v) for k, v in call.items()} for call in write.calls]
    if write.start_executing is not None:
        document["start_executing"] = list(write.start_executing)
    if write.results:
        document["settle"] = [
            {"tool_call_id": tool_call_id, "status": status, "result": result, "result_text": canonical_json(result)}
            for tool_call_id, (status, result) in write.results.items()
        ]
    if write.released:
        document["released"] = {
            "tool_call_ids": list(write.released),
            "details": RELEASED_DETAILS,
            "details_text": canonical_json(RELEASED_DETAILS),
        }
    if write.interrupted is not None:
        error = write.interrupted.error
        document["interrupted"] = {
            "failed_tool_call_id": write.interrupted.failed_tool_call_id,
            "error": error,
            "error_text": canonical_json(error),
        }
    if write.events:
        document["events"] = [event_document(event) for event in write.events]
    if write.announcements:
        document["announce"] = [list(pair) for pair in dict.fromkeys(write.announcements)]
    return document


def _json_time(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


async def pg_claim(
    db: Database,
    worker_id: str,
    lease_expires_at: dt.datetime,
    run_id: str | None,
    agent_names: Sequence[str] | None,
    *,
    recover: bool,
    known: Mapping[str, int] | None = None,
) -> ClaimedRow | StaleLease | None:
    """Lease the oldest ready run in one statement (`approvals_claim`), which also returns what it needs to continue.

    A run whose worker's lease expired is only reported: settling what its dead worker left
    behind takes the careful path. With `recover` it comes before ready runs; without, it is
    looked for only when no run is ready (the look scans every lease).
    """
    now = utcnow()
    document: dict[str, Any] = {
        "worker_id": worker_id,
        "now": now.isoformat(),
        "lease_expires_at": lease_expires_at.isoformat(),
        "run_id": run_id,
        "recover": recover,
    }
    if agent_names is not None:
        document["agents"] = list(agent_names)
    if known:
        document["known"] = dict(known)
    async with pooled_connection(db) as connection:
        cursor = connection.cursor()
        cursor.adapters.register_loader("jsonb", TextLoader)  # as text: the history is parsed in one pass
        await cursor.execute(_CLAIM, (jsonb(document),))
        row = await cursor.fetchone()
    if row is None:
        return None
    kind, claimed_id, agent_name, prompt, deps, message_count, history, versions, history_from, decided, executing = row
    if kind == "stale":
        return StaleLease(claimed_id)
    return ClaimedRow(
        claimed_id,
        agent_name,
        prompt,
        None if deps is None else json.loads(deps),
        message_count,
        history=load_stored_array(history, versions) if history is not None else [],
        history_from=history_from or 0,
        decided_calls={call["tool_call_id"]: DecidedCall(**call) for call in json.loads(decided or "[]")},
        executing=frozenset(executing or ()),
    )
