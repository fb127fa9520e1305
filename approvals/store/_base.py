"""What every store operation shares: the database, one transaction per operation, audit and wake-ups."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..exceptions import NotFound
from ..messages import ModelRequest, ModelResponse
from ..tools import ToolDefinition
from ._pg import pg_transaction
from ._writes import (
    OPEN_CALL_STATUSES,
    SYSTEM_ACTOR_ID,
    ExecutedCall,
    HeldRun,
    WriteTransaction,
    lease_lost,
    message_rows,
    tool_definition_row,
    utcnow,
)
from .audit import append_events
from .db import Database
from .models import DecisionRow, MessageRow, RunRow, ToolCallRow, ToolDefinitionRow
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


SYSTEM = Actor(id=SYSTEM_ACTOR_ID, role="admin")
"""The actor for work nobody asked for: expiry, crash recovery."""


class Transaction(WriteTransaction):
    """A store operation's SQLAlchemy session, with announcements and audit events for its end."""

    def __init__(self, session: AsyncSession) -> None:
        super().__init__()
        self.session = session

    async def hold(self, run_id: str, worker_id: str, *, grow: int = 0, **values: Any) -> HeldRun:
        statement = (
            update(RunRow)
            .where(RunRow.id == run_id, RunRow.status == "resuming", RunRow.lease_owner == worker_id)
            .values(message_count=RunRow.message_count + grow, updated_at=utcnow(), **values)
            .returning(RunRow.agent_name, RunRow.message_count)
        )
        row = (await self.session.execute(statement)).one_or_none()
        if row is None:
            raise lease_lost(
                run_id, worker_id, await self.session.scalar(select(RunRow.status).where(RunRow.id == run_id))
            )
        return HeldRun(id=run_id, agent_name=row.agent_name, next_seq=row.message_count - grow, worker_id=worker_id)

    async def append_messages(self, run: HeldRun, messages: Sequence[ModelRequest | ModelResponse]) -> None:
        if messages:
            await self.session.execute(insert(MessageRow), message_rows(run, messages))

    async def ensure_tool_definition(self, definition: ToolDefinition) -> str:
        dialect_insert = pg_insert if self.session.get_bind().dialect.name == "postgresql" else sqlite_insert
        await self.session.execute(
            dialect_insert(ToolDefinitionRow).values(tool_definition_row(definition)).on_conflict_do_nothing()
        )
        return definition.version

    async def insert_calls(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            await self.session.execute(insert(ToolCallRow), rows)

    async def start_executing(self, run_id: str, tool_call_ids: Sequence[str]) -> list[ExecutedCall]:
        now = utcnow()
        calls = (
            await self.session.execute(
                update(ToolCallRow)
                .where(
                    ToolCallRow.run_id == run_id,
                    ToolCallRow.tool_call_id.in_(tool_call_ids),
                    ToolCallRow.status == "approved",
                )
                .values(status="executing", updated_at=now)
                .returning(*_EXECUTED_COLUMNS)
            )
        ).all()
        if calls:
            await self.session.execute(
                update(DecisionRow)
                .where(DecisionRow.call_id.in_([c.id for c in calls]), DecisionRow.consumed_at.is_(None))
                .values(consumed_at=now)
            )
        return [ExecutedCall(*call) for call in calls]

    async def executing_call_ids(self, run_id: str) -> list[str]:
        return list(
            await self.session.scalars(
                select(ToolCallRow.tool_call_id).where(ToolCallRow.run_id == run_id, ToolCallRow.status == "executing")
            )
        )

    async def settle_executing(self, run_id: str, outcomes: dict[str, tuple[str, Any]]) -> list[ExecutedCall]:
        if not outcomes:
            return []
        calls = (
            await self.session.scalars(
                select(ToolCallRow).where(
                    ToolCallRow.run_id == run_id,
                    ToolCallRow.status == "executing",
                    ToolCallRow.tool_call_id.in_(list(outcomes)),
                )
            )
        ).all()
        now = utcnow()
        for call in calls:
            call.status, call.result = outcomes[call.tool_call_id]
            call.updated_at = now
        return [ExecutedCall(c.id, c.tool_call_id, c.tool_name, c.args_digest, c.override_digest) for c in calls]

    async def lock_call(self, call_id: str) -> tuple[ToolCallRow, str | None] | None:
        run_of_call = select(ToolCallRow.run_id).where(ToolCallRow.id == call_id).scalar_subquery()
        await self.session.execute(select(RunRow.id).where(RunRow.id == run_of_call).with_for_update())  # run first
        found = (
            await self.session.execute(
                select(ToolCallRow, RunRow.started_by)
                .join(RunRow, RunRow.id == ToolCallRow.run_id)
                .where(ToolCallRow.id == call_id)
                .with_for_update(of=ToolCallRow)
            )
        ).one_or_none()
        return None if found is None else (found[0], found[1])

    async def add_decision(self, row: dict[str, Any]) -> None:
        self.session.add(DecisionRow(**row))

    async def count_approvals(self, call_id: str, args_digest: str) -> int:
        await self.session.flush()
        count = await self.session.scalar(
            select(func.count(func.distinct(DecisionRow.actor))).where(
                DecisionRow.call_id == call_id,
                DecisionRow.verdict.in_(["approve", "edit"]),
                DecisionRow.args_digest == args_digest,
                DecisionRow.consumed_at.is_(None),
            )
        )
        return count or 0

    async def update_call(self, call: ToolCallRow, **changes: Any) -> None:
        for column, value in changes.items():
            setattr(call, column, value)  # the session flushes it

    async def ready_if_decided(self, run_id: str, agent_name: str) -> None:
        await self.session.flush()  # the caller holds the run's row: decisions on its calls are serialized
        still_open = (
            select(ToolCallRow.id)
            .where(ToolCallRow.run_id == run_id, ToolCallRow.status.in_(OPEN_CALL_STATUSES))
            .exists()
        )
        ready = await self.session.scalar(
            update(RunRow)
            .where(RunRow.id == run_id, RunRow.status == "awaiting_approval", ~still_open)
            .values(status="ready", updated_at=utcnow())
            .returning(RunRow.id)
        )
        if ready is not None:
            await self._became_ready(run_id, agent_name)


_EXECUTED_COLUMNS = (
    ToolCallRow.id,
    ToolCallRow.tool_call_id,
    ToolCallRow.tool_name,
    ToolCallRow.args_digest,
    ToolCallRow.override_digest,
)


class StoreBase:
    """Shared plumbing for the store's operations."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self.db = db
        self.notifier = notifier or Notifier(db)
        self._stored_tool_versions: set[str] = set()
        """Tool definition versions this process stored or saw stored: a version's definition never changes."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One transaction through SQLAlchemy; in-process wake-ups are published only after it commits."""
        async with self.db.write() as session:
            tx = Transaction(session)
            yield tx
            await session.flush()  # the state change first, so the audit lock is held only until commit
            await self.notifier.send_in_transaction(session, tx.announcements)
            await append_events(session, tx.events)
        self.notifier.publish(tx.announcements)

    def write_transaction(self) -> AbstractAsyncContextManager[WriteTransaction]:
        """A transaction for the hot path of a run's life: pipelined psycopg on PostgreSQL, SQLAlchemy on SQLite."""
        if self.db.is_postgres:
            return pg_transaction(self.db, self._stored_tool_versions)
        return self.transaction()

    async def _run_for_update(self, session: AsyncSession, run_id: str) -> RunRow:
        run = await session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if run is None:
            raise NotFound(f"No run {run_id!r}")
        return run
