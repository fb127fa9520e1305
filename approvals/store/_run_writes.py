"""A transaction's writes to runs and calls: plain statements over a `Transaction[Connection]`.

`apply_write` carries out a worker's `RunWrite` (SQLite, and the reference the PostgreSQL
function `approvals_run_write_v2` is held to); the others are its steps and the few writes
other operations share (holding a run, a paused run becoming ready). They are synchronous
SQLAlchemy Core, with no ORM unit of work: `StoreBase.run_statements` runs a whole
transaction of them in one worker-thread hop on SQLite, and through the async driver on
PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Insert, Update, bindparam, func, insert, select, update
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
)
from .audit import run_event
from .models import DecisionRow, MessageRow, RunRow, ToolCallRow, ToolDefinitionRow
from .notify import READY_CHANNEL, RUNS_CHANNEL
from .states import CallStatus, RunStatus

Tx = Transaction[Connection]
_EXECUTED_COLUMNS = (ToolCallRow.id, ToolCallRow.tool_call_id, ToolCallRow.tool_name, ToolCallRow.current_digest)

# The statements are built once, with named parameters: building one costs several times running it.
INSERT_MESSAGES = insert(MessageRow)
INSERT_CALLS = insert(ToolCallRow)
RUN_STATUS = select(RunRow.status).where(RunRow.id == bindparam("run_id"))
MOVE_CALLS = (
    update(ToolCallRow)
    .where(
        ToolCallRow.run_id == bindparam("in_run"),
        ToolCallRow.tool_call_id.in_(bindparam("tool_call_ids", expanding=True)),
        ToolCallRow.status == bindparam("source"),
    )
    .values(status=bindparam("target"), updated_at=bindparam("now"))
    .returning(*_EXECUTED_COLUMNS)
)
CONSUME_APPROVALS = (
    update(DecisionRow)
    .where(DecisionRow.call_id.in_(bindparam("call_ids", expanding=True)), DecisionRow.consumed_at.is_(None))
    .values(consumed_at=bindparam("now"))
)
_LATER_START = aliased(DecisionRow)
RESTORE_APPROVALS = (  # the approvals the latest start used up: they share its time
    update(DecisionRow)
    .where(
        DecisionRow.call_id.in_(bindparam("call_ids", expanding=True)),
        DecisionRow.consumed_at
        == select(func.max(_LATER_START.consumed_at))
        .where(_LATER_START.call_id == DecisionRow.call_id)
        .scalar_subquery(),
    )
    .values(consumed_at=None)
)
SETTLE_CALL = (
    update(ToolCallRow)
    .where(
        ToolCallRow.run_id == bindparam("in_run"),
        ToolCallRow.tool_call_id == bindparam("call_in_run"),
        ToolCallRow.status == CallStatus.EXECUTING,
    )
    .values(status=bindparam("new_status"), result=bindparam("new_result"), updated_at=bindparam("now"))
    .returning(*_EXECUTED_COLUMNS)
)
EXECUTING_CALLS = select(ToolCallRow.tool_call_id).where(
    ToolCallRow.run_id == bindparam("run_id"), ToolCallRow.status == CallStatus.EXECUTING
)
READY_IF_ALL_DECIDED = (
    update(RunRow)
    .where(
        RunRow.id == bindparam("run_id"),
        RunRow.status == RunStatus.AWAITING_APPROVAL,
        ~select(ToolCallRow.id).where(ToolCallRow.run_id == bindparam("run_id"), ToolCallRow.is_open).exists(),
    )
    .values(status=RunStatus.READY, updated_at=bindparam("now"))
    .returning(RunRow.id)
)


@cache
def _hold_statement(changed: tuple[str, ...]) -> Update:
    """The guarded update of a held run that sets these columns (a few sets, each built once)."""
    return (
        update(RunRow)
        .where(
            RunRow.id == bindparam("run_id"),
            RunRow.status == RunStatus.RESUMING,
            RunRow.lease_owner == bindparam("worker_id"),
        )
        .values(
            message_count=RunRow.message_count + bindparam("grow"),
            updated_at=bindparam("now"),
            **{column: bindparam(f"new_{column}") for column in changed},
        )
        .returning(RunRow.agent_name, RunRow.message_count)
    )


@cache
def _insert_tool_definition(dialect: str) -> Insert:
    insert_new = pg_insert if dialect == "postgresql" else sqlite_insert
    return insert_new(ToolDefinitionRow).on_conflict_do_nothing()


def apply_write(tx: Tx, write: RunWrite) -> None:
    """Carry out a worker's write to the run it holds; `approvals_run_write` is its PostgreSQL twin."""
    run = _hold(tx, write)
    now = write.now
    if write.messages:
        tx.session.execute(INSERT_MESSAGES, message_rows(run, write.messages, now))
    if write.tool_definitions:
        rows = [tool_definition_row(definition, now) for definition in write.tool_definitions]
        tx.session.execute(_insert_tool_definition(tx.session.dialect.name), rows)
    if write.calls:
        pending = {"run_id": run.id, "agent_name": run.agent_name, "status": CallStatus.PENDING}
        rows = [{**call, **pending, "created_at": now, "updated_at": now} for call in write.calls]
        tx.session.execute(INSERT_CALLS, rows)
    if write.start_executing is not None:
        started = start_executing(tx, run, write.start_executing, now)
        if len(started) != len(set(write.start_executing)):
            raise Conflict(f"Run {run.id!r}: not every call to execute is approved")
    events: list[RunEvent] = []
    for call, (status, result) in _settle_executing(tx, run.id, write.results, now):
        events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"result": result}))
    if write.released:
        for call in _release(tx, run.id, write.released, now):
            events.append(RunEvent("call.released", "call", call.id, call.tool_name, RELEASED_DETAILS))
    if write.interrupted is not None:
        failed, error = write.interrupted.failed_tool_call_id, write.interrupted.error
        stuck = tx.session.scalars(EXECUTING_CALLS, {"run_id": run.id})
        outcomes = {t: (CallStatus.FAILED, error) if t == failed else (CallStatus.OUTCOME_UNKNOWN, None) for t in stuck}
        for call, (status, _) in _settle_executing(tx, run.id, outcomes, now):
            events.append(RunEvent(f"call.{status}", "call", call.id, call.tool_name, {"error": error}))
    for event in [*events, *write.events]:
        tx.audit(
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
        tx.announce(channel, payload)


def hold_run(tx: Tx, run_id: str, worker_id: str, **values: Any) -> HeldRun:
    """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it."""
    return _hold(tx, RunWrite(run_id=run_id, worker_id=worker_id, changes=values))


def _hold(tx: Tx, write: RunWrite) -> HeldRun:
    grow = len(write.messages)
    changes = {f"new_{column}": value for column, value in write.changes.items()}
    params = {"run_id": write.run_id, "worker_id": write.worker_id, "grow": grow, "now": write.now, **changes}
    row = tx.session.execute(_hold_statement(tuple(sorted(write.changes))), params).one_or_none()
    if row is None:
        status = tx.session.scalar(RUN_STATUS, {"run_id": write.run_id})
        raise lease_lost(write.run_id, write.worker_id, status)
    return HeldRun(
        id=write.run_id, agent_name=row.agent_name, next_seq=row.message_count - grow, worker_id=write.worker_id
    )


def start_executing(tx: Tx, run: HeldRun, tool_call_ids: Sequence[str], now: dt.datetime) -> list[ExecutedCall]:
    """Move these approved calls to `executing`, consume their approvals, audit it; returns the calls moved."""
    started = _move_calls(tx, run.id, tool_call_ids, CallStatus.APPROVED, CallStatus.EXECUTING, now, consumed_at=now)
    for call in started:
        tx.audit(
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


def _release(tx: Tx, run_id: str, tool_call_ids: Sequence[str], now: dt.datetime) -> list[ExecutedCall]:
    """Calls marked executing that never ran go back to approved, and the approvals this start used up stand again.

    Approvals an earlier start used up (before the call's outcome became unknown) stay used:
    they were given for that run of it.
    """
    return _move_calls(tx, run_id, tool_call_ids, CallStatus.EXECUTING, CallStatus.APPROVED, now, consumed_at=None)


def _move_calls(
    tx: Tx,
    run_id: str,
    tool_call_ids: Sequence[str],
    source: CallStatus,
    target: CallStatus,
    now: dt.datetime,
    *,
    consumed_at: dt.datetime | None,
) -> list[ExecutedCall]:
    """Guarded status change of a run's calls, their approvals marked consumed (or not) with it."""
    moved = {"in_run": run_id, "tool_call_ids": list(tool_call_ids), "source": source, "target": target, "now": now}
    calls = tx.session.execute(MOVE_CALLS, moved).all()
    if calls:
        call_ids = [call.id for call in calls]
        if consumed_at is not None:
            tx.session.execute(CONSUME_APPROVALS, {"call_ids": call_ids, "now": consumed_at})
        else:
            tx.session.execute(RESTORE_APPROVALS, {"call_ids": call_ids})
    return [ExecutedCall(*call) for call in calls]


def _settle_executing(
    tx: Tx, run_id: str, outcomes: Mapping[str, tuple[str, Any]], now: dt.datetime
) -> list[tuple[ExecutedCall, tuple[str, Any]]]:
    """Executing calls get their final status and result; the calls settled, in the order of `outcomes`.

    One guarded UPDATE per call (each has its own result): a call not executing is left as it is.
    """
    settled = []
    for tool_call_id, outcome in outcomes.items():
        status, result = outcome
        params = {"in_run": run_id, "call_in_run": tool_call_id, "new_status": status, "new_result": result, "now": now}
        call = tx.session.execute(SETTLE_CALL, params).one_or_none()
        if call is not None:
            settled.append((ExecutedCall(*call), outcome))
    return settled


def ready_if_decided(tx: Tx, run_id: str, agent_name: str, now: dt.datetime) -> None:
    """A paused run whose calls are all decided becomes ready, audited and announced, when this commits.

    The caller holds the run's row (`LOCK_RUN` takes it first), so decisions on one run's
    calls are serialized: two reviewers settling its last two calls at once, the second
    sees the first's verdict.
    """
    ready = tx.session.scalar(READY_IF_ALL_DECIDED, {"run_id": run_id, "now": now})
    if ready is not None:
        tx.record(run_event(SYSTEM_ACTOR_ID, "run.ready", run_id, agent_name, at=now))
        tx.announce(READY_CHANNEL, run_id)
        tx.announce(RUNS_CHANNEL, run_id)
