"""A claim: a worker leases the oldest ready run (or a dead worker's), and reads what it needs to go on.

The statements and their plan, written once; each backend carries them out (`Backend.claim`):
SQLite in one transaction on the `sqlite3` cursor (`claim_locked`), PostgreSQL leasing a ready
run in a pipeline of two round trips and taking dead workers' runs the careful way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from sqlalchemy import ColumnElement, Select, Update, and_, bindparam, or_, select, update

from ..calls.actors import SYSTEM
from ..calls.states import DECIDED_CALL_STATUSES, CallStatus, RunStatus
from ..calls.stored_history import load_stored_history
from .audit import AuditEvent, call_event, run_event
from .backend import Backend, WakeUps
from .models import STORED_TEXT, MessageRow, RunRow, ToolCallRow
from .run_plan import DecidedCall, HeldRun, utcnow
from .run_sql import Rows, Step, Tx, in_list, in_list_params, move_steps, moved_calls, run_steps, started_events
from .wakeups import PENDING_CHANNEL, RUNS_CHANNEL

if TYPE_CHECKING:
    from .backends.database import Database

ModelMessage = Any
"""A stored message, in the types of the engine that wrote it (`approvals.calls.stored_history`)."""
STALE_LEASE_CHECK_SECONDS = 1.0
"""How often a claim on PostgreSQL looks for dead workers' runs before ready ones (leases last a minute)."""


@dataclass(frozen=True)
class Claim:
    """What a worker asks of a claim (`Runs.claim`'s arguments)."""

    worker_id: str
    lease_seconds: float
    run_id: str | None
    agent_names: Sequence[str] | None
    known: Mapping[str, int]


@dataclass(frozen=True)
class ClaimedRun:
    """A run this worker now holds, with what it needs to continue."""

    run_id: str
    agent_name: str
    prompt: str | None
    deps: Any
    message_count: int
    lease_expires_at: dt.datetime
    trace_context: dict[str, str] | None = None
    """The W3C trace context the run was started in (`approvals.tracing`), for the resume to continue."""
    history: list[ModelMessage] = field(default_factory=list)
    """The stored messages from `history_from` on, read in the claiming transaction."""
    history_from: int = 0
    """Where `history` starts: the messages before it are those the claim was told the worker holds (`known`)."""
    decided_calls: dict[str, DecidedCall] = field(default_factory=dict)
    """Calls people decided whose verdict the run has not yet acted on, by tool call id."""
    executing: frozenset[str] = frozenset()
    """The approved calls among them (tool call ids): the claim committed them as executing, as they run next.

    A call the run then does not start (it fails first) must be released (`finish(released=...)`).
    """


class Claimable(NamedTuple):
    """A run a claim found (`_CLAIMABLE_RUN_COLUMNS`)."""

    id: str
    agent_name: str
    status: str
    prompt: str | None
    deps: Any
    message_count: int
    trace_context: dict[str, str] | None


def claim_history_from(ask: Claim, run: Claimable) -> int:
    """Where the history the claim sends starts: after the messages the worker holds (history never changes)."""
    history_from = ask.known.get(run.id, 0)
    return 0 if history_from > run.message_count else history_from  # it holds more: a restored database


def start_steps(run_id: str | None, now: dt.datetime) -> list[Step]:
    """What a claim reads of the calls of the run it leased, and the start of its approved calls.

    The verdicts the run has yet to act on; the approved calls run next, so they are committed
    as executing (approvals used up) before any runs. They name the run by `run_id` and
    `in_run`, which PostgreSQL's pipelined claim fills in from the lease in the server.
    """
    return [Step(DECIDED_CALLS, {"run_id": run_id}, returns=True), *move_steps(run_id, None, CallStatus.EXECUTING, now)]


def history_steps(run: Claimable, history_from: int) -> list[Step]:
    """The run's stored messages from `history_from`; nothing for a run that never ran."""
    if not run.message_count:
        return []
    return [Step(MESSAGES_FROM, {"run_id": run.id, "seq": history_from}, returns=True)]


@dataclass(frozen=True)
class ClaimRows:
    """The rows a claim read: `start_steps`' (decided calls, then started ones) and `history_steps`'."""

    decided: Rows
    started: Rows
    messages: Rows

    @classmethod
    def of(cls, start: Sequence[Rows], history: Sequence[Rows]) -> ClaimRows:
        decided, _approvals, started = start
        return cls(decided, started, history[0] if history else [])


def claim_events(run: Claimable, worker_id: str, now: dt.datetime, started: Rows) -> list[AuditEvent]:
    """A claim's audit events: the run resumed, and each approved call it started."""
    held = HeldRun(id=run.id, agent_name=run.agent_name, next_seq=run.message_count, worker_id=worker_id)
    resumed = run_event(worker_id, "run.resumed", run.id, run.agent_name, at=now)
    return [resumed, *started_events(held, moved_calls(started, None), now)]


def claimed_run(run: Claimable, lease_expires_at: dt.datetime, history_from: int, rows: ClaimRows) -> ClaimedRun:
    """The claimed run from the rows its claim read."""
    return ClaimedRun(
        run_id=run.id,
        agent_name=run.agent_name,
        prompt=run.prompt,
        deps=run.deps,
        message_count=run.message_count,
        lease_expires_at=lease_expires_at,
        trace_context=run.trace_context,
        history=load_stored_history((data, version) for data, version in rows.messages),
        history_from=history_from,
        decided_calls={call[1]: DecidedCall(*call) for call in rows.decided},
        executing=frozenset(call.tool_call_id for call in moved_calls(rows.started, None)),
    )


HANDED_BACK = object()
"""`claim_oldest`'s answer when the run it found went back to people: the claim looks again."""
_CLAIMABLE_RUN_COLUMNS = (
    RunRow.id,
    RunRow.agent_name,
    RunRow.status,
    RunRow.prompt,
    RunRow.deps,
    RunRow.message_count,
    RunRow.trace_context,
)
_DECIDED_CALL_COLUMNS = (
    ToolCallRow.id,
    ToolCallRow.tool_call_id,
    ToolCallRow.status,
    ToolCallRow.args_digest,
    ToolCallRow.override_args,
    ToolCallRow.denial_reason,
    ToolCallRow.answer,
)

_STUCK_CALL_COLUMNS = (
    ToolCallRow.id,
    ToolCallRow.run_id,
    ToolCallRow.agent_name,
    ToolCallRow.tool_name,
    ToolCallRow.idempotent,
)


_CLAIMABLE: dict[str, ColumnElement[bool]] = {
    "ready": RunRow.status == RunStatus.READY,
    "stale": and_(RunRow.status == RunStatus.RESUMING, RunRow.lease_expires_at < bindparam("now")),
}
"""Runs a claim may take: ready ones, and those whose worker's lease ran out (`stale`)."""
_CLAIMABLE["claimable"] = or_(_CLAIMABLE["ready"], _CLAIMABLE["stale"])


@cache
def oldest(kind: str, by_run: bool, agents: int | None, backend: Backend) -> Select[Any]:
    """The oldest run of a `_CLAIMABLE` kind, of one run or of some agents (each variant built once)."""
    query = select(*_CLAIMABLE_RUN_COLUMNS).where(_CLAIMABLE[kind]).order_by(RunRow.updated_at).limit(1)
    if by_run:
        query = query.where(RunRow.id == bindparam("run_id"))
    if agents is not None:
        query = query.where(in_list(RunRow.agent_name, "agent", agents))
    return backend.for_update(query, skip_locked=True)


def claim_shape(ask: Claim) -> tuple[bool, int | None]:
    """Which variant of `oldest` a claim needs."""
    return ask.run_id is not None, None if ask.agent_names is None else len(ask.agent_names)


def claim_filters(ask: Claim, now: dt.datetime) -> dict[str, Any]:
    """`oldest`'s parameters for a claim."""
    by_run = {"run_id": ask.run_id} if ask.run_id is not None else {}
    return {"now": now, **by_run, **in_list_params("agent", ask.agent_names or ())}


def stale_lease_step(ask: Claim, now: dt.datetime, backend: Backend) -> Step:
    """PostgreSQL: the oldest run whose worker's lease ran out; it takes the careful path (`claim_locked`)."""
    return Step(oldest("stale", *claim_shape(ask), backend), claim_filters(ask, now), returns=True)


_LEASE = {
    "status": RunStatus.RESUMING,
    "lease_owner": bindparam("new_owner"),
    "lease_expires_at": bindparam("lease_end"),
    "updated_at": bindparam("now"),
}
LEASE_RUN = update(RunRow).where(RunRow.id == bindparam("run_id")).values(_LEASE)


@cache
def lease_oldest(kind: str, by_run: bool, agents: int | None, backend: Backend) -> Update:
    """Lease the oldest run of a `_CLAIMABLE` kind in one statement when it is a ready one (the usual case).

    `claim_oldest` looks among all claimable runs (SQLite's every claim), so a dead worker's run
    is not passed over for newer ready ones: when the oldest is a dead worker's, nothing changes
    and the claim takes the careful path, which settles what that worker left behind first.
    PostgreSQL's pipelined claim looks among ready runs, and for dead workers' runs apart
    (`backends.postgres_claim`), at most once a `STALE_LEASE_CHECK_SECONDS`.
    """
    first = oldest(kind, by_run, agents, backend).with_only_columns(RunRow.id).scalar_subquery()
    return (
        update(RunRow)
        .where(RunRow.id == first, RunRow.status == RunStatus.READY)
        .values(_LEASE)
        .returning(*_CLAIMABLE_RUN_COLUMNS)
    )


MESSAGES_FROM = (
    select(STORED_TEXT, MessageRow.format_version)
    .where(MessageRow.run_id == bindparam("run_id"), MessageRow.seq >= bindparam("seq"))
    .order_by(MessageRow.seq)
)
DECIDED_CALLS = select(*_DECIDED_CALL_COLUMNS).where(
    ToolCallRow.run_id == bindparam("run_id"), ToolCallRow.status.in_(DECIDED_CALL_STATUSES)
)


def claim_oldest(tx: Tx, ask: Claim) -> ClaimedRun | object | None:
    """Lease the oldest claimable run: a ready one, or one whose worker's lease ran out (recovered first).

    Returns the claimed run, None when there is none, or `HANDED_BACK` when the run found
    was a dead worker's whose calls now wait for a person.
    """
    now = utcnow()
    lease_end = now + dt.timedelta(seconds=ask.lease_seconds)
    filters = claim_filters(ask, now)
    lease = {**filters, "new_owner": ask.worker_id, "lease_end": lease_end}
    found = tx.session.execute(lease_oldest("claimable", *claim_shape(ask), tx.backend), lease).one_or_none()
    if found is None:
        found = tx.session.execute(oldest("claimable", *claim_shape(ask), tx.backend), filters).one_or_none()
        if found is None:
            return None
        if found.status == RunStatus.RESUMING and recover_crashed(tx, found.id, now):
            return HANDED_BACK
        lease = {"run_id": found.id, "new_owner": ask.worker_id, "lease_end": lease_end, "now": now}
        tx.session.execute(LEASE_RUN, lease)
    run = Claimable(*found)
    history_from = claim_history_from(ask, run)
    start = run_steps(tx, start_steps(run.id, now))
    rows = ClaimRows.of(start, run_steps(tx, history_steps(run, history_from)))
    tx.events.extend(claim_events(run, ask.worker_id, now, rows.started))
    claimed = claimed_run(run, lease_end, history_from, rows)
    tx.announce(RUNS_CHANNEL, run.id)
    return claimed


def recover_crashed(tx: Tx, run_id: str, now: dt.datetime) -> bool:
    """Settle calls a dead worker left in `executing`; True when the run now waits for a person."""
    stuck = tx.session.execute(
        select(
            ToolCallRow.id, ToolCallRow.run_id, ToolCallRow.agent_name, ToolCallRow.tool_name, ToolCallRow.idempotent
        )
        .where(ToolCallRow.run_id == run_id, ToolCallRow.status == CallStatus.EXECUTING)
        .order_by(ToolCallRow.created_at, ToolCallRow.id)
    ).all()
    unknown = False
    for call in stuck:
        if call.idempotent:
            status = CallStatus.APPROVED
            event = call_event(SYSTEM.id, "call.retried", call, {"reason": _RETRIED}, at=now)
        else:
            status = CallStatus.OUTCOME_UNKNOWN
            unknown = True
            event = call_event(SYSTEM.id, "call.outcome_unknown", call, {"reason": _MAY_HAVE_RUN}, at=now)
        tx.session.execute(update(ToolCallRow).where(ToolCallRow.id == call.id).values(status=status, updated_at=now))
        tx.record(event)
    if unknown:
        tx.session.execute(
            update(RunRow)
            .where(RunRow.id == run_id)
            .values(status=RunStatus.AWAITING_APPROVAL, lease_owner=None, lease_expires_at=None, updated_at=now)
        )
        tx.announce(PENDING_CHANNEL, run_id)
        tx.announce(RUNS_CHANNEL, run_id)
    return unknown


_RETRIED = "worker died while the call ran; the tool is idempotent"
_MAY_HAVE_RUN = "worker died while the call ran; it may or may not have happened"


@dataclass
class StaleLeaseCheck:
    """When (monotonic) a store's claims last looked for runs whose worker's lease expired (PostgreSQL)."""

    checked_at: float = float("-inf")


async def claim_locked(backend: Backend, db: Database, ask: Claim) -> tuple[ClaimedRun | None, WakeUps]:
    """Lock the oldest claimable run and lease it, recovering it first if its worker died; and the wake-ups."""
    wake_ups: WakeUps = []
    for _ in range(10):  # skip over runs that crash recovery hands back to people
        tx, claimed = await backend.run_statements(db, lambda tx: claim_oldest(tx, ask))
        wake_ups.extend(tx.announcements)
        if claimed is not HANDED_BACK:
            return cast(ClaimedRun | None, claimed), wake_ups
    return None, wake_ups
