"""A transaction's writes to runs and calls: plain statements, the one copy both databases execute.

A worker's write to the run it holds (`RunWrite`: mark calls executing, append a step,
record executed calls' results, pause with new pending calls, finish, release) is a list
of `Step`s, SQLAlchemy Core statements built once, whose parameters come from the write
alone: no statement needs another's result, so PostgreSQL sends them all in one pipeline
(`backends.postgres.pg_run_write`) while SQLite runs them one by one (`apply_write`, through
`StoreBase.run_statements`). What the database knows and the worker does not (the run's
message count, its agent, which calls actually moved) is read by the statements
themselves; their returned rows then make the audit events (`WriteSteps.events`), and a
guard that did not hold (the worker no longer holds the run, a call to execute is not
approved) refuses the write before it commits. A write that moves no call (a step without
results, a pause, a finish) needs no row for its events but the run's agent
(`WriteSteps.audited_unseen`): PostgreSQL sends it whole, its guards raising in the server.

The claim's reads and its start of the approved calls are steps of the same kind
(`claims`); the few writes other operations share are here too (holding a
run, a paused run moving on once its calls are decided).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Insert,
    Integer,
    Table,
    Update,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import aliased
from sqlalchemy.sql.expression import Executable

from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.rules import status_once_decided
from ..calls.states import CallStatus, RunStatus
from ..exceptions import Conflict
from ..policy.outcomes import RULE_DECISION_COLUMNS
from .audit import AuditEvent
from .backend import Backend, Transaction
from .models import DecisionRow, MessageRow, PolicyRuleRow, RunRow, RunStateRow, ToolCallRow, ToolDefinitionRow
from .run_plan import (
    RELEASED_DETAILS,
    ExecutedCall,
    HeldRun,
    RulesChanged,
    RunEvent,
    RunWrite,
    lease_lost,
    message_rows,
    tool_definition_row,
)
from .wakeups import READY_CHANNEL, RUNS_CHANNEL

Tx = Transaction[Connection]
_EXECUTED_COLUMNS = (ToolCallRow.id, ToolCallRow.tool_call_id, ToolCallRow.tool_name, ToolCallRow.current_digest)

# The statements are built once, with named parameters: building one costs several times running it.
INSERT_MESSAGES = insert(MessageRow)
RUN_STATUS = select(RunRow.status).where(RunRow.id == bindparam("run_id"))
HELD = (
    RunRow.id == bindparam("run_id"),
    RunRow.status == RunStatus.RESUMING,
    RunRow.lease_owner == bindparam("worker_id"),
)
"""The lease guard: the run is being resumed by this worker. Every write of a worker to its run carries it."""
CONSUME_APPROVALS = (
    update(DecisionRow)
    .where(DecisionRow.call_id.in_(bindparam("call_ids", expanding=True)), DecisionRow.consumed_at.is_(None))
    .values(consumed_at=bindparam("now"))
)
"""The approvals of these calls are used up (a gate's caller ran the call: `calls.py`)."""
RUN_ENGINE = select(RunRow.engine).where(RunRow.id == bindparam("run_id"))
MOVE_ON_IF_ALL_DECIDED = (
    update(RunRow)
    .where(
        RunRow.id == bindparam("run_id"),
        RunRow.status == RunStatus.AWAITING_APPROVAL,
        ~select(ToolCallRow.id).where(ToolCallRow.run_id == bindparam("run_id"), ToolCallRow.is_open).exists(),
    )
    .values(status=bindparam("next_status"), updated_at=bindparam("now"))
    .returning(RunRow.id)
)


def _insert_for_held_run(
    model: type[Any], from_run: Mapping[str, Any], given: Sequence[str], *, locked: bool = True
) -> Insert:
    """An INSERT of one row that takes `from_run` from the held run (locked) and `given` from its parameters.

    It inserts nothing when the worker does not hold the run: the lease guard is its WHERE.
    """
    table = cast(Table, model.__table__)
    values = [*from_run.values(), *(bindparam(name, type_=table.c[name].type) for name in given)]
    row = select(*values).where(*HELD)
    return insert(table).from_select([*from_run, *given], row.with_for_update() if locked else row)


_MESSAGE_FROM_RUN = {"run_id": RunRow.id, "seq": RunRow.message_count + bindparam("offset", type_=Integer)}
_MESSAGE_COLUMNS = ("kind", "format_version", "data", "created_at")
APPEND_MESSAGES = _insert_for_held_run(MessageRow, _MESSAGE_FROM_RUN, _MESSAGE_COLUMNS)
"""One message of a step, numbered after the run's stored messages (it comes before the hold that counts it)."""
_PENDING_CALL_COLUMNS = (
    "id",
    "tool_call_id",
    "tool_name",
    "tool_version",
    "args",
    "args_digest",
    "reason",
    "approvals_required",
    "idempotent",
    "expires_at",
    "status",
    "verdict",
    "decided_by",
    "decided_at",
    "denial_reason",
    "rule_name",
    "rule_version",
    "approver_groups",
    "trace_context",
)
"""A new call's own columns (`run_plan.pending_call`); the run, its agent and who asked (the run's starter) come
from the run."""
_PENDING_CALL_FROM_RUN = {"run_id": RunRow.id, "agent_name": RunRow.agent_name, "requested_by": RunRow.started_by}
ADD_PENDING_CALL = _insert_for_held_run(
    ToolCallRow, _PENDING_CALL_FROM_RUN, (*_PENDING_CALL_COLUMNS, "created_at", "updated_at")
)
UNLOCKED: dict[Executable, Executable] = {
    APPEND_MESSAGES: _insert_for_held_run(MessageRow, _MESSAGE_FROM_RUN, _MESSAGE_COLUMNS, locked=False),
    ADD_PENDING_CALL: _insert_for_held_run(
        ToolCallRow, _PENDING_CALL_FROM_RUN, (*_PENDING_CALL_COLUMNS, "created_at", "updated_at"), locked=False
    ),
}
"""The inserts for a held run without their row lock, for a write sent as one statement (PostgreSQL's
`as_one_statement`): there its hold's UPDATE locks the run, and a lock taken after it in the same
statement would skip the row that statement changed; the hold's guard fails the write if it is not held."""
RULES_REVISION = select(func.coalesce(func.max(PolicyRuleRow.id), 0))
"""The rules' revision, read inside a pause's write to check the rules that decided its calls are current."""
INSERT_DECISIONS = insert(DecisionRow).values(
    {name: bindparam(name, type_=DecisionRow.__table__.c[name].type) for name in RULE_DECISION_COLUMNS}
)
"""The approval of a new call a rule allowed (`policy.outcomes.rule_decision`'s columns)."""


@cache
def _hold_statement(changed: tuple[str, ...]) -> Update:
    """The guarded update of a held run that sets these columns (a few sets, each built once)."""
    return (
        update(RunRow)
        .where(*HELD)
        .values(
            message_count=RunRow.message_count + bindparam("grow"),
            updated_at=bindparam("now"),
            **{column: bindparam(f"new_{column}") for column in changed},
        )
        .returning(RunRow.agent_name, RunRow.message_count)
    )


@cache
def insert_tool_definitions(backend: Backend) -> Insert:
    """New tool definitions; a version already stored stays as it is (a version's definition never changes)."""
    columns = ToolDefinitionRow.__table__.c
    values = {
        name: bindparam(name, type_=columns[name].type) for name in ("version", "name", "definition", "created_at")
    }
    return backend.insert(ToolDefinitionRow).values(values).on_conflict_do_nothing()


@cache
def upsert_run_state(backend: Backend) -> Insert:
    """A run's state document, replacing the one stored (`RunStateRow`: one a run)."""
    columns = RunStateRow.__table__.c
    insert = backend.insert(RunStateRow).values(
        run_id=bindparam("run_id", type_=columns.run_id.type),
        version=bindparam("version", type_=columns.version.type),
        data=bindparam("data", type_=columns.data.type),
        updated_at=bindparam("now", type_=columns.updated_at.type),
    )
    replaced = {name: insert.excluded[name] for name in ("version", "data", "updated_at")}
    return insert.on_conflict_do_update(index_elements=[columns.run_id], set_=replaced)


def in_list(column: Any, name: str, count: int) -> ColumnElement[bool]:
    """`column IN (:name_0, ...)`: one named parameter per item, so the statement compiles once per length
    for either database (an expanding parameter would be compiled for PostgreSQL per execution)."""
    return cast(ColumnElement[bool], column.in_([bindparam(f"{name}_{i}") for i in range(count)]))


def in_list_params(name: str, items: Sequence[Any]) -> dict[str, Any]:
    return {f"{name}_{i}": item for i, item in enumerate(items)}


@cache
def _move_statements(source: CallStatus, target: CallStatus, calls: int | None) -> tuple[Update, Update]:
    """Move a run's calls from `source` to `target` (these `calls` of them, by tool call id, or all), and approvals.

    The approvals come first, chosen by the calls' status before the move: starting calls
    uses up their approvals; releasing calls that never ran restores the approvals their
    start used up (they share its time). Approvals an earlier start used up (before the
    call's outcome became unknown) stay used: they were given for that run of it.
    """
    chosen = [ToolCallRow.run_id == bindparam("in_run"), ToolCallRow.status == source]
    if calls is not None:
        chosen.append(in_list(ToolCallRow.tool_call_id, "call", calls))
    moving = select(ToolCallRow.id).where(*chosen)
    if target == CallStatus.EXECUTING:
        approvals = (
            update(DecisionRow)
            .where(DecisionRow.call_id.in_(moving), DecisionRow.consumed_at.is_(None))
            .values(consumed_at=bindparam("now"))
        )
    else:
        later = aliased(DecisionRow)
        latest_start = select(func.max(later.consumed_at)).where(later.call_id == DecisionRow.call_id).scalar_subquery()
        approvals = (
            update(DecisionRow)
            .where(DecisionRow.call_id.in_(moving), DecisionRow.consumed_at == latest_start)
            .values(consumed_at=None)
        )
    move = (
        update(ToolCallRow)
        .where(*chosen)
        .values(status=target, updated_at=bindparam("now"))
        .returning(*_EXECUTED_COLUMNS)
    )
    return approvals, move


@cache
def _settle_statement(one: bool) -> Update:
    """Executing calls of a run get their final status and result: the one named, or all still executing."""
    chosen = [ToolCallRow.run_id == bindparam("in_run"), ToolCallRow.status == CallStatus.EXECUTING]
    if one:
        chosen.append(ToolCallRow.tool_call_id == bindparam("call_in_run"))
    return (
        update(ToolCallRow)
        .where(*chosen)
        .values(status=bindparam("new_status"), result=bindparam("new_result"), updated_at=bindparam("now"))
        .returning(*_EXECUTED_COLUMNS)
    )


@dataclass(frozen=True)
class Step:
    """One statement of a transaction with its parameters (a list of them: once per row)."""

    statement: Executable
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    returns: bool = False
    """Whether it returns rows (a SELECT, or RETURNING), which the transaction's outcome reads."""
    with_next: bool = False
    """It and the next step, which takes the same parameters, read the rows before either changes them:
    PostgreSQL may send the two as one statement, this one a CTE of the next."""

    @property
    def many(self) -> bool:
        return not isinstance(self.params, Mapping)


Rows = Sequence[Sequence[Any]]
"""A step's returned rows, positional (SQLAlchemy's rows or psycopg's tuples alike)."""


def run_steps(tx: Tx, steps: Iterable[Step]) -> list[Rows]:
    """Execute `steps` in order on a synchronous connection; the rows of each (empty for those returning none)."""
    results: list[Rows] = []
    for step in steps:
        result = tx.session.execute(step.statement, step.params)
        results.append(result.all() if step.returns else [])
    return results


def move_steps(
    run_id: str | None, tool_call_ids: Sequence[str] | None, target: CallStatus, now: dt.datetime
) -> list[Step]:
    """Start approved calls (`target` executing), or release executing ones (`target` approved): these, or all."""
    source = CallStatus.APPROVED if target == CallStatus.EXECUTING else CallStatus.EXECUTING
    wanted = None if tool_call_ids is None else list(dict.fromkeys(tool_call_ids))
    approvals, move = _move_statements(source, target, None if wanted is None else len(wanted))
    params = {"in_run": run_id, "now": now, **in_list_params("call", wanted or [])}
    return [Step(approvals, params, with_next=True), Step(move, params, returns=True)]


def moved_calls(rows: Rows, order: Sequence[str] | None) -> list[ExecutedCall]:
    """The calls a move returned, in the order they were named (by tool call id when all were moved)."""
    calls = [ExecutedCall(*row) for row in rows]
    if order is None:
        return sorted(calls, key=lambda call: call.tool_call_id)
    position = {tool_call_id: i for i, tool_call_id in enumerate(order)}
    return sorted(calls, key=lambda call: position[call.tool_call_id])


def started_events(run: HeldRun, started: Sequence[ExecutedCall], now: dt.datetime) -> list[AuditEvent]:
    """A call marked executing is audited with the digest of the arguments it runs with."""
    return [
        _event(run, now, RunEvent("call.executing", "call", call.id, call.tool_name, {"args_digest": call.digest}))
        for call in started
    ]


def _event(run: HeldRun, now: dt.datetime, event: RunEvent) -> AuditEvent:
    """A run write's event: the worker acts, on its run and agent."""
    return AuditEvent(
        actor=event.actor or run.worker_id,
        action=event.action,
        subject_type=event.subject_type,
        subject_id=event.subject_id,
        run_id=run.id,
        agent_name=run.agent_name,
        tool_name=event.tool_name,
        details=event.details,
        at=now,
    )


class NotHeld(Exception):
    """The hold matched no run: the worker no longer holds it (or there is none); `lease_lost` says which."""


@dataclass
class WriteSteps:
    """A `RunWrite` as steps, and how their returned rows become its outcome."""

    write: RunWrite
    steps: list[Step] = field(default_factory=list)
    _readers: list[tuple[int, Callable[[Rows], None]]] = field(default_factory=list)
    _result_steps: list[int] = field(default_factory=list)
    _held: HeldRun | None = None
    _events: list[AuditEvent] = field(default_factory=list)

    @property
    def audited_unseen(self) -> bool:
        """Whether its audit events can be made before its rows: it starts, releases and interrupts no call.

        Its rows then only guard it (`guards`): the hold (the worker still holds the run), the
        rules' revision, and each result's settle (its call was executing). What its events
        name that the worker was not told (the run's agent, a settled call's id and tool) the
        database reads (`unseen_events`). PostgreSQL then sends the steps, guards raising in
        the server, the audit appends and COMMIT in one round trip.
        """
        w = self.write
        return w.start_executing is None and not w.released and w.interrupted is None

    def guards(self) -> dict[int, str]:
        """The steps whose rows only guard the write, by index: "held" (a row, or the worker no longer holds the
        run), "rules" (the revision the write's calls were decided by, or the rules changed) and "settled" (one
        row: the call of a result was executing; otherwise the result is left, and its event must not be)."""
        kinds = {self._read_hold: "held", self._read_rules_revision: "rules"}
        guards = {index: kinds[read] for index, read in self._readers if read in kinds}
        return guards | dict.fromkeys(self._result_steps, "settled")

    def unseen_events(self) -> list[tuple[AuditEvent, str | None]]:
        """The events of a write `audited_unseen`, in `events`' order, before any of its rows, each with the tool
        call id of the call it is about: the run's agent (None), and a settled call's id ("") and tool (None), are
        left for the database to fill in."""
        run = HeldRun(self.write.run_id, "", 0, self.write.worker_id)
        settled = [
            (RunEvent(f"call.{status}", "call", "", None, {"result": result}), tool_call_id)
            for tool_call_id, (status, result) in self.write.results.items()
        ]
        own: list[tuple[RunEvent, str | None]] = [(event, None) for event in self.write.events]
        return [
            (replace(_event(run, self.write.now, event), agent_name=None), call) for event, call in [*settled, *own]
        ]

    def events(self, results: Sequence[Rows]) -> list[AuditEvent]:
        """The write's audit events from its steps' rows, in `RunWrite`'s order; raises when a guard did not hold.

        `NotHeld` when the worker no longer holds the run, `Conflict` when a call to execute is not approved.
        """
        self._held, self._events = None, []
        for index, read in self._readers:
            read(results[index])
        return [*self._events, *(self._event(event) for event in self.write.events)]

    def _add(self, step: Step, read: Callable[[Rows], None] | None = None) -> None:
        if read is not None:
            self._readers.append((len(self.steps), read))
        self.steps.append(step)

    def _event(self, event: RunEvent) -> AuditEvent:
        assert self._held is not None  # the hold is read first
        return _event(self._held, self.write.now, event)

    def _read_hold(self, rows: Rows) -> None:
        if not rows:
            raise NotHeld
        [(agent_name, count)] = rows
        grow = len(self.write.messages)
        self._held = HeldRun(self.write.run_id, agent_name, count - grow, self.write.worker_id)

    def _read_rules_revision(self, rows: Rows) -> None:
        [(revision,)] = rows
        if revision != self.write.rules_revision:
            raise RulesChanged(revision)

    def _read_started(self, rows: Rows) -> None:
        assert self._held is not None
        assert self.write.start_executing is not None
        wanted = list(dict.fromkeys(self.write.start_executing))
        started = moved_calls(rows, wanted)
        if len(started) != len(wanted):
            raise Conflict(f"Run {self.write.run_id!r}: not every call to execute is approved")
        self._events.extend(started_events(self._held, started, self.write.now))

    def _read_settled(self, status: str, details: dict[str, Any]) -> Callable[[Rows], None]:
        """The calls a settle moved to `status` (by tool call id), each audited with `details`."""

        def read(rows: Rows) -> None:
            for call in sorted((ExecutedCall(*row) for row in rows), key=lambda call: call.tool_call_id):
                self._events.append(self._event(RunEvent(f"call.{status}", "call", call.id, call.tool_name, details)))

        return read

    def _read_released(self, rows: Rows) -> None:
        for call in moved_calls(rows, self.write.released):
            self._events.append(
                self._event(RunEvent("call.released", "call", call.id, call.tool_name, RELEASED_DETAILS))
            )


def write_steps(write: RunWrite, backend: Backend, stored_tool_versions: Iterable[str] = ()) -> WriteSteps:
    """The steps of a worker's write to the run it holds, in order; each backend runs them in one transaction.

    The step's messages and new calls take the run's count and agent as the run stores them,
    under the lease guard, before the hold counts the messages and changes the run's status;
    then calls start, settle, are released, are interrupted. `stored_tool_versions` are the
    tool definitions known to be stored already: a version's definition never changes.
    """
    planned = WriteSteps(write)
    now, run_id, worker_id = write.now, write.run_id, write.worker_id
    guard = {"run_id": run_id, "worker_id": worker_id}
    known = set(stored_tool_versions)
    definitions = [tool_definition_row(d, now) for d in write.tool_definitions if d.version not in known]
    if definitions:
        planned._add(Step(insert_tool_definitions(backend), definitions))
    if write.messages:
        rows = [{**guard, "offset": i, **row} for i, row in enumerate(message_rows(write.messages, now))]
        planned._add(Step(APPEND_MESSAGES, rows))
    if write.rules_revision is not None:
        planned._add(Step(RULES_REVISION, {}, returns=True), planned._read_rules_revision)
    if write.calls:
        pending = {**guard, "created_at": now, "updated_at": now}
        planned._add(Step(ADD_PENDING_CALL, [{**pending, **_pending_columns(call)} for call in write.calls]))
    if write.decisions:
        planned._add(Step(INSERT_DECISIONS, list(write.decisions)))
    changes = {f"new_{column}": value for column, value in write.changes.items()}
    hold = {**guard, "grow": len(write.messages), "now": now, **changes}
    planned._add(Step(_hold_statement(tuple(sorted(write.changes))), hold, returns=True), planned._read_hold)
    if write.snapshot is not None:
        state = {"run_id": run_id, "version": write.snapshot.version, "data": write.snapshot.data, "now": now}
        planned._add(Step(upsert_run_state(backend), state))
    if write.start_executing is not None:
        approvals, move = move_steps(run_id, write.start_executing, CallStatus.EXECUTING, now)
        planned._add(approvals)
        planned._add(move, planned._read_started)
    for tool_call_id, (status, result) in write.results.items():
        planned._result_steps.append(len(planned.steps))
        settle = {"in_run": run_id, "call_in_run": tool_call_id, "new_status": status, "new_result": result}
        planned._add(
            Step(_settle_statement(True), {**settle, "now": now}, returns=True),
            planned._read_settled(status, {"result": result}),
        )
    if write.released:
        approvals, move = move_steps(run_id, write.released, CallStatus.APPROVED, now)
        planned._add(approvals)
        planned._add(move, planned._read_released)
    if write.interrupted is not None:
        # the call that failed the run is failed, the others caught mid-execution outcome_unknown
        failed, error = write.interrupted.failed_tool_call_id, write.interrupted.error
        settled = {"in_run": run_id, "now": now}
        outcomes: list[tuple[bool, CallStatus, Any]] = [(False, CallStatus.OUTCOME_UNKNOWN, None)]
        if failed is not None:
            outcomes.insert(0, (True, CallStatus.FAILED, error))
        for one, status, result in outcomes:
            settle = {**settled, "new_status": status, "new_result": result}
            if one:
                settle["call_in_run"] = failed
            planned._add(
                Step(_settle_statement(one), settle, returns=True), planned._read_settled(status, {"error": error})
            )
    return planned


def _pending_columns(call: Mapping[str, Any]) -> dict[str, Any]:
    return {column: call.get(column) for column in _PENDING_CALL_COLUMNS}


def apply_write(tx: Tx, write: RunWrite, stored_tool_versions: Iterable[str] = ()) -> None:
    """Carry out a worker's write to the run it holds, statement by statement (SQLite, and any sync connection)."""
    planned = write_steps(write, tx.backend, stored_tool_versions)
    results = run_steps(tx, planned.steps)
    try:
        events = planned.events(results)
    except NotHeld:
        status = tx.session.scalar(RUN_STATUS, {"run_id": write.run_id})
        raise lease_lost(write.run_id, write.worker_id, status) from None
    tx.events.extend(events)
    for channel, payload in write.announcements:
        tx.announce(channel, payload)


def hold_run(tx: Tx, run_id: str, worker_id: str, **values: Any) -> HeldRun:
    """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it."""
    write = RunWrite(run_id=run_id, worker_id=worker_id, changes=values)
    params = {"run_id": run_id, "worker_id": worker_id, "grow": 0, "now": write.now}
    params |= {f"new_{column}": value for column, value in values.items()}
    row = tx.session.execute(_hold_statement(tuple(sorted(values))), params).one_or_none()
    if row is None:
        raise lease_lost(run_id, worker_id, tx.session.scalar(RUN_STATUS, {"run_id": run_id}))
    return HeldRun(id=run_id, agent_name=row.agent_name, next_seq=row.message_count, worker_id=worker_id)


def ready_if_decided(tx: Tx, run_id: str, agent_name: str, now: dt.datetime) -> None:
    """A paused run whose calls are all decided moves on (`status_once_decided`), audited and announced.

    The caller holds the run's row (`LOCK_RUN` takes it first), so decisions on one run's
    calls are serialized: two reviewers settling its last two calls at once, the second
    sees the first's verdict.
    """
    engine = tx.session.execute(RUN_ENGINE, {"run_id": run_id}).scalar()
    next_status = status_once_decided(str(engine))
    moved = tx.session.scalar(MOVE_ON_IF_ALL_DECIDED, {"run_id": run_id, "next_status": next_status, "now": now})
    if moved is not None:
        tx.record(run_moved_on(run_id, agent_name, next_status, now))
        for channel, payload in run_moved_on_announcements(run_id, next_status):
            tx.announce(channel, payload)


def run_moved_on(run_id: str, agent_name: str, status: RunStatus, now: dt.datetime) -> AuditEvent:
    """The audit event of a run whose calls are all decided: `run.ready` (a worker's turn) or `run.running`."""
    return AuditEvent(SYSTEM_ACTOR_ID, f"run.{status}", "run", run_id, run_id=run_id, agent_name=agent_name, at=now)


def run_moved_on_announcements(run_id: str, status: RunStatus) -> list[tuple[str, str]]:
    """The wake-ups of a run whose calls are all decided: workers hear of a ready run, every page of the change."""
    return [(READY_CHANNEL, run_id), (RUNS_CHANNEL, run_id)] if status == RunStatus.READY else [(RUNS_CHANNEL, run_id)]
