"""Reviewers' verdicts on pending calls, and expiry of calls nobody decided in time.

`decide` locks the call row, so of two reviewers deciding at once exactly one wins and the
other gets a `Conflict` naming who decided. Approvals are bound to the digest of the
arguments they approved; with a quorum, only approvals of the current arguments count,
and an edit starts the count again for the edited arguments.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, TypeAlias

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from .._canonical import digest
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from ._base import SYSTEM, Actor, StoreBase, Transaction, utcnow
from .lifecycle import OPEN_CALL_STATUSES
from .models import DecisionRow, RunRow, ToolCallRow
from .notify import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL


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
    status: str
    verdict: str


_FINAL_VERDICTS: dict[type, _Final] = {Deny: _Final("denied", "deny"), Answer: _Final("answered", "answer")}
"""Verdicts that settle a call at once, whatever the quorum."""


class DecisionOps(StoreBase):
    """Decisions and expiry."""

    async def decide(self, call_id: str, verdict: Verdict, *, actor: Actor) -> ToolCallRow:
        """Record one reviewer's verdict; returns the call as it is afterwards."""
        if not actor.can("reviewer"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not decide calls")
        if isinstance(verdict, Deny) and not verdict.reason.strip():
            raise UserError("A denial needs a reason: the model reads it")  # refused before any write
        try:
            async with self.transaction() as tx:
                found = (
                    await tx.session.execute(
                        select(ToolCallRow, RunRow.started_by)
                        .join(RunRow, RunRow.id == ToolCallRow.run_id)
                        .where(ToolCallRow.id == call_id)
                        .with_for_update(of=ToolCallRow)
                    )
                ).one_or_none()
                if found is None:
                    raise NotFound(f"No call {call_id!r}")
                call, started_by = found
                if call.status not in OPEN_CALL_STATUSES:
                    who = f" by {call.decided_by}" if call.decided_by else ""
                    raise Conflict(
                        f"Call {call_id!r} is no longer waiting for a decision: it was {call.status}{who}",
                        status=call.status,
                        decided_by=call.decided_by,
                    )
                current = call.override_digest or call.args_digest
                seen = verdict.args_digest if isinstance(verdict, Approve | EditAndApprove) else None
                if seen is not None and seen != current:
                    raise Conflict(
                        f"The arguments of call {call_id!r} changed since you loaded them; review them again",
                        status=call.status,
                    )
                if isinstance(verdict, Approve | EditAndApprove) and started_by == actor.id:
                    raise Forbidden(f"{actor.id!r} started this run and may not approve its calls")
                await self._apply(tx, call, verdict, actor)
                return call
        except IntegrityError:
            raise Conflict(f"{actor.id!r} already approved call {call_id!r} with these arguments") from None

    async def _apply(self, tx: Transaction, call: ToolCallRow, verdict: Verdict, actor: Actor) -> None:
        now = utcnow()
        context = {"run_id": call.run_id, "agent_name": call.agent_name, "tool_name": call.tool_name}
        if isinstance(verdict, Deny | Answer):
            final = _FINAL_VERDICTS[type(verdict)]
            fields = {"reason": verdict.reason} if isinstance(verdict, Deny) else {"answer": verdict.content}
            tx.session.add(
                DecisionRow(
                    call_id=call.id,
                    actor=actor.id,
                    verdict=final.verdict,
                    args_digest=call.override_digest or call.args_digest,
                    created_at=now,
                    **fields,
                )
            )
            self._settle(call, final.status, final.verdict, actor.id, now)
            if isinstance(verdict, Deny):
                call.denial_reason = verdict.reason
            else:
                call.answer = verdict.content
            await tx.audit(actor.id, f"call.{final.status}", "call", call.id, **context, details=fields)
        else:
            kind = "edit" if isinstance(verdict, EditAndApprove) else "approve"
            if isinstance(verdict, EditAndApprove):
                call.override_args = verdict.args
                call.override_digest = digest(verdict.args)
            approved_digest = call.override_digest or call.args_digest
            tx.session.add(
                DecisionRow(
                    call_id=call.id,
                    actor=actor.id,
                    verdict=kind,
                    args_digest=approved_digest,
                    edited_args=verdict.args if isinstance(verdict, EditAndApprove) else None,
                    created_at=now,
                )
            )
            approvals = 1
            if call.approvals_required > 1:  # a quorum: count distinct approvers of these arguments
                await tx.session.flush()
                approvals = (
                    await tx.session.scalar(
                        select(func.count(func.distinct(DecisionRow.actor))).where(
                            DecisionRow.call_id == call.id,
                            DecisionRow.verdict.in_(["approve", "edit"]),
                            DecisionRow.args_digest == approved_digest,
                            DecisionRow.consumed_at.is_(None),
                        )
                    )
                    or 0
                )
            details: dict[str, Any] = {
                "args_digest": approved_digest,
                "approvals": approvals,
                "required": call.approvals_required,
            }
            if isinstance(verdict, EditAndApprove):
                details["edited_args"] = verdict.args
            if approvals >= call.approvals_required:
                self._settle(call, "approved", kind, actor.id, now)
            else:
                call.updated_at = now
            await tx.audit(
                actor.id,
                "call.edited" if kind == "edit" else "call.approved",
                "call",
                call.id,
                **context,
                details=details,
            )
        await tx.announce(PENDING_CHANNEL, call.run_id)
        if call.status not in OPEN_CALL_STATUSES:
            await self._maybe_ready(tx, call.run_id)

    @staticmethod
    def _settle(call: ToolCallRow, status: str, verdict: str, actor_id: str, now: dt.datetime) -> None:
        call.status = status
        call.verdict = verdict
        call.decided_by = actor_id
        call.decided_at = now
        call.updated_at = now

    async def _maybe_ready(self, tx: Transaction, run_id: str) -> None:
        """When the last open call of a paused run is decided, the run is ready to resume (one guarded update)."""
        await tx.session.flush()
        still_open = (
            select(ToolCallRow.id)
            .where(ToolCallRow.run_id == run_id, ToolCallRow.status.in_(OPEN_CALL_STATUSES))
            .exists()
        )
        ready = (
            await tx.session.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == "awaiting_approval", ~still_open)
                .values(status="ready", updated_at=utcnow())
                .returning(RunRow.agent_name)
            )
        ).one_or_none()
        if ready is not None:
            await tx.audit(SYSTEM.id, "run.ready", "run", run_id, run_id=run_id, agent_name=ready.agent_name)
            await tx.announce(READY_CHANNEL, run_id)
            await tx.announce(RUNS_CHANNEL, run_id)

    async def expire(self, *, now: dt.datetime | None = None, limit: int = 500) -> int:
        """Deny pending calls whose time to decide ran out; returns how many expired."""
        now = now or utcnow()
        async with self.transaction() as tx:
            query = (
                select(ToolCallRow)
                .where(ToolCallRow.status == "pending", ToolCallRow.expires_at < now)
                .order_by(ToolCallRow.expires_at)
                .limit(limit)
            )
            if self.db.is_postgres:
                query = query.with_for_update(skip_locked=True)
            calls = (await tx.session.scalars(query)).all()
            run_ids: set[str] = set()
            for call in calls:
                waited = int((call.expires_at - call.created_at).total_seconds()) if call.expires_at else 0
                reason = f"No one decided within {waited} seconds, so the request expired and the call was not run."
                self._settle(call, "expired", "expire", SYSTEM.id, now)
                call.denial_reason = reason
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
                run_ids.add(call.run_id)
            for run_id in sorted(run_ids):
                await tx.announce(PENDING_CHANNEL, run_id)
                await self._maybe_ready(tx, run_id)
            return len(calls)
