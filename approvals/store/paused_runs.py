"""Runs that begin already waiting for people: a history made elsewhere, its pending calls in the inbox.

A chat app's pydantic-ai run pauses in the app's own process, not in a worker
(`approvals.engines.pydantic_ai.SQLConversationStore`). It is stored as if a worker had started it
and paused at once: the same rows, audit events (`run.started`, `call.requested`,
`run.paused`) and wake-ups as `start_run` followed by `pause`, carried out by the same write
(`apply_write`), in one transaction: `Runs.start_paused_run`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert

from .. import tracing
from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.states import RunStatus
from ..calls.tools import DeferredToolRequests
from ..exceptions import UserError
from ..policy.evaluation import NO_RULE, Outcome
from ..policy.outcomes import decided_details, rule_decision
from .audit import run_event
from .models import RunRow
from .run_plan import RunEvent, RunWrite, pending_call, utcnow
from .run_sql import INSERT_MESSAGES, Tx, apply_write
from .wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL

__all__ = ("PausedRun", "insert_paused_run", "paused_write")

INSERT_RUN = insert(RunRow)


@dataclass(frozen=True, kw_only=True)
class PausedRun:
    """A run to store already paused: its agent, history, and the calls it waits on."""

    agent_name: str
    history: Sequence[dict[str, Any]]
    """The messages so far, oldest first, as stored JSON (each with its `kind`)."""
    message_format: int
    """The format the messages are written in (`approvals.messages.PYDANTIC_AI_FORMAT` for pydantic-ai's)."""
    requests: DeferredToolRequests
    """The calls that wait for people, validated and digested."""
    prompt: str | None = None
    """What the run is about, for lists and pages; the history is what the agent continues from."""
    deps: Any = None
    """JSON data the worker turns into the run's deps."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    engine: str = "native"
    """The engine whose worker continues the run (`pydantic_ai` for a pydantic-ai chat app's)."""
    session_id: str | None = None
    """The conversation the run belongs to, if any: the `session` rules and remembered approvals match on."""
    outcomes: Sequence[Outcome] | None = None
    """What the rules decided for each call (`PolicyEvaluation.new_run_outcomes`); None: no rule applies."""


def insert_paused_run(tx: Tx, run: PausedRun, actor_id: str) -> str:
    """`run` as a new run awaiting approval, audited as started by `actor_id`, who also paused it.

    The run is inserted as held by `actor_id` for the one write that pauses it, which is then
    the very write a worker's pause makes.
    """
    if not run.requests.approvals:
        raise UserError("A paused run needs calls to wait for")
    now = utcnow()
    tx.session.execute(
        INSERT_RUN,
        {
            "id": run.run_id,
            "agent_name": run.agent_name,
            "engine": run.engine,
            "session_id": run.session_id,
            "status": RunStatus.RESUMING,
            "prompt": run.prompt,
            "deps": run.deps,
            "started_by": actor_id,
            "message_count": len(run.history),
            "lease_owner": actor_id,
            "lease_expires_at": None,
            "trace_context": tracing.carrier(),  # the trace the run began in: its resumes continue it
            "created_at": now,
            "updated_at": now,
        },
    )
    if run.history:
        tx.session.execute(INSERT_MESSAGES, _message_rows(run, now))
    tx.record(run_event(actor_id, "run.started", run.run_id, run.agent_name, {"prompt": run.prompt}, at=now))
    tx.announce(RUNS_CHANNEL, run.run_id)
    asked_for = [(r.tool_name, r.tool_call_id) for r in run.requests.approvals]
    with tracing.requesting_calls(asked_for, engine=run.engine, agent=run.agent_name, run_id=run.run_id) as traced:
        write = paused_write(run.run_id, actor_id, run.requests, now=now, outcomes=run.outcomes, traced=traced)
        apply_write(tx, write)
    return run.run_id


def paused_write(
    run_id: str,
    worker_id: str,
    requests: DeferredToolRequests,
    *,
    now: dt.datetime,
    outcomes: Sequence[Outcome] | None = None,
    traced: tracing.RequestedCalls | None = None,
) -> RunWrite:
    """The write of a pause: the calls, their definitions, events and wake-ups (`Runs.pause` adds the
    step's messages and results).

    `outcomes` are what the rules decided for each call (`PolicyEvaluation.pause_outcomes`). A
    call a rule allowed or denied is stored decided, by the rule; when the rules decided every
    call, nobody is asked and the run is ready for a worker at once (it is a resumable engine's).
    `traced`: the calls' request spans (`tracing.requesting_calls`), whose contexts the calls store.
    """
    decided_by_rules = outcomes if outcomes is not None else [NO_RULE] * len(requests.approvals)
    write = RunWrite(
        run_id=run_id,
        worker_id=worker_id,
        changes={"lease_owner": None, "lease_expires_at": None},
        tool_definitions=list({r.tool_def.version: r.tool_def for r in requests.approvals}.values()),
        now=now,
    )
    waiting = []
    traced = traced or tracing.RequestedCalls()
    for index, (request, outcome) in enumerate(zip(requests.approvals, decided_by_rules, strict=True)):
        call = pending_call(request, now, outcome, traced.context(index))
        traced.stored(index, call["id"])
        write.calls.append(call)
        details: dict[str, Any] = {"args": request.args, "args_digest": request.args_digest}
        if policy := outcome.details():
            details["policy"] = policy
        write.events.append(RunEvent("call.requested", "call", call["id"], request.tool_name, details))
        decided = decided_details(outcome, request.args_digest)
        if decided is None:
            waiting.append(request.tool_call_id)
            continue
        action, why = decided
        write.events.append(RunEvent(action, "call", call["id"], request.tool_name, why, actor=outcome.actor))
        if (decision := rule_decision(outcome, call["id"], request.args_digest, now)) is not None:
            write.decisions.append(decision)
    if waiting:
        write.changes["status"] = RunStatus.AWAITING_APPROVAL
        write.events.append(RunEvent("run.paused", "run", run_id, details={"waiting_for": waiting}))
        write.announcements = [(PENDING_CHANNEL, run_id), (RUNS_CHANNEL, run_id)]
    else:
        write.changes["status"] = RunStatus.READY
        ready = RunEvent("run.ready", "run", run_id, details={"decided_by_rules": True}, actor=SYSTEM_ACTOR_ID)
        write.events.append(ready)
        write.announcements = [(READY_CHANNEL, run_id), (RUNS_CHANNEL, run_id)]
    return write


def _message_rows(run: PausedRun, now: dt.datetime) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run.run_id,
            "seq": seq,
            "kind": message["kind"],
            "format_version": run.message_format,
            "data": message,
            "created_at": now,
        }
        for seq, message in enumerate(run.history)
    ]
