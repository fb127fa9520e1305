"""What every store operation shares: the database, one transaction per operation, audit and wake-ups."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import ColumnElement, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from ..exceptions import Conflict, NotFound
from ._pg import pg_run_write
from ._writes import (
    RELEASED_DETAILS,
    SYSTEM_ACTOR_ID,
    ExecutedCall,
    HeldRun,
    RunEvent,
    RunWrite,
    lease_lost,
    message_rows,
    tool_definition_row,
    utcnow,
)
from .audit import AuditEvent, append_events, run_event
from .db import Database
from .models import STANDING, DecisionRow, MessageRow, RunRow, ToolCallRow, ToolDefinitionRow
from .notify import READY_CHANNEL, RUNS_CHANNEL, Notifier
from .states import CallStatus, RunStatus

Role = Literal["viewer", "reviewer", "admin"]
ROLE_RANK: dict[str, int] = {"viewer": 0, "reviewer": 1, "admin": 2}


@dataclass(frozen=True)
class Actor:
    """Who is acting: a logged-in person, an API client or the system; from authentication, never a request body."""

    id: str
    role: Role
    groups: frozenset[str] = field(default_factory=frozenset)
    scopes: frozenset[str] | None = None
    """What a token may do (`TOKEN_SCOPES`); None: whatever the role allows."""
    person: bool = True
    """False for a service token: it belongs to nobody, so its approval would count for nobody."""

    def can(self, role: Role) -> bool:
        """True when the actor's role is at least `role`."""
        return ROLE_RANK[self.role] >= ROLE_RANK[role]

    def may(self, scope: str) -> bool:
        """True when the actor's token (if any) carries `scope`."""
        return self.scopes is None or scope in self.scopes


TOKEN_SCOPES = ("runs:read", "runs:write", "runs:admin", "calls:read", "calls:decide", "audit:read")
"""What a token can be limited to; each API route needs one of them besides its role."""

SYSTEM = Actor(id=SYSTEM_ACTOR_ID, role="admin")
"""The actor for work nobody asked for: expiry, crash recovery."""


class Transaction:
    """A store operation's SQLAlchemy session, with announcements and audit events for its end.

    Every operation runs through it on SQLite, and the rare ones on PostgreSQL too; there the
    hot path (a run's writes, decisions) is one function call each (`_pg`), which does what
    `apply` and `DecisionOps._apply` do here.
    """

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    async def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    async def record(self, event: AuditEvent) -> None:
        """Record an event made by `call_event` or `run_event`; it is chained when the transaction ends."""
        self.events.append(event)

    async def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )

    async def apply(self, write: RunWrite) -> None:
        """Carry out a worker's write to the run it holds; `approvals_run_write` is its PostgreSQL twin."""
        run = await self._hold(write)
        now = write.now
        if write.messages:
            await self.session.execute(insert(MessageRow), message_rows(run, write.messages, now))
        insert_new = pg_insert if self.session.get_bind().dialect.name == "postgresql" else sqlite_insert
        for definition in write.tool_definitions:
            await self.session.execute(
                insert_new(ToolDefinitionRow).values(tool_definition_row(definition, now)).on_conflict_do_nothing()
            )
        if write.calls:
            pending = {"run_id": run.id, "agent_name": run.agent_name, "status": CallStatus.PENDING}
            rows = [{**call, **pending, "created_at": now, "updated_at": now} for call in write.calls]
            await self.session.execute(insert(ToolCallRow), rows)
        if write.start_executing is not None:
            started = await self.start_executing(run, write.start_executing, now)
            if len(started) != len(set(write.start_executing)):
                raise Conflict(f"Run {run.id!r}: not every call to execute is approved")
        events: list[RunEvent] = []
        for call, (status, result) in await self._settle_executing(run.id, write.results, now):
            events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"result": result}))
        if write.released:
            for call in await self._release(run.id, write.released, now):
                events.append(RunEvent("call.released", "call", call.id, call.tool_name, RELEASED_DETAILS))
        if write.interrupted is not None:
            failed, error = write.interrupted.failed_tool_call_id, write.interrupted.error
            stuck = await self.session.scalars(
                select(ToolCallRow.tool_call_id).where(
                    ToolCallRow.run_id == run.id, ToolCallRow.status == CallStatus.EXECUTING
                )
            )
            outcomes = {
                t: (CallStatus.FAILED, error) if t == failed else (CallStatus.OUTCOME_UNKNOWN, None) for t in stuck
            }
            for call, (status, _) in await self._settle_executing(run.id, outcomes, now):
                events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"error": error}))
        for event in [*events, *write.events]:
            await self.audit(
                write.worker_id,
                event.action,
                event.subject_type,
                event.subject_id,
                run_id=run.id,
                agent_name=run.agent_name,
                tool_name=event.tool_name,
                details=event.details,
                at=now,
            )
        for channel, payload in write.announcements:
            await self.announce(channel, payload)

    async def hold(self, run_id: str, worker_id: str, **values: Any) -> HeldRun:
        """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it."""
        return await self._hold(RunWrite(run_id=run_id, worker_id=worker_id, changes=values))

    async def _hold(self, write: RunWrite) -> HeldRun:
        grow = len(write.messages)
        statement = (
            update(RunRow)
            .where(
                RunRow.id == write.run_id, RunRow.status == RunStatus.RESUMING, RunRow.lease_owner == write.worker_id
            )
            .values(message_count=RunRow.message_count + grow, updated_at=write.now, **write.changes)
            .returning(RunRow.agent_name, RunRow.message_count)
        )
        row = (await self.session.execute(statement)).one_or_none()
        if row is None:
            status = await self.session.scalar(select(RunRow.status).where(RunRow.id == write.run_id))
            raise lease_lost(write.run_id, write.worker_id, status)
        return HeldRun(
            id=write.run_id, agent_name=row.agent_name, next_seq=row.message_count - grow, worker_id=write.worker_id
        )

    async def start_executing(self, run: HeldRun, tool_call_ids: Sequence[str], now: dt.datetime) -> list[ExecutedCall]:
        """Move these approved calls to `executing`, consume their approvals, audit it; returns the calls moved."""
        started = await self._move_calls(
            run.id, tool_call_ids, CallStatus.APPROVED, CallStatus.EXECUTING, now, consumed_at=now
        )
        for call in started:
            await self.audit(
                run.worker_id,
                "call.executing",
                "call",
                call.id,
                run_id=run.id,
                agent_name=run.agent_name,
                tool_name=call.tool_name,
                details={"args_digest": call.digest},
                at=now,
            )
        return started

    async def _release(self, run_id: str, tool_call_ids: Sequence[str], now: dt.datetime) -> list[ExecutedCall]:
        """Calls marked executing that never ran go back to approved, and the approvals this start used up stand again.

        Approvals an earlier start used up (before the call's outcome became unknown) stay used:
        they were given for that run of it.
        """
        return await self._move_calls(
            run_id, tool_call_ids, CallStatus.EXECUTING, CallStatus.APPROVED, now, consumed_at=None
        )

    async def _move_calls(
        self,
        run_id: str,
        tool_call_ids: Sequence[str],
        source: CallStatus,
        target: CallStatus,
        now: dt.datetime,
        *,
        consumed_at: dt.datetime | None,
    ) -> list[ExecutedCall]:
        """Guarded status change of a run's calls, their approvals marked consumed (or not) with it."""
        calls = (
            await self.session.execute(
                update(ToolCallRow)
                .where(
                    ToolCallRow.run_id == run_id,
                    ToolCallRow.tool_call_id.in_(tool_call_ids),
                    ToolCallRow.status == source,
                )
                .values(status=target, updated_at=now)
                .returning(*_EXECUTED_COLUMNS)
            )
        ).all()
        if calls:
            affected: ColumnElement[bool]
            if consumed_at is not None:
                affected = DecisionRow.consumed_at.is_(None)
            else:  # the approvals the latest start used up: they share its time
                other = aliased(DecisionRow)
                latest = select(func.max(other.consumed_at)).where(other.call_id == DecisionRow.call_id)
                affected = DecisionRow.consumed_at == latest.scalar_subquery()
            await self.session.execute(
                update(DecisionRow)
                .where(DecisionRow.call_id.in_([c.id for c in calls]), affected)
                .values(consumed_at=consumed_at)
            )
        return [ExecutedCall(*call) for call in calls]

    async def _settle_executing(
        self, run_id: str, outcomes: Mapping[str, tuple[str, Any]], now: dt.datetime
    ) -> list[tuple[ExecutedCall, tuple[str, Any]]]:
        """Executing calls get their final status and result; the calls settled, in the order of `outcomes`."""
        if not outcomes:
            return []
        calls = (
            await self.session.scalars(
                select(ToolCallRow).where(
                    ToolCallRow.run_id == run_id,
                    ToolCallRow.status == CallStatus.EXECUTING,
                    ToolCallRow.tool_call_id.in_(list(outcomes)),
                )
            )
        ).all()
        by_id = {call.tool_call_id: call for call in calls}
        settled = []
        for tool_call_id, outcome in outcomes.items():
            call = by_id.get(tool_call_id)
            if call is None:
                continue
            call.status, call.result = CallStatus(outcome[0]), outcome[1]
            call.updated_at = now
            settled.append((ExecutedCall(call.id, tool_call_id, call.tool_name, call.current_digest), outcome))
        return settled

    async def lock_call(self, call_id: str) -> tuple[ToolCallRow, str | None] | None:
        """The call, locked until commit, and who started its run; None when there is no such call."""
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
        """Record one reviewer's verdict (a `decisions` row)."""
        self.session.add(DecisionRow(**row))

    async def count_approvals(self, call_id: str, args_digest: str) -> int:
        """Distinct reviewers whose unconsumed approvals of these arguments stand."""
        await self.session.flush()
        count = await self.session.scalar(
            select(func.count(func.distinct(DecisionRow.actor))).where(
                DecisionRow.call_id == call_id, DecisionRow.args_digest == args_digest, STANDING
            )
        )
        return count or 0

    async def update_call(self, call: ToolCallRow, **changes: Any) -> None:
        """Set columns of a call from `lock_call`."""
        for column, value in changes.items():
            setattr(call, column, value)  # the session flushes it

    async def ready_if_decided(self, run_id: str, agent_name: str) -> None:
        """A paused run whose calls are all decided becomes ready, audited and announced, when this commits.

        The caller holds the run's row (`lock_call` takes it first), so decisions on one run's
        calls are serialized: two reviewers settling its last two calls at once, the second
        sees the first's verdict.
        """
        await self.session.flush()
        still_open = select(ToolCallRow.id).where(ToolCallRow.run_id == run_id, ToolCallRow.is_open).exists()
        ready = await self.session.scalar(
            update(RunRow)
            .where(RunRow.id == run_id, RunRow.status == RunStatus.AWAITING_APPROVAL, ~still_open)
            .values(status=RunStatus.READY, updated_at=utcnow())
            .returning(RunRow.id)
        )
        if ready is not None:
            await self.record(run_event(SYSTEM_ACTOR_ID, "run.ready", run_id, agent_name))
            await self.announce(READY_CHANNEL, run_id)
            await self.announce(RUNS_CHANNEL, run_id)


_EXECUTED_COLUMNS = (ToolCallRow.id, ToolCallRow.tool_call_id, ToolCallRow.tool_name, ToolCallRow.current_digest)


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
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One transaction through SQLAlchemy; in-process wake-ups are published only after it commits."""
        async with self.db.write() as session:
            tx = Transaction(session)
            yield tx
            await session.flush()  # the state change first, so the audit lock is held only until commit
            await self.notifier.send_in_transaction(session, tx.announcements)
            await append_events(session, tx.events)
        self.notifier.publish(tx.announcements)

    async def write_run(self, write: RunWrite) -> None:
        """A worker's write to the run it holds, in one transaction: one function call on PostgreSQL."""
        if self.db.is_postgres:
            await pg_run_write(self.db, write, self._stored_tool_versions)
            return
        async with self.transaction() as tx:
            await tx.apply(write)

    async def _run_for_update(self, session: AsyncSession, run_id: str) -> RunRow:
        run = await session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if run is None:
            raise NotFound(f"No run {run_id!r}")
        return run
