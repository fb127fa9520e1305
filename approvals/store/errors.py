"""Which database errors pass by themselves, and which say something about the data.

A transient error (the server restarted, a connection was dropped, the disk is full, the
SQLite file is locked or read-only for now) means "try again later": nothing about the
run is wrong, so a worker backs off and retries, and an API client is told 503 with
`Retry-After`. Any other database error (a constraint, a value the column cannot hold)
will happen again on retry, so the operation fails for good with its reason.
"""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy import exc as sa_exc

__all__ = ("describe", "is_transient")

_PG_TRANSIENT_CLASSES = ("08", "53", "57P", "58")
"""Connection exceptions, insufficient resources (disk full, out of memory, too many
connections), operator intervention (shutdown, cannot connect now), system errors (I/O)."""
_PG_TRANSIENT_CODES = frozenset({"40001", "40P01", "55P03", "55006"})
"""Serialization failure, deadlock, lock not available, object in use."""
_SQLITE_TRANSIENT = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",
)


def is_transient(error: BaseException) -> bool:
    """Whether retrying the same operation later may succeed (a group: all of its errors are transient)."""
    if isinstance(error, BaseExceptionGroup):
        return all(is_transient(inner) for inner in error.exceptions)
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        return error.orig is not None and is_transient(error.orig)
    if isinstance(error, sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True  # no pooled connection came free in time, or one was found dead
    if isinstance(error, psycopg.Error):
        code = error.sqlstate
        if code is None:  # raised by the client: the connection is gone or could not be made
            return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
        return code in _PG_TRANSIENT_CODES or code.startswith(_PG_TRANSIENT_CLASSES)
    if isinstance(error, sqlite3.Error):
        name = getattr(error, "sqlite_errorname", "") or ""
        if name:
            return name.startswith(_SQLITE_TRANSIENT)
        return isinstance(error, sqlite3.OperationalError)
    return isinstance(error, ConnectionError | TimeoutError)


def describe(error: BaseException) -> str:
    """One line for a log or a client: the driver's own first line, without SQL or parameters."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    inner = error.orig if isinstance(error, sa_exc.DBAPIError) and error.orig is not None else error
    text = str(inner).strip().splitlines()
    line = f"{type(inner).__name__}: {text[0] if text else 'no message'}"
    detail = inner.diag.message_detail if isinstance(inner, psycopg.Error) else None
    return f"{line} ({detail})" if detail else line
