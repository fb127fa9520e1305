"""What every store operation shares: the database, one transaction per operation, its audit and wake-ups.

How a transaction ends (its audit events chained, its wake-ups sent) is the backend's
(`backend.Backend`); the store publishes the wake-ups this process still has to deliver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from sqlalchemy import Connection, select
from sqlalchemy.ext.asyncio import AsyncSession

from ..exceptions import NotFound
from .backend import Transaction
from .backends.database import Database
from .backends.notify import Notifier
from .claims import StaleLeaseCheck
from .models import RunRow
from .run_plan import RunWrite

T = TypeVar("T")


class StoreBase:
    """Shared plumbing for the store's operations."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.backend = db.backend
        self.notifier = notifier or db.backend.notifier(db)
        self._stored_tool_versions: set[str] = set()
        """Tool definition versions this process stored or saw stored: a version's definition never changes."""
        self._stale_leases = StaleLeaseCheck()
        """When (monotonic) a claim last looked for runs whose worker's lease expired."""

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

    async def write_run(self, write: RunWrite) -> None:
        """A worker's write to the run it holds, in one transaction: the same statements on both databases."""
        self.notifier.publish(await self.backend.write_run(self.db, write, self._stored_tool_versions))

    async def _run_for_update(self, session: AsyncSession, run_id: str) -> RunRow:
        run = await session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if run is None:
            raise NotFound(f"No run {run_id!r}")
        return run
