"""What every aggregate of the store is built on: the database, one transaction per operation, its audit and wake-ups.

Each aggregate (`Runs`, `Calls`, `Rules`, ...) is a `StoreBase` over the same database and notifier
(`facade.Store` builds them); what else they share is handed to them, never inherited. How a
transaction ends (its audit events chained, its wake-ups sent) is the backend's (`backend.Backend`);
the store publishes the wake-ups this process still has to deliver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from .backend import Transaction
from .backends.database import Database
from .backends.notify import Notifier

T = TypeVar("T")


class StoreBase:
    """Shared plumbing for the store's operations."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.backend = db.backend
        self.notifier = notifier or db.backend.notifier(db)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction[AsyncSession]]:
        """One transaction through an async session; in-process wake-ups are published only after it commits.

        Its audit events are chained as its last statements (`Backend.end_session`), as every write's are.
        """
        async with self.db.write() as session:
            tx = Transaction(session, self.backend)
            yield tx
            await session.flush()  # the state change first, so the audit lock is held only until commit
            await self.backend.end_session(tx)
        self.notifier.publish(tx.announcements)

    async def run_statements(self, body: Callable[[Transaction[Connection]], T]) -> T:
        """One transaction of plain synchronous statements (`body`); returns what `body` returns.

        The hot path's statements are written this way (`Backend.run_statements` carries them out:
        on SQLite straight on the `sqlite3` cursor, on PostgreSQL through the async driver).
        """
        tx, result = await self.backend.run_statements(self.db, body)
        self.notifier.publish(tx.announcements)
        return result
