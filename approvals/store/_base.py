"""What every store operation shares: the database, one transaction per operation, audit and wake-ups."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, select
from sqlalchemy.ext.asyncio import AsyncSession

from ..exceptions import NotFound
from ._run_writes import apply_write
from ._transaction import Transaction
from ._writes import RunWrite
from .audit import AuditEvent, append_events, write_chained
from .db import Database
from .models import RunRow
from .notify import Notifier

T = TypeVar("T")


class StoreBase:
    """Shared plumbing for the store's operations."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.notifier = notifier or Notifier(db)
        self._stored_tool_versions: set[str] = set()
        """Tool definition versions this process stored or saw stored: a version's definition never changes."""
        self._stale_leases_checked_at = float("-inf")
        """When (monotonic) a claim last looked for runs whose worker's lease expired."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction[AsyncSession]]:
        """One transaction through an async session; in-process wake-ups are published only after it commits.

        Its audit events are chained as its last statement: in Python on SQLite, in the server
        on PostgreSQL (`backends.postgres.chain_and_wake`, with the wake-ups), as every write's are.
        """
        async with self.db.write() as session:
            tx = Transaction(session)
            yield tx
            await session.flush()  # the state change first, so the audit lock is held only until commit
            if self.db.is_postgres and tx.events:
                for events, announcements in _in_chunks(tx.events, tx.announcements):
                    await session.execute(*_chain_and_wake(events, announcements))
            else:
                await self.notifier.send_in_transaction(session, tx.announcements)
                await append_events(session, tx.events)
        self.notifier.publish(tx.announcements)

    async def run_statements(self, body: Callable[[Transaction[Connection]], T]) -> T:
        """One transaction of plain synchronous statements (`body`); returns what `body` returns.

        The hot path's statements are written this way. On SQLite they run straight on the
        `sqlite3` cursor, on the event loop's thread when the write lock is free
        (`Database.write_statements`); on PostgreSQL the hot path pipelines them (`backends.postgres`), and
        the rarer callers (crash recovery, renewing a lease, gates) run them through the async driver.
        """

        def whole(connection: Connection) -> tuple[Transaction[Connection], T]:
            tx = Transaction(connection)
            result = body(tx)
            if connection.dialect.name != "postgresql":
                write_chained(connection, tx.events)
            elif tx.events:  # the wake-ups go with them
                for events, announcements in _in_chunks(tx.events, tx.announcements):
                    connection.execute(*_chain_and_wake(events, announcements))
            return tx, result

        if self.db.is_sqlite:
            tx, result = await self.db.write_statements(whole)
        else:
            async with self.db.write() as session:
                tx, result = await session.run_sync(lambda sync_session: whole(sync_session.connection()))
                if not tx.events:
                    await self.notifier.send_in_transaction(session, tx.announcements)
        self.notifier.publish(tx.announcements)
        return result

    async def write_run(self, write: RunWrite) -> None:
        """A worker's write to the run it holds, in one transaction: the same statements on both databases."""
        if self.db.is_postgres:
            from .backends.postgres import pg_run_write  # it reaches the decision rules, which import this module

            await pg_run_write(self.db, write, self._stored_tool_versions)
            return
        await self.run_statements(lambda tx: apply_write(tx, write, self._stored_tool_versions))
        self._stored_tool_versions.update(definition.version for definition in write.tool_definitions)

    async def _run_for_update(self, session: AsyncSession, run_id: str) -> RunRow:
        run = await session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if run is None:
            raise NotFound(f"No run {run_id!r}")
        return run


CHAIN_CHUNK = 50
"""Most events one statement appends on PostgreSQL: each is a call nested in the previous one's, and
SQLAlchemy compiles nesting recursively (a rules file of a few hundred rules is one transaction)."""


def _in_chunks(
    events: list[AuditEvent], announcements: list[tuple[str, str]]
) -> list[tuple[list[AuditEvent], list[tuple[str, str]]]]:
    """The events in statements of at most `CHAIN_CHUNK`, the wake-ups with the last (each reads the chain's head)."""
    chunks = [events[start : start + CHAIN_CHUNK] for start in range(0, len(events), CHAIN_CHUNK)]
    return [(chunk, announcements if index == len(chunks) - 1 else []) for index, chunk in enumerate(chunks)]


def _chain_and_wake(events: list[AuditEvent], announcements: list[tuple[str, str]]) -> Any:
    from .backends.postgres import chain_and_wake  # it reaches the decision rules, which import this module

    return chain_and_wake(events, announcements)
