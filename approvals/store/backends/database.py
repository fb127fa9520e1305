"""Connecting to the database: one URL picks SQLite (embedded, a file) or PostgreSQL.

SQLite gets WAL mode, foreign keys, a busy timeout and `BEGIN IMMEDIATE` transactions,
so concurrent writers queue up instead of failing halfway; PostgreSQL goes through
psycopg 3. URLs are normalised so users can write `sqlite:///approvals.db` or
`postgresql://user@host/db` without naming a driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from ...exceptions import UserError
from ..backend import Backend
from ..models import json_text
from .postgres_backend import PostgresBackend
from .postgres_connections import AutocommitConnections
from .sqlite import SQLiteBackend
from .sqlite_writes import BUSY_TIMEOUT_MS, SQLiteWriter, broken_file

__all__ = ("Database", "backend_named", "json_text", "normalize_url", "sqlite_file")

T = TypeVar("T")

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
_SYNC_DRIVERS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"}
DRAIN_SECONDS = 2.0
"""How long closing the database waits for connections in use (requests finishing) before it closes the pools."""


def normalize_url(url: str | URL, *, sync: bool = False) -> URL:
    """The URL with our driver for its database; `sync=True` for alembic and other sync tools."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError as exc:
        raise UserError(f"Invalid database URL {str(url)!r}: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    if backend not in _SYNC_DRIVERS:
        raise UserError(
            f"Unsupported database {parsed.drivername!r}: use sqlite:///path/to/file.db or postgresql://user@host/dbname"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise UserError("SQLite needs a file path (sqlite:///approvals.db): several connections share the database")
    return parsed.set(drivername=_SYNC_DRIVERS[backend] if sync else _ASYNC_DRIVERS[backend])


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (relative to the current folder if the URL says so); None for other databases."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # `normalize_url` says what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def backend_named(dialect: str) -> Backend:
    """The backend of a database by its SQLAlchemy dialect name: the one place that asks."""
    return _POSTGRES if dialect == "postgresql" else _SQLITE


_POSTGRES = PostgresBackend()
_SQLITE = SQLiteBackend()


class Database:
    """An async engine and session factory for one database URL."""

    def __init__(self, url: str | URL, *, echo: bool = False, pool_size: int = 10) -> None:
        self.url = normalize_url(url)
        self.dialect = self.url.get_backend_name()
        # JSON as written, not \u-escaped, so a search for "Lindenstraße" finds it on SQLite too
        options: dict[str, Any] = {"echo": echo, "json_serializer": json_text}
        if self.dialect == "postgresql":
            # no pre-ping: it costs a round trip per transaction; recycle instead, and a dropped
            # connection fails one operation, which callers see as an error, not as lost data
            options.update(pool_size=pool_size, max_overflow=pool_size, pool_recycle=1800)
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        self.read_engine = self.engine
        self.autocommit_connections: AutocommitConnections | None = None
        """PostgreSQL: the hot path's connections, kept in autocommit mode between calls."""
        if self.dialect == "postgresql":
            self.autocommit_connections = AutocommitConnections(self.engine, keep=pool_size // 2)
        self.sqlite_writer: SQLiteWriter | None = None
        """SQLite: the hot path's writes, through the plain `sqlite3` driver."""
        if self.is_sqlite:
            _configure_sqlite(self.engine.sync_engine, write_lock=True)
            # reads get their own pool without the write lock, so pages never wait behind writers (WAL)
            self.read_engine = create_async_engine(self.url, **options)
            _configure_sqlite(self.read_engine.sync_engine, write_lock=False)
            statements_engine = create_engine(self.sync_url, **options)
            _configure_sqlite(statements_engine, write_lock=False)  # the writer begins its own
            self.sqlite_writer = SQLiteWriter(statements_engine)
        self.backend = backend_named(self.dialect)
        """What this database does its own way: the one place the store learns which database it is on."""
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(self.engine, expire_on_commit=False)
        """Sessions for writes: each transaction takes the write lock up front on SQLite."""
        self.read_sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self.read_engine, expire_on_commit=False
        )
        """Sessions for reads that change nothing."""

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reads that change nothing.

        It ends with COMMIT rather than the pool's ROLLBACK: psycopg forgets its prepared
        statements on every rollback, and then the hot path pays for parsing and planning again.
        """
        async with _transaction(self.read_sessions, shield=False) as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A session for one write transaction, which cancellation does not interrupt."""
        async with _transaction(self.sessions, shield=True) as session:
            yield session

    async def write_statements(self, body: Callable[[Connection], T]) -> T:
        """SQLite: one write transaction of plain statements (`SQLiteWriter`); returns what `body` returns."""
        if self.sqlite_writer is None:
            raise RuntimeError("write_statements is for SQLite; PostgreSQL runs writes through its async driver")
        return await self.sqlite_writer.write(body)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def sync_url(self) -> URL:
        """The same database for synchronous tools such as alembic."""
        return normalize_url(self.url, sync=True)

    async def dispose(self) -> None:
        """Close all pooled connections, once those in use came back (`DRAIN_SECONDS` at most): a connection
        returned after its pool was disposed would be left for the garbage collector, never closed."""
        if self.autocommit_connections is not None:
            await self.autocommit_connections.close()
        engines = [self.engine] if self.read_engine is self.engine else [self.engine, self.read_engine]
        with anyio.move_on_after(DRAIN_SECONDS):
            while any(_checked_out(engine) for engine in engines):  # noqa: ASYNC110 - a pool offers no awaitable "all returned"
                await anyio.sleep(0.01)
        for engine in engines:
            await engine.dispose()
        if self.sqlite_writer is not None:
            await anyio.to_thread.run_sync(self.sqlite_writer.dispose)


def _checked_out(engine: AsyncEngine) -> int:
    """Connections of `engine`'s pool in use now (0 for a pool that does not keep them)."""
    checkedout = getattr(engine.sync_engine.pool, "checkedout", None)
    return int(checkedout()) if callable(checkedout) else 0


@asynccontextmanager
async def _transaction(sessions: async_sessionmaker[AsyncSession], *, shield: bool) -> AsyncIterator[AsyncSession]:
    """A session in one transaction, committed at the end, rolled back if the block raises.

    With `shield`, cancellation waits until the transaction is over: a write is a few
    milliseconds, and one abandoned halfway leaves its connection in an unknown state (on
    SQLite it keeps the write lock, and every other writer fails as "database is locked").
    """
    session = sessions()
    with anyio.CancelScope(shield=shield):
        try:
            await session.begin()
            yield session
            await session.commit()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.rollback()
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await session.close()


def _configure_sqlite(sync_engine: Engine, *, write_lock: bool) -> None:

    @event.listens_for(sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # first, so the pragmas below wait for locks too
        cursor.execute("PRAGMA journal_mode=WAL")  # a no-op on a migrated file, which is WAL already
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(sync_engine, "handle_error")
    def on_error(context: Any) -> None:
        if broken_file(context.original_exception):
            context.is_disconnect = True

    if not write_lock:
        return

    @event.listens_for(sync_engine, "begin")
    def on_begin(connection: Any) -> None:
        # take the write lock up front: a deferred transaction that reads and then writes
        # fails with "database is locked" when another writer got there first
        connection.exec_driver_sql("BEGIN IMMEDIATE")
