"""Reviewers' verdicts on pending calls, and expiry of calls nobody decided in time.

`decide` locks the run's row and then the call's, so of two reviewers deciding at once
exactly one wins and the other gets a `Conflict` naming who decided. It is the one
implementation of a decision, on SQLite and PostgreSQL alike. Approvals are bound to the digest of the
arguments they approved; with a quorum, only approvals of the current arguments count,
and an edit starts the count again for the edited arguments.

A reviewer holds at most one standing approval of the same arguments (a partial unique
index, migration 0005), so a quorum takes different people. Nothing else limits a reviewer:
they may deny or answer a call they approved, and settle a call whose outcome became
unknown after their approval was used up by running it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, TypeAlias

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from .._canonical import digest
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from ._base import SYSTEM, Actor, StoreBase, Transaction
from ._writes import utcnow
from .errors import violates_unique_index
from .models import STANDING_APPROVAL_INDEX, RunRow, ToolCallRow
from .notify import PENDING_CHANNEL
from .states import CallStatus


@dataclass(frozen=True)
class Approve:
    """Run the call as it stands."""

    args_digest: str | None = None
    """Digest of the arguments the reviewer saw; the approval is refused if they changed since."""


@dataclass(frozen=True)
class EditAndApprove:
    """Run the call with these arguments instead; they must already be validated by the tool's validator."""

    args: dict[str, Any]
    args_digest: str | None = None
    """Digest of the arguments the reviewer started editing from."""


@dataclass(frozen=True)
class Deny:
    """Do not run the call; the reason goes to the model."""

    reason: str


@dataclass(frozen=True)
class Answer:
    """Do not run the call; `content` is the result the model receives."""

    content: Any


Verdict: TypeAlias = Approve | EditAndApprove | Deny | Answer


@dataclass(frozen=True)
class _Final:
    status: CallStatus
    verdict: str


_FINAL_VERDICTS: dict[type, _Final] = {
    Deny: _Final(CallStatus.DENIED, "deny"),
    Answer: _Final(CallStatus.ANSWERED, "answer"),
}
"""Verdicts that settle a call at once, whatever the quorum."""


def _settled(status: CallStatus, verdict: str, actor_id: str, now: dt.datetime) -> dict[str, Any]:
    """The columns of a call that a verdict settles."""
    return {"status": status, "verdict": verdict, "decided_by": actor_id, "decided_at": now, "updated_at": now}


def _check_decidable(call: ToolCallRow, started_by: str | None, verdict: Verdict, actor: Actor) -> None:
    """Refuse a verdict on a call that is no longer open, changed since it was seen, or on one's own run."""
    if not call.is_open:
        who = f" by {call.decided_by}" if call.decided_by else ""
        raise Conflict(
            f"Call {call.id!r} is no longer waiting for a decision: it was {call.status}{who}",
            status=call.status,
            decided_by=call.decided_by,
        )
    current = call.current_digest
    seen = verdict.args_digest if isinstance(verdict, Approve | EditAndApprove) else None
    if seen is not None and seen != current:
        raise Conflict(
            f"The arguments of call {call.id!r} changed since you loaded them; review them again", status=call.status
        )
    if isinstance(verdict, Approve | EditAndApprove) and started_by == actor.id:
        raise Forbidden(f"{actor.id!r} started this run and may not approve its calls")


class DecisionOps(StoreBase):
    """Decisions and expiry."""

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record one reviewer's verdict; returns the call as it is afterwards."""
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not decide calls")
        if isinstance(verdict, Approve | EditAndApprove) and not actor.person:
            raise Forbidden(
                f"{actor.id!r} is a service token: approvals come from people "
                "(create the token for a user: approvals tokens create NAME --user USERNAME)"
            )
        if isinstance(verdict, Deny) and not verdict.reason.strip():
            raise UserError("A denial needs a reason: the model reads it")  # refused before any write
        try:
            async with self.transaction() as tx:
                found = await tx.lock_call(call_id)
                if found is None:
                    raise NotFound(f"No call {call_id!r}")
                call, started_by = found
                _check_decidable(call, started_by, verdict, actor)
                await self._apply(tx, call, verdict, actor)
                return call
        except IntegrityError as exc:
            if not violates_unique_index(exc, STANDING_APPROVAL_INDEX):
                raise
            raise Conflict(  # a second standing approval of the same arguments by the same person
                f"{actor.id!r} already approved call {call_id!r} with these arguments; "
                "a quorum needs approvals from different people"
            ) from None

    async def _apply(self, tx: Transaction, call: ToolCallRow, verdict: Verdict, actor: Actor) -> None:
        now = utcnow()
        context = {"run_id": call.run_id, "agent_name": call.agent_name, "tool_name": call.tool_name}
        decision = {"call_id": call.id, "actor": actor.id, "created_at": now}
        if isinstance(verdict, Deny | Answer):
            final = _FINAL_VERDICTS[type(verdict)]
            fields = {"reason": verdict.reason} if isinstance(verdict, Deny) else {"answer": verdict.content}
            await tx.add_decision(
                {
                    **decision,
                    "verdict": final.verdict,
                    "args_digest": call.current_digest,
                    **fields,
                }
            )
            outcome = {"denial_reason": verdict.reason} if isinstance(verdict, Deny) else {"answer": verdict.content}
            await tx.update_call(call, **_settled(final.status, final.verdict, actor.id, now), **outcome)
            await tx.audit(actor.id, f"call.{final.status}", "call", call.id, **context, details=fields)
        else:
            kind = "edit" if isinstance(verdict, EditAndApprove) else "approve"
            edit: dict[str, Any] = {}
            if isinstance(verdict, EditAndApprove):
                edit = {"override_args": verdict.args, "override_digest": digest(verdict.args)}
            approved_digest = edit.get("override_digest") or call.current_digest
            await tx.add_decision(
                {
                    **decision,
                    "verdict": kind,
                    "args_digest": approved_digest,
                    "edited_args": verdict.args if isinstance(verdict, EditAndApprove) else None,
                }
            )
            approvals = 1
            if call.approvals_required > 1:  # a quorum: count distinct approvers of these arguments
                approvals = await tx.count_approvals(call.id, approved_digest)
            details: dict[str, Any] = {
                "args_digest": approved_digest,
                "approvals": approvals,
                "required": call.approvals_required,
            }
            if isinstance(verdict, EditAndApprove):
                details["edited_args"] = verdict.args
            if approvals >= call.approvals_required:
                await tx.update_call(call, **edit, **_settled(CallStatus.APPROVED, kind, actor.id, now))
            else:
                await tx.update_call(call, **edit, updated_at=now)
            await tx.audit(
                actor.id,
                "call.edited" if kind == "edit" else "call.approved",
                "call",
                call.id,
                **context,
                details=details,
            )
        await tx.announce(PENDING_CHANNEL, call.run_id)
        if not call.is_open:
            await tx.ready_if_decided(call.run_id, call.agent_name)

    async def expire(self, *, now: dt.datetime | None = None, limit: int = 500) -> int:
        """Deny pending calls whose time to decide ran out; returns how many expired."""
        now = now or utcnow()
        async with self.transaction() as tx:
            query = (
                select(ToolCallRow)
                .where(ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now)
                .order_by(ToolCallRow.expires_at)
                .limit(limit)
            )
            if self.db.is_postgres:
                # the runs first, then their calls: the order decisions and cancellations take them in
                expired_runs = select(ToolCallRow.run_id).where(
                    ToolCallRow.status == CallStatus.PENDING, ToolCallRow.expires_at < now
                )
                locked = (
                    await tx.session.scalars(
                        select(RunRow.id)
                        .where(RunRow.id.in_(expired_runs))
                        .order_by(RunRow.id)
                        .limit(limit)
                        .with_for_update(skip_locked=True)
                    )
                ).all()
                query = query.where(ToolCallRow.run_id.in_(locked)).with_for_update()
            calls = (await tx.session.scalars(query)).all()
            runs: dict[str, str] = {}
            for call in calls:
                waited = int((call.expires_at - call.created_at).total_seconds()) if call.expires_at else 0
                reason = f"No one decided within {waited} seconds, so the request expired and the call was not run."
                await tx.update_call(
                    call, **_settled(CallStatus.EXPIRED, "expire", SYSTEM.id, now), denial_reason=reason
                )
                await tx.audit(
                    SYSTEM.id,
                    "call.expired",
                    "call",
                    call.id,
                    run_id=call.run_id,
                    agent_name=call.agent_name,
                    tool_name=call.tool_name,
                    details={"reason": reason},
                )
                runs[call.run_id] = call.agent_name
            for run_id in sorted(runs):
                await tx.announce(PENDING_CHANNEL, run_id)
                await tx.ready_if_decided(run_id, runs[run_id])
            return len(calls)
