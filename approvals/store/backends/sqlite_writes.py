"""SQLite's hot-path writes: one transaction of plain statements, on the event loop's thread when nothing makes it wait.

A claim, a step or a decision is about half a millisecond of Python, which holds the GIL
wherever it runs, and a tenth of one in SQLite; a hop to a worker thread and back costs
another fifth. So a write runs right where it is asked for when it can start at once:
this process has no write in flight and `BEGIN IMMEDIATE` gets SQLite's write lock
without waiting (on a connection kept for these writes, whose busy timeout is 0). Anything that would wait goes
to a worker thread, which waits for the lock with SQLite's busy handler: another
process writing, or a write of this process already in a thread. Either way the
statements run straight on the `sqlite3` cursor (`DirectConnection`).

What can stall for milliseconds is a checkpoint (it copies the log into the database
and syncs both), which SQLite runs inside the commit that fills the log. These
connections never checkpoint on commit; every `CHECKPOINT_EVERY` of their commits, the
writer runs a passive checkpoint in a worker thread, so the event loop never waits for
the disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection

from .sqlite_direct import DirectConnection

__all__ = ("CHECKPOINT_EVERY", "SQLiteWriter", "broken_file")

T = TypeVar("T")
logger = logging.getLogger(__name__)

CHECKPOINT_EVERY = 100
"""Commits between passive checkpoints: a hot-path write changes a few pages, SQLite's own default is every 1,000."""
BUSY_TIMEOUT_MS = 10_000
"""How long a write in a worker thread waits for another process's write lock."""


def broken_file(error: BaseException) -> bool:
    """SQLite keeps a file's read-only or broken state per connection: one that saw it stays so.

    Such an error is treated as a disconnect: the pool replaces that connection and every
    one opened before it, so the file works again once it is writable again.
    """
    name = getattr(error, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN"))


class _Busy(Exception):
    """The write lock is taken: this write goes to a worker thread, which can wait for it."""


class SQLiteWriter:
    """Write transactions of plain statements on `engine` (the file through the plain `sqlite3` driver).

    Writers of this process take turns on a lock before `BEGIN IMMEDIATE`, so they queue
    without SQLite's sleeping busy handler. A transaction is committed when its body
    returns and rolled back if it raises. Cancellation never interrupts one: it runs
    without awaiting, or in a thread that is waited for. Driver errors come out as
    SQLAlchemy's, as from every other path.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._commits = 0
        self._own: PoolProxiedConnection | None = None
        """The connection for writes that start at once, kept out of the pool: its busy timeout is 0."""
        event.listen(engine, "connect", _no_checkpoint_on_commit)

    async def write(self, body: Callable[[Connection], T]) -> T:
        """Run `body` in one write transaction and commit it; returns what `body` returns."""
        done = self._at_once(body)
        if done is None:
            done = await anyio.to_thread.run_sync(self._in_turn, body)
        else:  # let other tasks run, as any await would (without turning a committed write into a cancellation)
            await anyio.lowlevel.cancel_shielded_checkpoint()
        result, checkpoint_due = done
        if checkpoint_due:
            await anyio.to_thread.run_sync(self._checkpoint)
        return result

    def dispose(self) -> None:
        """Close every connection, after the write in flight if any (a worker thread's).

        That write's connection would outlive the pool otherwise, and SQLite hands a
        connection's open file to new ones (a file made read-only would stay writable).
        """
        with self._lock:
            self._drop_own()
            self.engine.dispose()

    def _at_once(self, body: Callable[[Connection], T]) -> tuple[T, bool] | None:
        """The transaction on this thread, or None when it would have to wait for the write lock."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._own is None:
                self._own = self.engine.raw_connection()
                cast(sqlite3.Connection, self._own.driver_connection).execute("PRAGMA busy_timeout=0")
            return self._transaction(self._own, body, wait=False)
        except _Busy:
            return None
        except BaseException:
            if self._own is not None and not self._own.is_valid:  # a broken file: `_driver_error` closed it
                self._own = None
            raise
        finally:
            self._lock.release()

    def _in_turn(self, body: Callable[[Connection], T]) -> tuple[T, bool]:
        with self._lock:
            pooled = self.engine.raw_connection()
            try:
                return self._transaction(pooled, body, wait=True)
            finally:
                pooled.close()

    def _transaction(
        self, pooled: PoolProxiedConnection, body: Callable[[Connection], T], *, wait: bool
    ) -> tuple[T, bool]:
        """`body` between `BEGIN IMMEDIATE` and `COMMIT`, and whether a checkpoint is due.

        Without `wait`, raises `_Busy` when another connection holds the write lock.
        """
        connection = cast(sqlite3.Connection, pooled.driver_connection)
        try:
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not wait and getattr(exc, "sqlite_errorname", "") == "SQLITE_BUSY":
                    raise _Busy from None
                raise
            try:
                # the hot path's statement functions call only what DirectConnection has
                result = body(cast(Connection, DirectConnection(connection, self.engine.dialect)))
                connection.commit()
            except BaseException:
                if connection.in_transaction:
                    connection.rollback()
                raise
        except sqlite3.Error as exc:
            raise self._driver_error(pooled, exc) from exc
        self._commits += 1
        return result, self._commits % CHECKPOINT_EVERY == 0

    def _drop_own(self) -> None:
        if self._own is not None:
            self._own.invalidate()  # closes it: it was never given back to the pool
            self._own = None

    def _checkpoint(self) -> None:
        """Copy the log into the database as far as no reader needs it (it never waits for one).

        The write before it has committed, so a failure is only logged: the next one tries again.
        """
        try:
            pooled = self.engine.raw_connection()
        except sqlite3.Error as exc:
            logger.warning("SQLite checkpoint skipped: %s", exc)
            return
        try:
            cast(sqlite3.Connection, pooled.driver_connection).execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            error = self._driver_error(pooled, exc, drop_own=False)  # the writers' own connection is theirs to drop
            logger.warning("SQLite checkpoint failed (the next one tries again): %s", error)
        finally:
            pooled.close()

    def _driver_error(self, pooled: PoolProxiedConnection, exc: sqlite3.Error, *, drop_own: bool = True) -> DBAPIError:
        if broken_file(exc):  # as `handle_error` does for SQLAlchemy's statements: this and older connections go
            pooled.invalidate()
            if drop_own and pooled is not self._own:
                self._drop_own()
            self.engine.dispose()
        return cast(DBAPIError, DBAPIError.instance(None, None, exc, sqlite3.Error))


def _no_checkpoint_on_commit(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")
