"""Databases for the store tests: every test runs on SQLite and on PostgreSQL.

`APPROVALS_TEST_DATABASES` picks the backends (default "sqlite,postgresql");
`APPROVALS_TEST_PG_URL` the PostgreSQL server (default the local one). Each process
migrates one template per backend with the real alembic scripts; each test then gets a
copy of it (tests/databases.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from approvals import LeaseLost
from approvals.store import Database, Store
from approvals.store.run_plan import RunWrite

from ..databases import BACKENDS, DATABASES, PG_SERVER

__all__ = (
    "BACKENDS",
    "PG_SERVER",
    "anyio_backend",
    "connections_in_use",
    "db_url",
    "execute",
    "postgres_url",
    "record_refused_writes",
    "sqlite_template",
    "store",
)


@pytest.fixture(scope="session")
def sqlite_template() -> Path:
    """The migrated SQLite file every SQLite test's database is a copy of (do not write to it)."""
    return Path(DATABASES.template("sqlite").location)


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    """A migrated PostgreSQL database of the test's own, dropped after it."""
    url, _ = DATABASES.fresh("postgresql", tmp_path)
    yield url
    DATABASES.release(url)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database of the test's own, on each backend in turn."""
    if request.param == "sqlite":
        return DATABASES.fresh("sqlite", tmp_path)[0]
    url: str = request.getfixturevalue("postgres_url")
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
    write_run = store.runs.write_run

    async def recording(write: RunWrite) -> None:
        try:
            await write_run(write)
        except LeaseLost as lost:
            refused.append(lost)
            raise

    store.runs.write_run = recording  # type: ignore[method-assign]
    return refused
