"""What every store operation shares: the database, one transaction per operation, audit and wake-ups."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..exceptions import LeaseLost, NotFound
from ..messages import MESSAGE_FORMAT_VERSION, ModelRequest, ModelResponse, dump_message
from ..tools import ToolDefinition
from .audit import AuditEvent, append_events
from .db import Database
from .models import MessageRow, RunRow, ToolDefinitionRow
from .notify import Notifier

Role = Literal["viewer", "reviewer", "admin"]
ROLE_RANK: dict[str, int] = {"viewer": 0, "reviewer": 1, "admin": 2}


@dataclass(frozen=True)
class Actor:
    """Who is acting: a logged-in person, an API client or the system; from authentication, never a request body."""

    id: str
    role: Role
    groups: frozenset[str] = field(default_factory=frozenset)

    def can(self, role: Role) -> bool:
        """True when the actor's role is at least `role`."""
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


SYSTEM = Actor(id="system", role="admin")
"""The actor for work nobody asked for: expiry, crash recovery."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class HeldRun:
    """A run this worker holds, as far as a write needs to know it."""

    id: str
    agent_name: str
    next_seq: int
    """Sequence number of the first message this write appends."""
    worker_id: str


class Transaction:
    """One store operation's session, with announcements to publish once it commits."""

    def __init__(self, session: AsyncSession, notifier: Notifier) -> None:
        self.session = session
        self._notifier = notifier
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    async def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    async def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )


class StoreBase:
    """Shared plumbing for the store's operations."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.notifier = notifier or Notifier(db)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One transaction; in-process wake-ups are published only after it commits."""
        async with self.db.sessions() as session, session.begin():
            tx = Transaction(session, self.notifier)
            yield tx
            await session.flush()  # the state change first, so the audit lock is held only until commit
            await self.notifier.send_in_transaction(session, tx.announcements)
            await append_events(session, tx.events)
        self.notifier.publish(tx.announcements)

    async def _run_for_update(self, session: AsyncSession, run_id: str) -> RunRow:
        run = await session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if run is None:
            raise NotFound(f"No run {run_id!r}")
        return run

    async def _hold(
        self, session: AsyncSession, run_id: str, worker_id: str, *, grow: int = 0, **values: Any
    ) -> HeldRun:
        """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it.

        Reserves `grow` message sequence numbers and sets `values`, in one statement.
        """
        statement = (
            update(RunRow)
            .where(RunRow.id == run_id, RunRow.status == "resuming", RunRow.lease_owner == worker_id)
            .values(message_count=RunRow.message_count + grow, updated_at=utcnow(), **values)
            .returning(RunRow.agent_name, RunRow.message_count)
        )
        row = (await session.execute(statement)).one_or_none()
        if row is None:
            status = await session.scalar(select(RunRow.status).where(RunRow.id == run_id))
            if status is None:
                raise NotFound(f"No run {run_id!r}")
            raise LeaseLost(f"Worker {worker_id!r} no longer holds run {run_id!r} (status {status})")
        return HeldRun(id=run_id, agent_name=row.agent_name, next_seq=row.message_count - grow, worker_id=worker_id)

    async def _append_messages(
        self, session: AsyncSession, run: HeldRun, messages: Sequence[ModelRequest | ModelResponse]
    ) -> None:
        """Append rows after the last one: a step writes only its own messages."""
        if not messages:
            return
        now = utcnow()
        rows = [
            {
                "run_id": run.id,
                "seq": run.next_seq + offset,
                "kind": message.kind,
                "format_version": MESSAGE_FORMAT_VERSION,
                "data": dump_message(message),
                "created_at": now,
            }
            for offset, message in enumerate(messages)
        ]
        await session.execute(insert(MessageRow), rows)

    async def _ensure_tool_definition(self, session: AsyncSession, definition: ToolDefinition) -> str:
        """Store a definition once per version; return the version."""
        version = definition.version
        values = {
            "version": version,
            "name": definition.name,
            "definition": {
                "name": definition.name,
                "description": definition.description,
                "parameters_json_schema": definition.parameters_json_schema,
                "strict": definition.strict,
                "sequential": definition.sequential,
                "metadata": definition.metadata,
            },
            "created_at": utcnow(),
        }
        dialect_insert = pg_insert if self.db.is_postgres else sqlite_insert
        await session.execute(dialect_insert(ToolDefinitionRow).values(values).on_conflict_do_nothing())
        return version
