"""Calls: decisions and expiry, reads, and the call lifecycle of agents that run elsewhere.

`Calls` is the aggregate (`Store.calls`): a reviewer's verdict and expiry (`decisions.DecisionOps`),
the reads of calls (`queries.CallReads`), and a gate's lifecycle below: request a decision, wait
for it, settle the call.

A gate's calls are not tied to a worker's lease: each of these is one transaction on its
own. A session's calls gather in one run of the source that asks (its id derived from the
engine, source and session), created by the session's first request. The session belongs
to the token or user that opened it (the run's `started_by`): another asking in it is
refused (`Forbidden`, audited as `call.refused`), admins included, so nobody can slip a
call into someone else's run and then approve it as not its starter. Each call records who
asked for it (`requested_by`), who may follow and settle it, and never approve it
(`call_options`). The decision itself is `DecisionOps.decide`, the same for every engine
and channel.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import anyio
from sqlalchemy import update

from .. import tracing
from ..calls.actors import Actor
from ..calls.engines import EngineKind, get_engine
from ..calls.requests import ReportedOutcome, ValidatedRequest
from ..calls.states import CallStatus
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from ..policy.evaluation import AskedCall
from .audit import CallNames, call_event
from .decision_sql import LOCK_CALL, LOCK_RUN, loaded_call
from .decisions import DecisionOps
from .models import ToolCallRow
from .policy_evaluation import UnderRules
from .queries import CallReads
from .request_sql import (
    CALL_BY_KEY,
    HANDED_OUT_BY_ARGUMENTS,
    OthersSession,
    RequestedCall,
    asked_before,
    asked_before_steps,
    request_steps,
    requested,
    same_call,
    session_run_id,
)
from .run_plan import utcnow
from .run_sql import CONSUME_APPROVALS, Tx
from .waiters import call_waiters
from .wakeups import PENDING_CHANNEL, RUNS_CHANNEL

__all__ = ("SETTLED_OUTCOMES", "Calls", "session_run_id")

SETTLED_OUTCOMES = (CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN)
"""What a caller may report of an approved call it ran: its outcome, or that it cannot tell."""
_SETTLEABLE = (CallStatus.APPROVED, CallStatus.EXECUTING)
"""What a caller may report the outcome of: an approved call, handed out or not. One whose outcome became unknown
(the caller said so, or its session was cancelled while it ran) waits for a person, as a worker's does."""
_WAKE_UP_EVERY = 1.0
"""Longest wait between looks at a call while waiting, should a wake-up be missed."""


class Calls(DecisionOps, CallReads, UnderRules):
    """Deciding, expiring and reading calls; requesting, waiting for and settling those of agents that run elsewhere.

    Given the store's one `PolicyEvaluation` (the rules decide a requested call first) and the set
    of tool definitions this process stored, shared with `Runs`.
    """

    async def request_call(
        self, validated: ValidatedRequest, *, actor: Actor, hand_out: bool = False
    ) -> tuple[ToolCallRow, bool]:
        """Store a call waiting for people, in its session's run; returns the call and whether it is new.

        The same `tool_call_id` in the same session is the same call: asked again, it is
        returned as it stands (decided or not), never stored twice; asked again with other
        arguments, it is a `Conflict`. The standing rules decide it first; with `hand_out`, a
        call they allow is stored handed out to its caller (`executing`, its approval used up),
        in the same transaction, as `hand_out` would leave it.
        """
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not request calls")
        request = validated.request
        if get_engine(request.engine).kind is not EngineKind.GATE:
            raise UserError(f"Engine {request.engine!r} is not a gate: its runs pause through its worker")
        looked = asked_before(await self.backend.read_steps(self.db, asked_before_steps(validated)))
        if looked.opened_by is not None and looked.opened_by != actor.id:
            raise await self._refuse_session(validated, actor)
        if looked.by_key is not None:  # asked before (a retry, a resumed CLI): no write needed
            return same_call(looked.by_key, validated), False
        if looked.by_arguments is not None:
            return looked.by_arguments, False
        rule_set = await self.policy.rules_at(looked.rules_revision)
        now = utcnow()
        asked = AskedCall(
            engine=request.engine,
            agent=request.source,
            tool=request.tool_name,
            session=request.session_id,
            args=validated.args,
            context=request.context,
            requester=actor.id,
            now=now,
            approvals_required=request.approvals_required,
        )
        outcome = await self.policy.evaluate_policy(asked, rule_set)
        version = validated.definition.version
        asked_for = [(request.tool_name, request.tool_call_id)]
        run_id = session_run_id(request.engine, request.source, request.session_id)
        with tracing.requesting_calls(asked_for, engine=request.engine, agent=request.source, run_id=run_id) as traced:
            new = RequestedCall(
                validated=validated,
                actor_id=actor.id,
                now=now,
                outcome=outcome,
                hand_out=hand_out,
                session_known=looked.opened_by is not None,
                definition_stored=version in self._stored_tool_versions,
                traced=traced,
                call_id=uuid.uuid4().hex,
            )
            try:
                stored, wake_ups = await self.backend.checked_write(
                    self.db, request_steps(new, self.backend), lambda rows: requested(new, rows)
                )
            except OthersSession:  # opened by another since the look above
                raise await self._refuse_session(validated, actor) from None
        self.notifier.publish(wake_ups)
        self._stored_tool_versions.add(version)
        return stored

    async def _refuse_session(self, validated: ValidatedRequest, actor: Actor) -> Forbidden:
        """`actor` asked in a session another opened: audit the refusal (nothing else is written), return the error."""
        request = validated.request
        reason = (
            f"Session {request.session_id!r} of {request.source!r} was opened by another token or user; "
            "use a session id of your own"
        )
        details = {"source": request.source, "session_id": request.session_id, "tool_name": request.tool_name}
        await self.record_refusal(request.engine, reason, actor_id=actor.id, details=details)
        return Forbidden(reason)

    async def asked_call(self, call_id: str, *, actor: Actor) -> ToolCallRow:
        """A call, for the one who asked for it or an admin (a gate's caller waiting for its decision)."""
        call = await self.get_call(call_id)
        _check_asker(call, actor)
        return call

    async def wait_for_decision(self, call_id: str, *, seconds: float, run_id: str | None = None) -> ToolCallRow:
        """The call once it no longer waits for people, or as it stands after `seconds`.

        Returns at once for a decided call (`run_id`: the call's run, when the caller knows it). A pending call
        past its time to decide is expired here, so a waiting caller hears of it without a worker running. Waiting is
        an event in this process's registry (`waiters.CallWaiters`), set only by its own run's
        announcements: nothing is read while it waits, and no row or session is held.
        """
        waiters = call_waiters(self.db, self.notifier)
        if waiters is None:  # this process hears no announcements without a listener of its own
            return await self._wait_listening(call_id, seconds)
        if run_id is None:  # the caller knows it when it read the call just before
            run_id = (await self.get_call(call_id)).run_id
        with anyio.move_on_after(seconds):
            async with waiters.waiting(run_id) as waiter:
                while True:
                    waiter.arm()
                    decided, wait = await self._decided_or_wait(call_id)
                    if decided is not None:
                        return decided
                    await waiters.sleep(waiter, wait)
        return await self.get_call(call_id)

    async def _decided_or_wait(self, call_id: str) -> tuple[ToolCallRow | None, float]:
        """The call if it no longer waits for people (expired here if its time ran out), else how long to sleep."""
        call = await self.get_call(call_id)
        if call.status != CallStatus.PENDING:
            return call, 0.0
        if call.expires_at is None:
            return None, math.inf
        left = (call.expires_at - utcnow()).total_seconds()
        if left > 0:
            return None, left + 0.01
        await self.expire()
        return await self._decided_or_wait(call_id)

    async def _wait_listening(self, call_id: str, seconds: float) -> ToolCallRow:
        """`wait_for_decision` with a listener of its own, looking again every second (a library's process)."""
        async with self.notifier.listen(PENDING_CHANNEL) as changes:
            with anyio.move_on_after(seconds):
                while (call := await self.get_call(call_id)).status == CallStatus.PENDING:
                    if call.expires_at is not None and call.expires_at <= utcnow():
                        await self.expire()
                        continue
                    wait = _WAKE_UP_EVERY
                    if call.expires_at is not None:
                        wait = min(wait, max((call.expires_at - utcnow()).total_seconds(), 0.0) + 0.01)
                    with anyio.move_on_after(wait):
                        while await changes.receive() not in (call.run_id, ""):
                            pass
        return await self.get_call(call_id)

    async def settle_call(self, call_id: str, outcome: CallStatus, result: Any = None, *, actor: Actor) -> ToolCallRow:
        """The caller ran an approved call: record how it went (`SETTLED_OUTCOMES`) and its result.

        Only the one who asked for it (`requested_by`) or an admin may settle; a call that
        was not approved, or was settled already, is a `Conflict`.
        """
        if outcome not in SETTLED_OUTCOMES:
            raise UserError(f"A call's outcome is one of {', '.join(SETTLED_OUTCOMES)}, not {outcome!r}")
        with tracing.settling(call_id, outcome) as step:
            settled = await self.run_statements(
                lambda tx: _settle(tx, call_id, CallStatus(outcome), result, actor, utcnow())
            )
            step.found(settled)
        return settled

    async def hand_out(self, call_id: str, *, actor: Actor) -> tuple[ToolCallRow, bool]:
        """The caller was told to run an approved call: it is `executing` from now on, its approvals used up.

        So a cancel of the session meanwhile makes it `outcome_unknown` (it may have run) for a
        person to settle, not `cancelled` (which would say it never ran). Returns the call and
        whether this hand-out took it: a call already handed out (to a request that waited on it
        at the same time, say) or settled is returned as it stands, with False, and must not be
        run again.
        """
        with tracing.handing_out(call_id) as step:
            call, handed = await self.run_statements(lambda tx: _hand_out(tx, call_id, actor, utcnow()))
            if handed:  # a call handed out before (or settled) has no new step to show
                step.found(call)
        return call, handed

    async def settle_reported(self, reported: ReportedOutcome, *, actor: Actor) -> ToolCallRow | None:
        """A CLI reports that a tool it was handed ran: settle that call `succeeded` with the tool's output.

        The call is found in the session by its key, else as the oldest handed-out call of that
        tool and input (CLIs that send no tool call id). None when there is no such call (the tool
        needed no approval, or it was settled already).
        """
        run_id = session_run_id(reported.engine, reported.source, reported.session_id)
        async with self.db.read() as session:
            found = None
            if reported.tool_call_id is not None:
                key = {"run_id": run_id, "key": reported.tool_call_id}
                found = (await session.execute(CALL_BY_KEY, key)).mappings().one_or_none()
            if found is None:
                same = {"run_id": run_id, "tool_name": reported.tool_name, "digest": reported.args_digest}
                found = (await session.execute(HANDED_OUT_BY_ARGUMENTS, same)).mappings().first()
        if found is None or found["status"] != CallStatus.EXECUTING:
            return None
        return await self.settle_call(found["id"], CallStatus.SUCCEEDED, reported.result, actor=actor)

    async def record_refusal(self, engine: str, reason: str, *, actor_id: str, details: dict[str, Any]) -> None:
        """Audit a gate request refused for bad input before any call was stored (`call.refused`): who, through
        which gate, and why. Nothing else is written."""
        async with self.transaction() as tx:
            tx.audit(actor_id, "call.refused", "gate", engine, details={"reason": reason, **details})

    async def record_fallback(self, call: CallNames, *, fallback: str, waited: float, actor_id: str) -> None:
        """Audit a hook answered with its fallback because nobody decided within its wait (`call.fallback`).

        The call stays pending: the CLI asks its user or denies, and a later decision still
        counts when the model asks again. The event is what `/metrics` counts as a gate fallback.
        """
        details = {"fallback": fallback, "waited_seconds": round(waited, 3)}
        async with self.transaction() as tx:
            tx.record(call_event(actor_id, "call.fallback", call, details))


def _check_asker(call: ToolCallRow, actor: Actor) -> None:
    """Only the one who asked for a call (`requested_by`) or an admin follows it and settles it."""
    if actor.id != call.requested_by and not actor.can("admin"):
        raise Forbidden(f"{actor.id!r} did not ask for call {call.id!r}")


def _requested_call(tx: Tx, call_id: str, actor: Actor) -> ToolCallRow:
    """A gate's call, locked, for the one who asked for it or an admin."""
    run = tx.session.execute(LOCK_RUN, {"call_id": call_id}).mappings().one_or_none()
    found = tx.session.execute(LOCK_CALL, {"call_id": call_id}).mappings().one_or_none()
    if run is None or found is None:
        raise NotFound(f"No call {call_id!r}")
    fields = dict(found)
    fields.pop("others_open")
    if get_engine(run["engine"]).kind is not EngineKind.GATE:
        raise UserError(f"Call {call_id!r} belongs to a run our worker continues; it settles its calls itself")
    call = loaded_call(fields)
    _check_asker(call, actor)
    return call


def _hand_out(tx: Tx, call_id: str, actor: Actor, now: dt.datetime) -> tuple[ToolCallRow, bool]:
    call = _requested_call(tx, call_id, actor)  # locked: of two hand-outs at once, the second sees the first's
    if call.status != CallStatus.APPROVED:
        return call, False
    tx.session.execute(CONSUME_APPROVALS, {"call_ids": [call.id], "now": now})
    tx.session.execute(
        update(ToolCallRow).where(ToolCallRow.id == call.id).values(status=CallStatus.EXECUTING, updated_at=now)
    )
    call.status, call.updated_at = CallStatus.EXECUTING, now
    tx.record(call_event(actor.id, "call.executing", call, {"args_digest": call.current_digest}, at=now))
    tx.announce(RUNS_CHANNEL, call.run_id)
    return call, True


def _settle(tx: Tx, call_id: str, outcome: CallStatus, result: Any, actor: Actor, now: dt.datetime) -> ToolCallRow:
    call = _requested_call(tx, call_id, actor)
    if call.status not in _SETTLEABLE:
        raise Conflict(f"Call {call_id!r} is {call.status}: only an approved call is settled", status=call.status)
    if call.status == CallStatus.APPROVED:
        tx.session.execute(CONSUME_APPROVALS, {"call_ids": [call.id], "now": now})
    tx.session.execute(
        update(ToolCallRow).where(ToolCallRow.id == call.id).values(status=outcome, result=result, updated_at=now)
    )
    call.status, call.result, call.updated_at = outcome, result, now
    tx.record(call_event(actor.id, f"call.{outcome}", call, {"result": result}, at=now))
    tx.announce(PENDING_CHANNEL, call.run_id)
    tx.announce(RUNS_CHANNEL, call.run_id)
    return call
