"""What each database does differently with the same statements: one `Backend` each.

SQLite (`sqlite.SQLiteBackend`) runs a transaction's statements straight on the `sqlite3`
cursor, on the event loop (`sqlite_direct`, `sqlite_writes`), and chains the audit log in
Python; PostgreSQL (`postgres_backend.PostgresBackend`) locks rows, chains the audit log in the
server and sends hot-path transactions in psycopg pipelines on connections kept in autocommit
mode (`postgres`, `postgres_connections`, `postgres_decisions`). `database.Database` picks one
from the URL. The rules themselves, the plans and the statements, live one level up and are
written once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from ..audit import AuditEvent
from ..backend import Transaction
from .database import backend_named

__all__ = ("append_event", "append_events", "backend_named")


async def append_events(session: AsyncSession, events: list[AuditEvent]) -> None:
    """Chain and insert `events` in a caller's own transaction, as the store's transactions end."""
    if not events:
        return
    backend = backend_named(session.get_bind().dialect.name)
    tx = Transaction(session, backend)
    tx.events.extend(events)
    await backend.end_session(tx)


async def append_event(session: AsyncSession, **fields: Any) -> None:
    """Chain and insert one event now (for callers outside the store's transactions)."""
    await append_events(session, [AuditEvent(**fields)])
