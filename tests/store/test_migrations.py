"""The alembic revisions build exactly the tables the models describe, and tear them down again."""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from itertools import pairwise
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, pool, select

from approvals.store import normalize_url
from approvals.store.hot_path_sql import FUNCTION_VERSIONS, function_name
from approvals.store.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade
from approvals.store.models import MIGRATION_ONLY_INDEXES, Base, include_in_autogenerate

from .conftest import BACKENDS, PG_SERVER


@contextmanager
def empty_database(backend: str, folder: Path) -> Iterator[str]:
    """The URL of a new, empty database, dropped afterwards."""
    name = f"approvals_mig_{uuid.uuid4().hex[:10]}"
    if backend == "sqlite":
        yield f"sqlite:///{folder / f'{name}.db'}"
        return
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def differences(url: str) -> list[object]:
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "include_object": include_in_autogenerate}
            )
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def index_definitions(url: str, *, every: bool = False) -> dict[str, str]:
    """Each index as the database states it, WHERE of a partial index included (alembic's comparison skips it).

    Without `every`, the indexes only migrations create are left out.
    """
    if url.startswith("postgresql"):
        ours = "schemaname = 'public' AND tablename <> 'alembic_version'"
        query = f"SELECT indexname, indexdef FROM pg_indexes WHERE {ours}"
        with psycopg.connect(url) as conn:
            rows = conn.execute(query).fetchall()
    else:
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            rows = connection.execute(query).fetchall()
    return {name: definition for name, definition in rows if every or name not in MIGRATION_ONLY_INDEXES}


SQLITE_TABLES: dict[tuple[str, str], object] = {}
"""SQLite tables as `schema_state` reflected them, by name and CREATE TABLE statement. SQLite derives a table's
columns and unique constraints (its automatic indexes) from that statement alone, so a table whose statement was
reflected before is not reflected again: walking the revisions up and down meets the same tables many times."""


_PG_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version' AND a.attnum > 0
  AND NOT a.attisdropped
ORDER BY c.relname, a.attnum
"""
_PG_UNIQUE = """
SELECT c.relname, con.conname, array(
  SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY AS k(number, position)
  JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.number ORDER BY k.position)
FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND con.contype = 'u'
"""


def pg_tables(url: str) -> dict[str, object]:
    """PostgreSQL's tables, each with its columns (name, type, nullable) and unique constraints, in two catalog
    queries: the inspector's queries per table cost a minute over the whole walk of the revisions."""
    with psycopg.connect(url) as conn:
        columns = conn.execute(_PG_COLUMNS).fetchall()
        unique = conn.execute(_PG_UNIQUE).fetchall()
    tables: dict[str, tuple[list[tuple[str, str, bool]], list[tuple[str, tuple[str, ...]]]]] = {}
    for table, column, kind, nullable in columns:
        tables.setdefault(table, ([], []))[0].append((column, kind, nullable))
    for table, name, names in unique:
        tables[table][1].append((name, tuple(names)))
    return {name: (cols, sorted(constraints)) for name, (cols, constraints) in tables.items()}


def schema_state(url: str) -> dict[str, object]:
    """What a migration changes: tables with their columns and unique constraints, indexes, function bodies."""
    if url.startswith("postgresql"):
        with psycopg.connect(url) as conn:
            query = "SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'approvals\\_%'"
            functions = {(name, source) for name, source in conn.execute(query).fetchall()}
        return {"tables": pg_tables(url), "indexes": index_definitions(url, every=True), "functions": functions}
    statements: dict[str, str] = {}
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            statements = dict(connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        inspector = inspect(engine)
        tables: dict[str, object] = {}
        for name in inspector.get_table_names():
            if name == "alembic_version":
                continue
            key = (name, statements[name]) if name in statements else None
            if key is not None and key in SQLITE_TABLES:
                tables[name] = SQLITE_TABLES[key]
                continue
            tables[name] = (
                [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(name)],
                sorted((u["name"] or "", tuple(u["column_names"])) for u in inspector.get_unique_constraints(name)),
            )
            if key is not None:
                SQLITE_TABLES[key] = tables[name]
    finally:
        engine.dispose()
    return {"tables": tables, "indexes": index_definitions(url, every=True), "functions": set()}


def table_names(url: str) -> set[str]:
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def function_names(url: str) -> set[str]:
    """Our PostgreSQL functions (migration 0004); SQLite has none."""
    if not url.startswith("postgresql"):
        return set()
    with psycopg.connect(url) as conn:
        return {name for (name,) in conn.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'approvals\\_%'")}


HOT_PATH_FUNCTIONS = {function_name(f) for f in FUNCTION_VERSIONS}
"""The functions migration 0015 kept: the server's half of the audit chain."""


def test_upgrade_head_matches_the_models(empty_db_url: str) -> None:
    assert current_revision(empty_db_url) is None
    upgrade(empty_db_url)
    assert current_revision(empty_db_url) == head_revision()
    assert table_names(empty_db_url) == set(Base.metadata.tables)
    assert differences(empty_db_url) == []
    on_postgres = empty_db_url.startswith("postgresql")
    assert function_names(empty_db_url) == (HOT_PATH_FUNCTIONS if on_postgres else set())


def test_every_index_is_the_one_the_models_create(empty_db_url: str, tmp_path: Path) -> None:
    upgrade(empty_db_url)
    backend = "postgresql" if empty_db_url.startswith("postgresql") else "sqlite"
    with empty_database(backend, tmp_path) as models_url:
        engine = create_engine(normalize_url(models_url, sync=True), poolclass=pool.NullPool)
        try:
            Base.metadata.create_all(engine)
        finally:
            engine.dispose()
        created = index_definitions(models_url)
    migrated = index_definitions(empty_db_url)
    assert "uq_decisions_standing_approval" in created
    assert migrated == created


def test_a_migrated_sqlite_file_is_already_in_wal_mode(tmp_path: Path) -> None:
    # were it not, the app's first connections would each switch it to WAL as they open, and
    # when several open at once (requests, worker, webhooks) one fails with "database is locked"
    path = tmp_path / "fresh.db"
    upgrade(f"sqlite:///{path}")
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert differences(f"sqlite:///{path}") == []


def test_downgrade_base_removes_everything(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    downgrade(empty_db_url, "base")
    assert table_names(empty_db_url) == set()
    assert function_names(empty_db_url) == set()
    assert current_revision(empty_db_url) is None
    upgrade(empty_db_url)  # and back up again
    assert differences(empty_db_url) == []


def test_each_downgrade_restores_the_schema_before_its_upgrade(empty_db_url: str) -> None:
    script = ScriptDirectory.from_config(alembic_config(empty_db_url))
    revisions = [r.revision for r in reversed(list(script.walk_revisions()))]
    before = schema_state(empty_db_url)
    for previous, revision in pairwise(["base", *revisions]):
        upgrade(empty_db_url, revision)
        after = schema_state(empty_db_url)
        downgrade(empty_db_url, previous)
        assert schema_state(empty_db_url) == before, f"downgrading {revision} to {previous}"
        upgrade(empty_db_url, revision)
        assert schema_state(empty_db_url) == after, f"upgrading {previous} to {revision} again"
        before = after


def test_argument_search_index_exists_on_postgresql(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    engine = create_engine(normalize_url(empty_db_url, sync=True), poolclass=pool.NullPool)
    try:
        names = {index["name"] for index in inspect(engine).get_indexes("tool_calls")}
    finally:
        engine.dispose()
    assert ("ix_tool_calls_args_trgm" in names) == empty_db_url.startswith("postgresql")


def test_calls_know_who_asked_them_after_the_upgrade(empty_db_url: str) -> None:
    """Migration 0019 fills `requested_by` in: a gate call from its `call.requested` event (who really asked, not
    necessarily who opened the session), a worker's call (whose event names the worker) from its run's starter."""
    upgrade(empty_db_url, "0018")
    engine = create_engine(normalize_url(empty_db_url, sync=True), poolclass=pool.NullPool)
    now = dt.datetime.now(dt.UTC)
    runs, calls, events = (Base.metadata.tables[name] for name in ("runs", "tool_calls", "audit_events"))
    call_columns = {
        "agent_name": "billing",
        "tool_name": "refund",
        "tool_version": "v1",
        "args": {},
        "args_digest": "d",
        "status": "pending",
    }
    try:
        with engine.begin() as connection:
            connection.execute(
                Base.metadata.tables["tool_definitions"].insert(),
                [{"version": "v1", "name": "refund", "definition": {}, "created_at": now}],
            )
            connection.execute(
                runs.insert(),
                [
                    {"id": "gate-run", "agent_name": "billing", "engine": "gate", "session_id": "s1",
                     "status": "awaiting_approval", "started_by": "token:billing", "message_count": 0},
                    {"id": "worker-run", "agent_name": "billing", "engine": "native", "session_id": None,
                     "status": "awaiting_approval", "started_by": "alice", "message_count": 2},
                ],
            )  # fmt: skip
            connection.execute(  # the columns of 0018: requested_by is not among them
                calls.insert(),
                [
                    {"id": "slipped-in", "run_id": "gate-run", "tool_call_id": "k1", **call_columns},
                    {"id": "no-event", "run_id": "gate-run", "tool_call_id": "k2", **call_columns},
                    {"id": "worker-call", "run_id": "worker-run", "tool_call_id": "k3", **call_columns},
                ],
            )
            event = {"at": now, "action": "call.requested", "subject_type": "call", "prev_hash": "", "hash": ""}
            connection.execute(
                events.insert(),
                [
                    {**event, "actor": "carol", "subject_id": "slipped-in", "run_id": "gate-run"},
                    {**event, "actor": "worker-7", "subject_id": "worker-call", "run_id": "worker-run"},
                ],
            )
    finally:
        engine.dispose()
    upgrade(empty_db_url)
    engine = create_engine(normalize_url(empty_db_url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            asked = dict(connection.execute(select(calls.c.id, calls.c.requested_by)).all())
    finally:
        engine.dispose()
    assert asked == {"slipped-in": "carol", "no-event": "token:billing", "worker-call": "alice"}
