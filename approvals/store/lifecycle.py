"""A run's life in the store: start, claim, execute approved calls, append steps, pause, finish.

Each method is one transaction. A worker holds a run through a lease (owner + expiry); every
write a worker makes checks it still holds the lease, so a worker that stalled past its
lease cannot overwrite the work of the one that took over.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, NamedTuple, cast

from sqlalchemy import ColumnElement, Select, Update, and_, bindparam, func, or_, select, update

from .. import tracing
from ..calls.actors import SYSTEM, Actor
from ..calls.states import DECIDED_CALL_STATUSES, CallStatus, RunStatus
from ..engines.native.deferred import DeferredToolRequests
from ..engines.native.messages import ModelRequest, ModelResponse, load_stored_history
from ..exceptions import Conflict, Forbidden
from . import run_cancel
from ._run_writes import (
    Rows,
    Step,
    Tx,
    hold_run,
    in_list,
    in_list_params,
    move_steps,
    moved_calls,
    run_steps,
    started_events,
)
from ._writes import (
    DecidedCall,
    ExecutedCall,
    HeldRun,
    Interrupted,
    RulesChanged,
    RunEvent,
    RunWrite,
    utcnow,
)
from .audit import AuditEvent, call_event, run_event
from .backends.postgres import Cursors, fetched, pg_rows, pipelined
from .models import STORED_TEXT, MessageRow, RunRow, ToolCallRow
from .paused_runs import paused_write
from .policy_rules import PolicyEvaluation
from .wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL

ModelMessage = ModelRequest | ModelResponse
CallOutcomes = Mapping[str, tuple[CallStatus, Any]]
"""Executed calls' outcomes by tool call id: `(CallStatus.SUCCEEDED, result)` or `(CallStatus.FAILED, message)`."""
STALE_LEASE_CHECK_SECONDS = 1.0
"""How often a claim on PostgreSQL looks for dead workers' runs before ready ones (leases last a minute)."""


@dataclass(frozen=True)
class _Claim:
    """What a worker asks of a claim (`RunLifecycle.claim`'s arguments)."""

    worker_id: str
    lease_seconds: float
    run_id: str | None
    agent_names: Sequence[str] | None
    known: Mapping[str, int]


def _lease_end(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


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


class _Claimable(NamedTuple):
    """A run a claim found (`_CLAIMABLE_RUN_COLUMNS`)."""

    id: str
    agent_name: str
    status: str
    prompt: str | None
    deps: Any
    message_count: int
    trace_context: dict[str, str] | None


def _history_from(ask: _Claim, run: _Claimable) -> int:
    """Where the history the claim sends starts: after the messages the worker holds (history never changes)."""
    history_from = ask.known.get(run.id, 0)
    return 0 if history_from > run.message_count else history_from  # it holds more: a restored database


def _claim_steps(run: _Claimable, history_from: int, now: dt.datetime) -> list[Step]:
    """What a claim reads of the run it leased, then the start of its approved calls; nothing for a new run.

    The history from `history_from`, the verdicts the run has yet to act on; the approved
    calls run next, so they are committed as executing (approvals used up) before any runs.
    """
    if not run.message_count:  # a run that never ran has neither history nor calls
        return []
    return [
        Step(MESSAGES_FROM, {"run_id": run.id, "seq": history_from}, returns=True),
        Step(DECIDED_CALLS, {"run_id": run.id}, returns=True),
        *move_steps(run.id, None, CallStatus.EXECUTING, now),
    ]


def _claimed(
    run: _Claimable,
    lease_expires_at: dt.datetime,
    history_from: int,
    worker_id: str,
    now: dt.datetime,
    results: Sequence[Rows],
) -> tuple[ClaimedRun, list[AuditEvent]]:
    """The claimed run from the rows of its `_claim_steps`, and the claim's audit events (resumed, calls started)."""
    history: list[ModelMessage] = []
    decided: dict[str, DecidedCall] = {}
    started: list[ExecutedCall] = []
    if results:
        messages, calls, _, moved = results
        history = load_stored_history((data, version) for data, version in messages)
        decided = {call[1]: DecidedCall(*call) for call in calls}
        started = moved_calls(moved, None)
    held = HeldRun(id=run.id, agent_name=run.agent_name, next_seq=run.message_count, worker_id=worker_id)
    claimed = ClaimedRun(
        run_id=run.id,
        agent_name=run.agent_name,
        prompt=run.prompt,
        deps=run.deps,
        message_count=run.message_count,
        lease_expires_at=lease_expires_at,
        trace_context=run.trace_context,
        history=history,
        history_from=history_from,
        decided_calls=decided,
        executing=frozenset(call.tool_call_id for call in started),
    )
    resumed = run_event(worker_id, "run.resumed", run.id, run.agent_name, at=now)
    return claimed, [resumed, *started_events(held, started, now)]


class RunLifecycle(PolicyEvaluation):
    """Writes that move a run through its statuses."""

    async def start_run(
        self,
        agent_name: str,
        prompt: str,
        *,
        actor: Actor,
        deps: Any = None,
        run_id: str | None = None,
        engine: str = "native",
    ) -> str:
        """Queue a new run; a worker (or `resume`) picks it up. Returns the run id.

        `engine`: the engine of the agent (`pydantic_ai` for a pydantic-ai agent), which rules may match on.
        """
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not start runs")
        run_id = run_id or uuid.uuid4().hex
        now = utcnow()
        with tracing.starting_run(agent_name, run_id) as trace_context:
            async with self.transaction() as tx:
                tx.session.add(
                    RunRow(
                        id=run_id,
                        agent_name=agent_name,
                        engine=engine,
                        status=RunStatus.READY,
                        prompt=prompt,
                        deps=deps,
                        started_by=actor.id,
                        trace_context=trace_context,
                        message_count=0,
                        created_at=now,
                        updated_at=now,
                    )
                )
                tx.record(run_event(actor.id, "run.started", run_id, agent_name, {"prompt": prompt}))
                tx.announce(READY_CHANNEL, run_id)
                tx.announce(RUNS_CHANNEL, run_id)
        return run_id

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: float = 60.0,
        run_id: str | None = None,
        agent_names: Sequence[str] | None = None,
        known: Mapping[str, int] | None = None,
    ) -> ClaimedRun | None:
        """Lease one ready run (or one whose worker's lease expired); None when there is none.

        A run left behind by a dead worker has calls stuck in `executing`: idempotent
        tools get to run again, the others become `outcome_unknown` for a person to settle.
        `known` says how many messages of which runs the worker already holds: the claimed
        run's history comes from there on (`ClaimedRun.history_from`), as history never changes.
        """
        ask = _Claim(worker_id, lease_seconds, run_id, agent_names, known or {})
        if self.db.is_postgres:
            return await self._claim_pipelined(ask)
        return await self._claim_locked(ask)

    async def next_lease_end(self, agent_names: Sequence[str] | None = None) -> dt.datetime | None:
        """When the soonest lease on a run being resumed runs out; an idle worker wakes up then.

        Nothing announces a lease running out (its worker may be dead), so this is how a
        dead worker's run is taken over within a lease, not at the next poll.
        """
        query = select(func.min(RunRow.lease_expires_at)).where(RunRow.status == RunStatus.RESUMING)
        if agent_names is not None:
            query = query.where(RunRow.agent_name.in_(agent_names))
        async with self.db.read() as session:
            ends: dt.datetime | None = await session.scalar(query)
        return ends

    async def _claim_pipelined(self, ask: _Claim) -> ClaimedRun | None:
        """PostgreSQL: lease the oldest ready run and claim it in a pipeline; stale leases go to `_claim_locked`.

        Runs whose worker's lease expired are looked for first at most once a
        `STALE_LEASE_CHECK_SECONDS`, and whenever no run is ready: the look scans every lease.
        """
        for _ in range(10):
            checked = time.monotonic()
            recover = checked - self._stale_leases_checked_at >= STALE_LEASE_CHECK_SECONDS
            if recover:
                self._stale_leases_checked_at = checked
            stale = None
            if recover:
                [found] = await pg_rows(self.db, [_stale_lease_step(ask, utcnow())])
                stale = found[0][0] if found else None
            if stale is None:
                claimed, stale = await self._lease_ready(ask, look_for_stale=not recover)
                if stale is None:
                    return claimed
            recovered = await self._claim_locked(replace(ask, run_id=stale))  # settle what its dead worker left
            if recovered is not None:
                return recovered
        return None

    async def _lease_ready(self, ask: _Claim, *, look_for_stale: bool) -> tuple[ClaimedRun | None, str | None]:
        """PostgreSQL: the claim of the oldest ready run, in three round trips: lease it; read it and start its
        approved calls; audit and commit. With none ready, the run whose worker's lease expired, if asked to look."""
        now = utcnow()
        lease_end = now + dt.timedelta(seconds=ask.lease_seconds)
        lease = {**_filters(ask, now), "new_owner": ask.worker_id, "lease_end": lease_end}
        looked: Cursors = []
        async with pipelined(self.db) as transaction:
            leasing = Step(_lease_oldest("ready", *_shape(ask), "postgresql"), lease, returns=True)
            [leased] = await transaction.run([leasing])
            if leased:
                run = _Claimable(*leased[0])
                history_from = _history_from(ask, run)
                steps = _claim_steps(run, history_from, now)
                results = await transaction.run(steps) if steps else []
                claimed, events = _claimed(run, lease_end, history_from, ask.worker_id, now, results)
                await transaction.commit(events, [(RUNS_CHANNEL, run.id)])
            elif look_for_stale:
                looked = await transaction.roll_back(then=[_stale_lease_step(ask, now)])
        if leased:
            return claimed, None
        [found] = await fetched(looked) if looked else [[]]
        return None, found[0][0] if found else None

    async def _claim_locked(self, ask: _Claim) -> ClaimedRun | None:
        """Lock the oldest claimable run and lease it, recovering it first if its worker died."""
        for _ in range(10):  # skip over runs that crash recovery hands back to people
            claimed = await self.run_statements(lambda tx: _claim_oldest(tx, ask))
            if claimed is not _HANDED_BACK:
                return cast(ClaimedRun | None, claimed)
        return None

    async def renew_lease(self, run_id: str, worker_id: str, *, lease_seconds: float = 60.0) -> None:
        """Extend this worker's lease; `LeaseLost` if it no longer holds the run."""
        lease_end = _lease_end(lease_seconds)
        await self.run_statements(lambda tx: hold_run(tx, run_id, worker_id, lease_expires_at=lease_end))

    async def mark_executing(self, run_id: str, worker_id: str, tool_call_ids: Sequence[str]) -> None:
        """Commit that these approved calls are about to run, and consume their approvals, before any runs."""
        await self.write_run(RunWrite(run_id=run_id, worker_id=worker_id, start_executing=tool_call_ids))

    async def append_step(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        *,
        lease_seconds: float = 60.0,
        results: CallOutcomes | None = None,
    ) -> None:
        """Append a step's messages, record the outcomes of approved calls, renew the lease.

        `results` are the outcomes the run's engine read in the step, for the calls this worker
        marked executing (`approvals.resumer.call_outcomes`); the store writes them as given and
        never reads the messages for them. A step without any costs no extra query.
        """
        await self.write_run(
            RunWrite(
                run_id=run_id,
                worker_id=worker_id,
                messages=messages,
                changes={"lease_expires_at": _lease_end(lease_seconds)},
                results=_results(results),
            )
        )

    async def pause(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        requests: DeferredToolRequests,
        *,
        results: CallOutcomes | None = None,
    ) -> None:
        """The run stops for people: its last messages, its pending calls and its status, in one transaction.

        `results` are the outcomes of executed calls the messages report, as for `append_step`.
        The standing rules decide the calls first, by the rules this process holds; the write
        checks they are still the rules in force, so a pause costs no read of them.
        """
        for _ in range(5):  # the rules change rarely, and never five times while a run pauses
            rule_set = await self.held_rules()
            outcomes = await self.pause_outcomes(run_id, requests, rule_set)
            write = paused_write(run_id, worker_id, requests, now=utcnow(), outcomes=outcomes)
            write.messages = messages
            write.results = _results(results)
            write.rules_revision = rule_set.revision
            try:
                await self.write_run(write)
                return
            except RulesChanged:
                await self.rules_in_force()  # read them again, and decide the calls again
        raise Conflict(f"Run {run_id!r}: the rules kept changing while it paused; it pauses at its next try")

    async def finish(
        self,
        run_id: str,
        worker_id: str,
        messages: Sequence[ModelMessage],
        *,
        output: Any = None,
        error: str | None = None,
        failed_tool_call_id: str | None = None,
        results: CallOutcomes | None = None,
        released: Collection[str] = (),
    ) -> None:
        """The run ended: completed with `output`, or failed with `error`.

        `results` are the outcomes of executed calls the messages report, as for `append_step`.
        When it failed, calls marked executing that never ran (`released`) are approved again,
        so a retry runs them; the call that failed the run ends `failed`, and any other call
        caught mid-execution `outcome_unknown`.
        """
        failed = error is not None
        await self.write_run(
            RunWrite(
                run_id=run_id,
                worker_id=worker_id,
                messages=messages,
                changes={
                    "status": RunStatus.FAILED if failed else RunStatus.COMPLETED,
                    "output": output,
                    "error": error,
                    "lease_owner": None,
                    "lease_expires_at": None,
                },
                results=_results(results),
                released=list(released),
                interrupted=Interrupted(failed_tool_call_id, error) if error is not None else None,
                events=[
                    RunEvent(
                        "run.failed" if failed else "run.completed",
                        "run",
                        run_id,
                        details={"error": error} if error is not None else {"output": output},
                    )
                ],
                announcements=[(RUNS_CHANNEL, run_id)],
            )
        )

    async def release(self, run_id: str, worker_id: str) -> None:
        """Hand a held run back (graceful shutdown before it started work)."""

        def hand_back(tx: Tx) -> None:
            run = hold_run(tx, run_id, worker_id, status=RunStatus.READY, lease_owner=None, lease_expires_at=None)
            tx.record(run_event(worker_id, "run.released", run_id, run.agent_name))
            tx.announce(READY_CHANNEL, run_id)

        await self.run_statements(hand_back)

    async def cancel_run(self, run_id: str, *, actor: Actor, reason: str | None = None) -> None:
        """An admin stops a run that has not ended, even one a worker holds right now (`run_cancel`).

        Calls that never ran are cancelled; one the run was executing becomes `outcome_unknown`
        for a person to settle. Every write its worker makes from now on is refused (`LeaseLost`).
        """
        await self.run_statements(lambda tx: run_cancel.cancel_run(tx, run_id, actor, reason))

    async def retry_run(self, run_id: str, *, actor: Actor) -> None:
        """An admin sends a failed run back to the workers; it continues from its stored history."""
        await self.run_statements(lambda tx: run_cancel.retry_run(tx, run_id, actor))


_HANDED_BACK = object()
"""`_claim_oldest`'s answer when the run it found went back to people: the claim looks again."""
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
def _oldest(kind: str, by_run: bool, agents: int | None, dialect: str) -> Select[Any]:
    """The oldest run of a `_CLAIMABLE` kind, of one run or of some agents (each variant built once)."""
    query = select(*_CLAIMABLE_RUN_COLUMNS).where(_CLAIMABLE[kind]).order_by(RunRow.updated_at).limit(1)
    if by_run:
        query = query.where(RunRow.id == bindparam("run_id"))
    if agents is not None:
        query = query.where(in_list(RunRow.agent_name, "agent", agents))
    if dialect == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return query


def _shape(ask: _Claim) -> tuple[bool, int | None]:
    """Which variant of `_oldest` a claim needs."""
    return ask.run_id is not None, None if ask.agent_names is None else len(ask.agent_names)


def _filters(ask: _Claim, now: dt.datetime) -> dict[str, Any]:
    """`_oldest`'s parameters for a claim."""
    by_run = {"run_id": ask.run_id} if ask.run_id is not None else {}
    return {"now": now, **by_run, **in_list_params("agent", ask.agent_names or ())}


def _stale_lease_step(ask: _Claim, now: dt.datetime) -> Step:
    """PostgreSQL: the oldest run whose worker's lease ran out; it takes the careful path (`_claim_locked`)."""
    return Step(_oldest("stale", *_shape(ask), "postgresql"), _filters(ask, now), returns=True)


_LEASE = {
    "status": RunStatus.RESUMING,
    "lease_owner": bindparam("new_owner"),
    "lease_expires_at": bindparam("lease_end"),
    "updated_at": bindparam("now"),
}
LEASE_RUN = update(RunRow).where(RunRow.id == bindparam("run_id")).values(_LEASE)


@cache
def _lease_oldest(kind: str, by_run: bool, agents: int | None, dialect: str) -> Update:
    """Lease the oldest run of a `_CLAIMABLE` kind in one statement when it is a ready one (the usual case).

    SQLite looks among all claimable runs, so a dead worker's run is not passed over for
    newer ready ones: when the oldest is a dead worker's, nothing changes and the claim
    takes the careful path, which settles what that worker left behind first. PostgreSQL
    looks among ready runs, and for dead workers' runs apart (`_claim_pipelined`).
    """
    oldest = _oldest(kind, by_run, agents, dialect).with_only_columns(RunRow.id).scalar_subquery()
    return (
        update(RunRow)
        .where(RunRow.id == oldest, RunRow.status == RunStatus.READY)
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


def _claim_oldest(tx: Tx, ask: _Claim) -> ClaimedRun | object | None:
    """Lease the oldest claimable run: a ready one, or one whose worker's lease ran out (recovered first).

    Returns the claimed run, None when there is none, or `_HANDED_BACK` when the run found
    was a dead worker's whose calls now wait for a person.
    """
    now = utcnow()
    lease_end = now + dt.timedelta(seconds=ask.lease_seconds)
    filters = _filters(ask, now)
    dialect = tx.session.dialect.name
    found = None
    if dialect == "sqlite":
        lease = {**filters, "new_owner": ask.worker_id, "lease_end": lease_end}
        found = tx.session.execute(_lease_oldest("claimable", *_shape(ask), dialect), lease).one_or_none()
    if found is None:
        found = tx.session.execute(_oldest("claimable", *_shape(ask), dialect), filters).one_or_none()
        if found is None:
            return None
        if found.status == RunStatus.RESUMING and _recover_crashed(tx, found.id, now):
            return _HANDED_BACK
        lease = {"run_id": found.id, "new_owner": ask.worker_id, "lease_end": lease_end, "now": now}
        tx.session.execute(LEASE_RUN, lease)
    run = _Claimable(*found)
    history_from = _history_from(ask, run)
    results = run_steps(tx, _claim_steps(run, history_from, now))
    claimed, events = _claimed(run, lease_end, history_from, ask.worker_id, now, results)
    tx.events.extend(events)
    tx.announce(RUNS_CHANNEL, run.id)
    return claimed


def _recover_crashed(tx: Tx, run_id: str, now: dt.datetime) -> bool:
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


def _results(results: CallOutcomes | None) -> dict[str, tuple[str, Any]]:
    """What a write records of the outcomes it was given."""
    return dict[str, tuple[str, Any]](results) if results else {}
