"""PostgreSQL's hot path keeps a few connections in autocommit mode between calls.

What that must not change: the pool's sessions still get connections in transaction
mode, a connection the server dropped is never used twice, and disposing of the
database closes the kept ones too (the pool's own dispose cannot reach them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from approvals.store import Database
from approvals.store._pg import pooled_connection

from .conftest import BACKENDS

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


async def test_disposing_closes_the_kept_connections(database: Database, postgres_url: str) -> None:
    kept = await backend_pid(database)
    await database.dispose()
    with admin(postgres_url) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (kept,)).fetchone()
    assert row == (0,)
