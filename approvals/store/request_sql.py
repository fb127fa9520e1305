"""A gate's request for a decision, as statements both databases run: a look first, then one checked write.

The look (`asked_before_steps`, one round trip on PostgreSQL) finds who opened the session, its
call under the request's key or for the same arguments, and the rules' revision. The write
(`Backend.checked_write`) is two parts: `request_steps` begins the session's run if the look
found none, locks the run, stores the tool's definition if this process never did, inserts the
call and reads back the call under the key; `requested` then checks those rows in Python (whose
session, whether it ended, whether another request stored the key's call first) and says what
follows: the rule's decision, the run's pause, the audit events and the wake-ups. On PostgreSQL
that is two round trips of a pipeline; on SQLite the same statements run on its cursor.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, select, update
from sqlalchemy.sql.expression import Executable

from .. import tracing
from ..calls.requests import ValidatedRequest
from ..calls.states import FINAL_RUN_STATUSES, CallStatus, RunStatus
from ..exceptions import Conflict
from ..policy.evaluation import Outcome
from ..policy.outcomes import call_columns, decided_details, rule_decision
from .audit import AuditEvent, call_event, run_event
from .backend import Backend, Finish
from .decision_sql import loaded_call
from .models import RunRow, ToolCallRow
from .run_plan import tool_definition_row
from .run_sql import INSERT_DECISIONS, RULES_REVISION, Rows, Step, insert_tool_definitions
from .wakeups import PENDING_CHANNEL, RUNS_CHANNEL

__all__ = (
    "CALLS",
    "CALL_BY_KEY",
    "HANDED_OUT_BY_ARGUMENTS",
    "AskedBefore",
    "OthersSession",
    "RequestedCall",
    "asked_before",
    "asked_before_steps",
    "request_steps",
    "requested",
    "same_call",
    "session_run_id",
)

CALLS = cast(Table, ToolCallRow.__table__)
_CALL_COLUMNS = tuple(column.name for column in CALLS.columns)

_SESSION_AND_CALL_BY_KEY = (
    select(RunRow.started_by.label("session_opened_by"), *CALLS.c)
    .select_from(
        cast(Table, RunRow.__table__).outerjoin(
            CALLS, and_(CALLS.c.run_id == RunRow.id, CALLS.c.tool_call_id == bindparam("key"))
        )
    )
    .where(RunRow.id == bindparam("run_id"))
)
"""The session's run's opener, with its call under a key (its columns all None when there is none)."""
CALL_BY_KEY = select(CALLS).where(CALLS.c.run_id == bindparam("run_id"), CALLS.c.tool_call_id == bindparam("key"))


def _oldest_call_by_arguments(*statuses: CallStatus) -> Executable:
    """The session's oldest call of this tool with these very (current) arguments, in one of `statuses`."""
    return (
        select(CALLS)
        .where(
            ToolCallRow.run_id == bindparam("run_id"),
            ToolCallRow.tool_name == bindparam("tool_name"),
            ToolCallRow.current_digest == bindparam("digest"),
            ToolCallRow.status.in_(statuses),
        )
        .order_by(ToolCallRow.created_at)
        .limit(1)
    )


_CALL_BY_ARGUMENTS = _oldest_call_by_arguments(CallStatus.PENDING, CallStatus.APPROVED)
"""A call of the session for these very arguments that waits, or is approved and not yet handed out."""
HANDED_OUT_BY_ARGUMENTS = _oldest_call_by_arguments(CallStatus.EXECUTING)
"""The oldest call of the session for these very arguments that its caller was told to run."""

_SESSION_RUN = (
    select(RunRow.engine, RunRow.agent_name, RunRow.status, RunRow.started_by, RunRow.trace_context)
    .where(RunRow.id == bindparam("run_id"))
    .with_for_update()
)
_RUN_COLUMNS = (
    "engine",
    "agent_name",
    "session_id",
    "status",
    "started_by",
    "trace_context",
    "message_count",
    "created_at",
    "updated_at",
)
_PAUSE_SESSION = (
    update(RunRow)
    .where(RunRow.id == bindparam("run_id"), RunRow.status == RunStatus.RUNNING)
    .values(status=RunStatus.AWAITING_APPROVAL, updated_at=bindparam("now"))
)
"""A running session's run waits for people once one of its calls does."""


def session_run_id(engine: str, source: str, session_id: str) -> str:
    """The run a gate session's calls gather in: the same for every request of the session, in any process."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"approvals:{engine}:{source}:{session_id}").hex


class OthersSession(Exception):
    """The session's run was opened by another actor (found in the request's transaction, which it rolls back)."""


# -- the look -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AskedBefore:
    """What the look found: the session's opener (None: no session yet), its call under the key or for the
    same arguments, and the rules' revision."""

    opened_by: str | None
    by_key: ToolCallRow | None
    by_arguments: ToolCallRow | None
    rules_revision: int


def asked_before_steps(validated: ValidatedRequest) -> list[Step]:
    request = validated.request
    run_id = session_run_id(request.engine, request.source, request.session_id)
    steps = [Step(_SESSION_AND_CALL_BY_KEY, {"run_id": run_id, "key": request.tool_call_id}, returns=True)]
    if request.same_arguments_same_call:
        same = {"run_id": run_id, "tool_name": request.tool_name, "digest": validated.args_digest}
        steps.append(Step(_CALL_BY_ARGUMENTS, same, returns=True))
    steps.append(Step(RULES_REVISION, {}, returns=True))
    return steps


def asked_before(rows: list[Rows]) -> AskedBefore:
    """`asked_before_steps`' rows, read."""
    session, *by_arguments, (revision,) = rows
    opened_by, by_key = None, None
    if session:
        opener, *call = session[0]
        opened_by = opener
        by_key = _loaded(call) if call[0] is not None else None
    same = by_arguments[0] if by_arguments else []
    by_args = _loaded(same[0]) if same else None
    return AskedBefore(opened_by, by_key, by_args, int(revision[0] or 0))


def _loaded(values: Sequence[Any]) -> ToolCallRow:
    """A call of a row of all its columns, as either database's driver gave it (PostgreSQL's: a status as text)."""
    fields = dict(zip(_CALL_COLUMNS, values, strict=True))
    fields["status"] = CallStatus(fields["status"])
    return loaded_call(fields)


def same_call(call: ToolCallRow, validated: ValidatedRequest) -> ToolCallRow:
    """The call asked for again under its key; a `Conflict` if the key now comes with other arguments."""
    request = validated.request
    if call.args_digest != validated.args_digest or call.tool_name != request.tool_name:
        raise Conflict(
            f"Call {request.tool_call_id!r} of session {request.session_id!r} was asked for with other "
            "arguments; a new call needs a new tool_call_id",
            status=call.status,
        )
    return call


# -- the write ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestedCall:
    """A new call to store, with everything decided before its transaction: the rules' outcome among it."""

    validated: ValidatedRequest
    actor_id: str
    now: dt.datetime
    outcome: Outcome
    hand_out: bool
    """Store a call the rules allow handed out to its caller (`executing`)."""
    session_known: bool
    """The look found the session's run: no need to try beginning it."""
    definition_stored: bool
    """This process stored the tool's definition already (a version's never changes)."""
    traced: tracing.RequestedCalls
    call_id: str

    @property
    def run_id(self) -> str:
        request = self.validated.request
        return session_run_id(request.engine, request.source, request.session_id)

    def call_row(self) -> dict[str, Any]:
        request = self.validated.request
        row: dict[str, Any] = {
            "id": self.call_id,
            "run_id": self.run_id,
            "tool_call_id": request.tool_call_id,
            "agent_name": request.source,
            "tool_name": request.tool_name,
            "tool_version": self.validated.definition.version,
            "args": self.validated.args,
            "args_digest": self.validated.args_digest,
            "reason": request.reason,
            "context": dict(request.context) if request.context is not None else None,
            "idempotent": False,
            "requested_by": self.actor_id,
            "trace_context": self.traced.context(0),
            "created_at": self.now,
            "updated_at": self.now,
            **call_columns(
                self.outcome,
                approvals_required=request.approvals_required,
                expires_at=request.expires_at(self.now),
                now=self.now,
            ),
        }
        if self.hand_out and row["status"] == CallStatus.APPROVED:
            row["status"] = CallStatus.EXECUTING
        return row


Stored = Finish[tuple[ToolCallRow, bool]]
"""The write's end: the key's call, and whether this request stored it."""


@cache
def _insert_session_run(backend: Backend) -> Executable:
    """A session's run, unless another request began it at the same moment."""
    columns = cast(Table, RunRow.__table__).c
    values = {name: bindparam(name, type_=columns[name].type) for name in ("id", *_RUN_COLUMNS)}
    return backend.insert(RunRow).values(values).on_conflict_do_nothing().returning(RunRow.id)


@cache
def _insert_call(backend: Backend, names: tuple[str, ...]) -> Executable:
    """A new call, unless its session already holds one under its key (another request asked at the same moment)."""
    values = {name: bindparam(name, type_=CALLS.c[name].type) for name in names}
    return (
        backend.insert(ToolCallRow)
        .values(values)
        .on_conflict_do_nothing(index_elements=["run_id", "tool_call_id"])
        .returning(ToolCallRow.id)
    )


def request_steps(call: RequestedCall, backend: Backend) -> list[Step]:
    """The write's first part: begin the session's run if need be, lock it, store the call, read the key's call."""
    request = call.validated.request
    steps = []
    if not call.session_known:
        session_run = {
            "id": call.run_id,
            "agent_name": request.source,
            "engine": request.engine,
            "session_id": request.session_id,
            "status": RunStatus.RUNNING,
            "started_by": call.actor_id,
            "trace_context": call.traced.context(0),  # the session's trace: its first call's
            "message_count": 0,
            "created_at": call.now,
            "updated_at": call.now,
        }
        steps.append(Step(_insert_session_run(backend), session_run, returns=True))
    steps.append(Step(_SESSION_RUN, {"run_id": call.run_id}, returns=True))
    if not call.definition_stored:
        definition = tool_definition_row(call.validated.definition, call.now)
        steps.append(Step(insert_tool_definitions(backend), definition))
    row = call.call_row()
    steps.append(Step(_insert_call(backend, tuple(row)), row, returns=True))
    steps.append(Step(CALL_BY_KEY, {"run_id": call.run_id, "key": request.tool_call_id}, returns=True))
    return steps


def requested(call: RequestedCall, rows: list[Rows]) -> Stored:
    """The write's second part, from the first's rows: the stored call and that it is new, with its decision by a
    rule, the run's pause, the audit events and the wake-ups; or the key's call another request stored first."""
    request = call.validated.request
    began = bool(rows[0]) if not call.session_known else False
    session_rows = rows[1] if not call.session_known else rows[0]
    inserted, by_key = rows[-2], rows[-1]
    if not session_rows:
        raise AssertionError(f"the session's run {call.run_id} is neither found nor begun")
    _engine, _agent, status, started_by, run_trace = session_rows[0]
    run_status = RunStatus(status)
    if not began and started_by != call.actor_id:
        raise OthersSession
    if not began and run_status in FINAL_RUN_STATUSES:
        raise Conflict(f"Session {request.session_id!r} of {request.source!r} ended ({run_status})", status=run_status)
    if not inserted:  # asked at the same moment: the key's call, which kept this one out
        return Finish((same_call(_loaded(by_key[0]), call.validated), False))
    stored = _loaded(by_key[0])
    call.traced.stored(0, stored.id)
    call.traced.in_run(run_trace)
    return _finish(call, stored, began=began, running=began or run_status == RunStatus.RUNNING)


def _finish(call: RequestedCall, stored: ToolCallRow, *, began: bool, running: bool) -> Stored:
    request, now, actor_id, outcome = call.validated.request, call.now, call.actor_id, call.outcome
    run_id = call.run_id
    events: list[AuditEvent] = []
    steps: list[Step] = []
    if began:
        details = {"engine": request.engine, "session_id": request.session_id}
        events.append(run_event(actor_id, "run.started", run_id, request.source, details, at=now))
    requested_details: dict[str, Any] = {"args": stored.args, "args_digest": stored.args_digest}
    if policy := outcome.details():
        requested_details["policy"] = policy
    events.append(call_event(actor_id, "call.requested", stored, requested_details, at=now))
    handed_out = stored.status == CallStatus.EXECUTING
    decided = decided_details(outcome, stored.args_digest)
    if decided is not None:
        action, details = decided
        events.append(call_event(outcome.actor or actor_id, action, stored, details, at=now))
        if (decision := rule_decision(outcome, stored.id, stored.args_digest, now, used=handed_out)) is not None:
            steps.append(Step(INSERT_DECISIONS, decision))
        if handed_out:
            events.append(call_event(actor_id, "call.executing", stored, {"args_digest": stored.args_digest}, at=now))
    elif running:
        steps.append(Step(_PAUSE_SESSION, {"run_id": run_id, "now": now}))
        waiting = {"waiting_for": [request.tool_call_id]}
        events.append(run_event(actor_id, "run.paused", run_id, request.source, waiting, at=now))
    announcements = [(PENDING_CHANNEL, run_id), (RUNS_CHANNEL, run_id)]
    return Finish((stored, True), steps, events, announcements)
