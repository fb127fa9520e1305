"""Databases for the store tests: every test runs on SQLite and on PostgreSQL.

`APPROVALS_TEST_DATABASES` picks the backends (default "sqlite,postgresql");
`APPROVALS_TEST_PG_URL` the PostgreSQL server (default the local one). Each session
migrates one fresh database per backend with the real alembic scripts; each test then
gets a copy (SQLite) or truncated tables (PostgreSQL).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from approvals import LeaseLost
from approvals.store import Database, Store
from approvals.store._writes import RunWrite
from approvals.store.migrate import upgrade
from approvals.store.models import Base

PG_SERVER = os.environ.get("APPROVALS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = [b.strip() for b in os.environ.get("APPROVALS_TEST_DATABASES", "sqlite,postgresql").split(",") if b.strip()]


def _admin_conninfo() -> str:
    return PG_SERVER


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "approvals.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    name = f"approvals_test_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_SERVER} ({exc}); start it or set APPROVALS_TEST_DATABASES=sqlite"
        )
    url = PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        path = tmp_path / "approvals.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("postgres_url")
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    return url


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    database = Database(db_url)
    yield Store(database)
    await database.dispose()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def connections_in_use(store: Store) -> int:
    """Connections checked out of the store's pool and in use: none once every operation has ended.

    The few PostgreSQL keeps in autocommit mode between calls are out of the pool but idle.
    """
    pool = store.db.engine.pool
    assert isinstance(pool, QueuePool)
    kept = store.db.autocommit_connections
    return pool.checkedout() - (kept.idle if kept is not None else 0)


async def execute(store: Store, sql: str, **params: object) -> None:
    """Run raw SQL, as an attacker or a crash might."""
    async with store.db.engine.begin() as conn:
        await conn.execute(text(sql), params)


def record_refused_writes(store: Store) -> list[LeaseLost]:
    """The worker writes `store` refuses because the worker no longer holds the run, as they happen."""
    refused: list[LeaseLost] = []
    write_run = store.write_run

    async def recording(write: RunWrite) -> None:
        try:
            await write_run(write)
        except LeaseLost as lost:
            refused.append(lost)
            raise

    store.write_run = recording  # type: ignore[method-assign]
    return refused
