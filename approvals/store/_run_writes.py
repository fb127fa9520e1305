"""A transaction's writes to runs and calls: functions over a `Transaction`, which only holds the session.

`apply_write` carries out a worker's `RunWrite` through SQLAlchemy (SQLite, and the
reference the PostgreSQL function `approvals_run_write_v2` is held to); the others are its
steps and the few writes other operations share (holding a run, a paused run becoming ready).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import aliased

from ..exceptions import Conflict
from ._transaction import Transaction
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
from .audit import run_event
from .models import DecisionRow, MessageRow, RunRow, ToolCallRow, ToolDefinitionRow
from .notify import READY_CHANNEL, RUNS_CHANNEL
from .states import CallStatus, RunStatus

_EXECUTED_COLUMNS = (ToolCallRow.id, ToolCallRow.tool_call_id, ToolCallRow.tool_name, ToolCallRow.current_digest)


async def apply_write(tx: Transaction, write: RunWrite) -> None:
    """Carry out a worker's write to the run it holds; `approvals_run_write` is its PostgreSQL twin."""
    run = await _hold(tx, write)
    now = write.now
    if write.messages:
        await tx.session.execute(insert(MessageRow), message_rows(run, write.messages, now))
    insert_new = pg_insert if tx.session.get_bind().dialect.name == "postgresql" else sqlite_insert
    for definition in write.tool_definitions:
        await tx.session.execute(
            insert_new(ToolDefinitionRow).values(tool_definition_row(definition, now)).on_conflict_do_nothing()
        )
    if write.calls:
        pending = {"run_id": run.id, "agent_name": run.agent_name, "status": CallStatus.PENDING}
        rows = [{**call, **pending, "created_at": now, "updated_at": now} for call in write.calls]
        await tx.session.execute(insert(ToolCallRow), rows)
    if write.start_executing is not None:
        started = await start_executing(tx, run, write.start_executing, now)
        if len(started) != len(set(write.start_executing)):
            raise Conflict(f"Run {run.id!r}: not every call to execute is approved")
    events: list[RunEvent] = []
    for call, (status, result) in await _settle_executing(tx, run.id, write.results, now):
        events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"result": result}))
    if write.released:
        for call in await _release(tx, run.id, write.released, now):
            events.append(RunEvent("call.released", "call", call.id, call.tool_name, RELEASED_DETAILS))
    if write.interrupted is not None:
        failed, error = write.interrupted.failed_tool_call_id, write.interrupted.error
        stuck = await tx.session.scalars(
            select(ToolCallRow.tool_call_id).where(
                ToolCallRow.run_id == run.id, ToolCallRow.status == CallStatus.EXECUTING
            )
        )
        outcomes = {t: (CallStatus.FAILED, error) if t == failed else (CallStatus.OUTCOME_UNKNOWN, None) for t in stuck}
        for call, (status, _) in await _settle_executing(tx, run.id, outcomes, now):
            events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"error": error}))
    for event in [*events, *write.events]:
        await tx.audit(
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
        await tx.announce(channel, payload)


async def hold_run(tx: Transaction, run_id: str, worker_id: str, **values: Any) -> HeldRun:
    """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it."""
    return await _hold(tx, RunWrite(run_id=run_id, worker_id=worker_id, changes=values))


async def _hold(tx: Transaction, write: RunWrite) -> HeldRun:
    grow = len(write.messages)
    statement = (
        update(RunRow)
        .where(RunRow.id == write.run_id, RunRow.status == RunStatus.RESUMING, RunRow.lease_owner == write.worker_id)
        .values(message_count=RunRow.message_count + grow, updated_at=write.now, **write.changes)
        .returning(RunRow.agent_name, RunRow.message_count)
    )
    row = (await tx.session.execute(statement)).one_or_none()
    if row is None:
        status = await tx.session.scalar(select(RunRow.status).where(RunRow.id == write.run_id))
        raise lease_lost(write.run_id, write.worker_id, status)
    return HeldRun(
        id=write.run_id, agent_name=row.agent_name, next_seq=row.message_count - grow, worker_id=write.worker_id
    )


async def start_executing(
    tx: Transaction, run: HeldRun, tool_call_ids: Sequence[str], now: dt.datetime
) -> list[ExecutedCall]:
    """Move these approved calls to `executing`, consume their approvals, audit it; returns the calls moved."""
    started = await _move_calls(
        tx, run.id, tool_call_ids, CallStatus.APPROVED, CallStatus.EXECUTING, now, consumed_at=now
    )
    for call in started:
        await tx.audit(
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


async def _release(tx: Transaction, run_id: str, tool_call_ids: Sequence[str], now: dt.datetime) -> list[ExecutedCall]:
    """Calls marked executing that never ran go back to approved, and the approvals this start used up stand again.

    Approvals an earlier start used up (before the call's outcome became unknown) stay used:
    they were given for that run of it.
    """
    return await _move_calls(
        tx, run_id, tool_call_ids, CallStatus.EXECUTING, CallStatus.APPROVED, now, consumed_at=None
    )


async def _move_calls(
    tx: Transaction,
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
        await tx.session.execute(
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
        await tx.session.execute(
            update(DecisionRow)
            .where(DecisionRow.call_id.in_([c.id for c in calls]), affected)
            .values(consumed_at=consumed_at)
        )
    return [ExecutedCall(*call) for call in calls]


async def _settle_executing(
    tx: Transaction, run_id: str, outcomes: Mapping[str, tuple[str, Any]], now: dt.datetime
) -> list[tuple[ExecutedCall, tuple[str, Any]]]:
    """Executing calls get their final status and result; the calls settled, in the order of `outcomes`."""
    if not outcomes:
        return []
    calls = (
        await tx.session.scalars(
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


async def update_call(call: ToolCallRow, **changes: Any) -> None:
    """Set columns of a call from `lock_call`."""
    for column, value in changes.items():
        setattr(call, column, value)  # the session flushes it


async def ready_if_decided(tx: Transaction, run_id: str, agent_name: str) -> None:
    """A paused run whose calls are all decided becomes ready, audited and announced, when this commits.

    The caller holds the run's row (`lock_call` takes it first), so decisions on one run's
    calls are serialized: two reviewers settling its last two calls at once, the second
    sees the first's verdict.
    """
    await tx.session.flush()
    still_open = select(ToolCallRow.id).where(ToolCallRow.run_id == run_id, ToolCallRow.is_open).exists()
    ready = await tx.session.scalar(
        update(RunRow)
        .where(RunRow.id == run_id, RunRow.status == RunStatus.AWAITING_APPROVAL, ~still_open)
        .values(status=RunStatus.READY, updated_at=utcnow())
        .returning(RunRow.id)
    )
    if ready is not None:
        await tx.record(run_event(SYSTEM_ACTOR_ID, "run.ready", run_id, agent_name))
        await tx.announce(READY_CHANNEL, run_id)
        await tx.announce(RUNS_CHANNEL, run_id)
