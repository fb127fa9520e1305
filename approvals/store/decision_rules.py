"""The rules of a reviewer's verdict, the one copy: what it may do to a call, and what it writes.

`plan_decision` reads `CallFacts` (the call and its run, locked) and returns a
`DecisionPlan` (the rows to write, the audit events, the wake-ups) or refuses with a
reason. It touches no database: `decisions` carries a plan out on SQLite and PostgreSQL
with the same statements (`decision_sql`).

Approvals are bound to the digest of the arguments they approved; with a quorum, only
approvals of the current arguments count, and an edit starts the count again for the
edited arguments. A reviewer holds at most one standing approval of the same arguments,
so a quorum takes different people. Nothing else limits a reviewer: they may deny or
answer a call they approved, and settle a call whose outcome became unknown after their
approval was used up by running it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..calls.actors import Actor
from ..calls.canonical import digest
from ..calls.options import NO_APPROVALS, CallRefusal, call_options, refusal_sentence, reviewer_refusal
from ..calls.rules import status_once_decided
from ..calls.states import OPEN_CALL_STATUSES, CallStatus, RunStatus
from ..calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from ..exceptions import Conflict, Forbidden, UserError
from .audit import AuditEvent, call_event
from .models import ToolCallRow
from .run_sql import run_moved_on, run_moved_on_announcements
from .wakeups import PENDING_CHANNEL


@dataclass(frozen=True)
class _Final:
    status: CallStatus
    verdict: str


_FINAL_VERDICTS: dict[type, _Final] = {
    Deny: _Final(CallStatus.DENIED, "deny"),
    Answer: _Final(CallStatus.ANSWERED, "answer"),
}
"""Verdicts that settle a call at once, whatever the quorum."""


def settled(status: CallStatus, verdict: str, actor_id: str, now: dt.datetime) -> dict[str, Any]:
    """The columns of a call that a verdict settles."""
    return {"status": status, "verdict": verdict, "decided_by": actor_id, "decided_at": now, "updated_at": now}


@dataclass(frozen=True)
class CallFacts:
    """What the rules of a verdict read, with the call's run and the call locked so none of it can change."""

    call: ToolCallRow
    started_by: str | None
    run_status: RunStatus
    run_engine: str
    """The engine of the call's run: who continues it once its calls are decided."""
    run_trace_context: dict[str, str] | None
    """The W3C trace context the call's run started in (`approvals.tracing`): the decision's span joins it."""
    others_open: bool
    """Whether another call of the run still waits for a person."""
    standing: dict[str, frozenset[str]]
    """Who holds a standing approval, by the digest they approved (read for quorum calls only)."""


class Decided(NamedTuple):
    """A recorded verdict: the call as it is afterwards, and the trace its run started in."""

    call: ToolCallRow
    run_trace_context: dict[str, str] | None


@dataclass(frozen=True)
class DecisionPlan:
    """Everything one verdict changes, decided in Python before anything is written."""

    decision: dict[str, Any]
    """The `decisions` row."""
    call_changes: dict[str, Any]
    """The call's columns to set."""
    run_next: RunStatus | None
    """The run was waiting for this call alone: its status now (`status_once_decided`), else None."""
    events: list[AuditEvent]
    announcements: list[tuple[str, str]]


def check_verdict(verdict: Verdict, actor: Actor) -> None:
    """What can be refused before reading anything: the actor's right to decide, and a denial's reason."""
    refusal = reviewer_refusal(actor, approving=isinstance(verdict, Approve | EditAndApprove))
    if refusal is not None:
        raise _refused(refusal, actor)
    if isinstance(verdict, Deny) and not verdict.reason.strip():
        raise UserError("A denial needs a reason: the model reads it")


def _check_decidable(
    call: ToolCallRow,
    started_by: str | None,
    verdict: Verdict,
    actor: Actor,
    *,
    approving: str = "",
    standing: Mapping[str, frozenset[str]] | None = None,
    engine: str | None = None,
) -> None:
    """Refuse a verdict on a call that is no longer open, changed since it was seen, asked for by the actor or
    on their own run, or a second approval of the same arguments (`approving`: their digest) by the same person.

    Who may do what comes from `call_options`, the rules the pages show.
    """
    options = call_options(
        actor,
        call.status,
        started_by=started_by,
        requested_by=call.requested_by,
        digest=approving,
        standing=standing or NO_APPROVALS,
        approver_groups=call.approver_groups,
        engine=engine,
    )
    if isinstance(verdict, EditAndApprove):
        refusal, seen = options.edit_refusal, verdict.args_digest
    elif isinstance(verdict, Approve):
        refusal, seen = options.approve_refusal, verdict.args_digest
    else:
        refusal, seen = options.decide_refusal, None
    if refusal is CallRefusal.NOT_OPEN:
        raise _refused(refusal, actor, call)
    if seen is not None and seen != call.current_digest:
        raise Conflict(
            f"The arguments of call {call.id!r} changed since you loaded them; review them again", status=call.status
        )
    if refusal is not None:
        raise _refused(refusal, actor, call)


def _refused(refusal: CallRefusal, actor: Actor, call: ToolCallRow | None = None) -> Conflict | Forbidden:
    """The store's error for a refusal of `call_options`, with the texts clients know."""
    refusals = CallRefusal
    if refusal is refusals.NOT_REVIEWER:
        return Forbidden(f"{actor.id!r} ({actor.role}) may not decide calls")
    if refusal is refusals.NOT_A_PERSON:
        return Forbidden(
            f"{actor.id!r} is a service token: approvals come from people "
            "(create the token for a user: approvals tokens create NAME --user USERNAME)"
        )
    if refusal is refusals.OWN_RUN:
        return Forbidden(f"{actor.id!r} started this run and may not approve its calls")
    if refusal is refusals.ENGINE_CANNOT_EDIT:
        return Conflict(refusal_sentence(refusal))
    if refusal in (refusals.OWN_CALL, refusals.NOT_IN_GROUPS):
        return Forbidden(refusal_sentence(refusal))  # the page's sentence: the same rule, the same words
    assert call is not None  # the other refusals need the call, read by then
    if refusal is refusals.NOT_OPEN:
        who = f" by {call.decided_by}" if call.decided_by else ""
        return Conflict(
            f"Call {call.id!r} is no longer waiting for a decision: it was {call.status}{who}",
            status=call.status,
            decided_by=call.decided_by,
        )
    return Conflict(
        f"{actor.id!r} already approved call {call.id!r} with these arguments; "
        "a quorum needs approvals from different people"
    )


def plan_decision(facts: CallFacts, verdict: Verdict, actor: Actor, now: dt.datetime) -> DecisionPlan:
    """The rules of a verdict, the one copy: what it writes, or why it is refused."""
    call = facts.call
    edit: dict[str, Any] = {}
    if isinstance(verdict, EditAndApprove):
        edit = {"override_args": verdict.args, "override_digest": digest(verdict.args)}
    approved_digest = edit.get("override_digest") or call.current_digest
    _check_decidable(
        call,
        facts.started_by,
        verdict,
        actor,
        approving=approved_digest,
        standing=facts.standing,
        engine=facts.run_engine,
    )
    decision: dict[str, Any] = {"call_id": call.id, "actor": actor.id, "channel": actor.channel, "created_at": now}
    if isinstance(verdict, Deny | Answer):
        final = _FINAL_VERDICTS[type(verdict)]
        fields = {"reason": verdict.reason} if isinstance(verdict, Deny) else {"answer": verdict.content}
        decision |= {"verdict": final.verdict, "args_digest": call.current_digest, **fields}
        outcome = {"denial_reason": verdict.reason} if isinstance(verdict, Deny) else {"answer": verdict.content}
        changes = {**settled(final.status, final.verdict, actor.id, now), **outcome}
        action, details = f"call.{final.status}", fields
    else:
        kind = "edit" if isinstance(verdict, EditAndApprove) else "approve"
        standing = facts.standing.get(approved_digest, frozenset())
        edited_args = verdict.args if isinstance(verdict, EditAndApprove) else None
        decision |= {"verdict": kind, "args_digest": approved_digest}
        if edited_args is not None:
            decision["edited_args"] = edited_args
        approvals = len(standing) + 1 if call.approvals_required > 1 else 1
        settles = approvals >= call.approvals_required
        changes = {**edit, **(settled(CallStatus.APPROVED, kind, actor.id, now) if settles else {"updated_at": now})}
        action = "call.edited" if kind == "edit" else "call.approved"
        details = {"args_digest": approved_digest, "approvals": approvals, "required": call.approvals_required}
        if edited_args is not None:
            details["edited_args"] = edited_args
    if actor.channel is not None:
        details = {**details, "channel": actor.channel}
    if actor.identity is not None:
        details = {**details, "identity": actor.identity.as_details()}
    events = [call_event(actor.id, action, call, details, at=now)]
    announcements = [(PENDING_CHANNEL, call.run_id)]
    still_open = changes.get("status", call.status) in OPEN_CALL_STATUSES
    run_next = None
    if not still_open and not facts.others_open and facts.run_status == RunStatus.AWAITING_APPROVAL:
        run_next = status_once_decided(facts.run_engine)
        events.append(run_moved_on(call.run_id, call.agent_name, run_next, now))
        announcements += run_moved_on_announcements(call.run_id, run_next)
    return DecisionPlan(decision, changes, run_next, events, announcements)
