"""Asking through a gate: request a decision, wait for it within a bound, and answer the caller.

The generic gate (`ask`) answers in our own terms (`GateAnswer`) and lets errors be errors:
its caller reads HTTP statuses. A coding CLI's hook (`hook_asked`, then `hook_answer`) must
always get an answer it understands, since most of them run the tool when the hook fails:
every refusal of bad input is a denial in the CLI's format, logged and audited, with nothing
stored. A call nobody decided yet is waited on after the request let go of the rest
(`answer_later`, `hook_answer`: the web app parks such requests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...calls.states import CallStatus
from ...exceptions import ApprovalsError, Conflict, InvalidArguments, UserError
from ...logs import with_call, with_run
from .answers import Decision, GateAnswer, answer_for
from .hooks import Fallback, HookFormat, HookInputError, Permission, verdict_for

if TYPE_CHECKING:
    from ...calls.requests import CallRequest
    from ...service import ApprovalService
    from ...store import Actor
    from ...store.models import ToolCallRow

__all__ = (
    "MAX_WAIT_SECONDS",
    "Asked",
    "HookAsked",
    "Pending",
    "answer_later",
    "ask",
    "hook_answer",
    "hook_asked",
    "look",
)

logger = logging.getLogger("approvals.gate")

MAX_WAIT_SECONDS = 3_600.0
"""The longest a request may wait for its decision in one go; a caller asks again after it."""


@dataclass(frozen=True)
class Pending:
    """A stored call nobody decided yet: all that waiting for it later needs (its names, not the row)."""

    id: str
    run_id: str
    agent_name: str
    tool_name: str

    @classmethod
    def of(cls, call: ToolCallRow) -> Pending:
        return cls(call.id, call.run_id, call.agent_name, call.tool_name)


@dataclass(frozen=True)
class Asked:
    """A gate request's outcome: the answer, and whether this request stored the call."""

    answer: GateAnswer
    created: bool
    pending: Pending | None = None
    """The call's names while nobody decided it, for waiting on it later (`answer_later`)."""


Gone = Callable[[], Awaitable[bool]]
"""Whether the caller has gone (its connection closed) after a wait: an approval is then not handed out."""


async def ask(service: ApprovalService, request: CallRequest, *, actor: Actor, gone: Gone | None = None) -> Asked:
    """Request a decision on one call and answer at once: the call handed out if approved, its names if pending
    (`answer_later` waits for it).

    The same idempotency key (`CallRequest.tool_call_id`) in the same session gets the same
    call and its decision. `InvalidArguments`, `UserError` and `Conflict` say what is wrong.
    """
    call, created = await service.request_call(request, actor=actor, hand_out=True)
    handed = created and call.status == CallStatus.EXECUTING  # a rule allowed it: stored handed out to this request
    answer = await _handed(service, call, actor=actor, gone=gone, handed=handed)
    return Asked(answer, created, None if answer.decided else Pending.of(call))


async def look(service: ApprovalService, call_id: str, *, actor: Actor, gone: Gone | None = None) -> Asked:
    """A call's answer now (handed out if approved), with its names if pending; `NotFound` for no such call.

    Only the one who asked for it (or an admin) hears it: `Forbidden` for anyone else."""
    call = await service.store.calls.asked_call(call_id, actor=actor)
    answer = await _handed(service, call, actor=actor, gone=gone, handed=False)
    return Asked(answer, False, None if answer.decided else Pending.of(call))


async def answer_later(
    service: ApprovalService, pending: Pending, *, actor: Actor, wait: float, gone: Gone | None = None
) -> GateAnswer:
    """A pending call's answer after waiting up to `wait` seconds for a person, handed out if approved then
    (unless the caller has gone): for a request that let go of everything else while it waits (parked)."""
    with with_run(pending.run_id), with_call(pending.id):  # lines logged while the gate waits name the call
        call = await service.store.calls.wait_for_decision(
            pending.id, seconds=min(wait, MAX_WAIT_SECONDS), run_id=pending.run_id
        )
        return await _handed(service, call, actor=actor, gone=gone, handed=False)


async def _handed(
    service: ApprovalService, call: ToolCallRow, *, actor: Actor, gone: Gone | None, handed: bool
) -> GateAnswer:
    if call.status == CallStatus.APPROVED and not (gone is not None and await gone()):
        # the caller runs it now: handed out, it is executing; a caller that went away while it waited gets
        # nothing handed out, so its retry (the MCP gateway's, by the same arguments) still finds it approved.
        # Of two requests waiting on one call, only the one whose hand-out took it hears `handed_out`.
        call, handed = await service.store.calls.hand_out(call.id, actor=actor)
    return answer_for(call, handed_out=handed)


@dataclass(frozen=True)
class HookAsked:
    """A hook's call, stored (or found): what answering it, now or after a wait, needs."""

    pending: Pending
    answer: GateAnswer
    """Where the call stood when it was asked for."""
    asked: Mapping[str, Any]
    """The arguments the CLI asked to run the tool with (an edit is answered against them)."""
    asked_at: float


async def hook_asked(
    service: ApprovalService, hook: HookFormat, body: Any, *, actor: Actor, approval_ttl: float | None = None
) -> HookAsked | dict[str, Any]:
    """The hook's call stored (or found), or the answer already: a post-tool hook's report settles the call that
    ran (`succeeded`, with the tool's output) and gets an empty answer; bad input or a refused request gets a
    denial naming the reason (and a `call.refused` audit event where the input was at fault)."""
    if hook.reports_outcome(body):
        return await _report(service, hook, body, actor=actor)
    try:
        request = hook.request(body, approval_ttl=approval_ttl)
        # a call a rule allows is answered `allow` (it is never edited), so the CLI runs it: handed out at once
        call, _ = await service.request_call(request, actor=actor, hand_out=True)
    except (HookInputError, InvalidArguments, UserError, Conflict) as exc:
        return await _refused(service, hook, exc, actor, body)
    except ApprovalsError as exc:  # not found, forbidden: the token or the setup is at fault
        logger.warning("%s hook from %s refused: %s", hook.cli, actor.id, exc)
        return hook.denial(f"approvals refused this call: {exc}")
    return HookAsked(Pending.of(call), answer_for(call), request.args, time.monotonic())


async def hook_answer(
    service: ApprovalService,
    hook: HookFormat,
    asked: HookAsked,
    *,
    actor: Actor,
    wait: float,
    fallback: Fallback,
    call_url: Callable[[str], str],
) -> dict[str, Any]:
    """The CLI's answer for its call, in its own format and never an error: after waiting up to `wait` seconds for
    a person if it is pending, and `fallback` (audited) if nobody decided by then."""
    pending = asked.pending
    answer = asked.answer
    try:
        if not answer.decided and wait > 0:
            with with_run(pending.run_id), with_call(pending.id):
                call = await service.store.calls.wait_for_decision(
                    pending.id, seconds=min(wait, MAX_WAIT_SECONDS), run_id=pending.run_id
                )
            answer = answer_for(call)
        verdict = verdict_for(hook, answer, fallback=fallback, call_url=call_url(answer.call_id), asked=asked.asked)
        if answer.decision is Decision.PENDING:
            waited = time.monotonic() - asked.asked_at
            await _audit_fallback(service, hook, pending, fallback, waited, actor)
        if verdict.permission is Permission.ALLOW and answer.status == CallStatus.APPROVED:
            _, handed = await service.store.calls.hand_out(answer.call_id, actor=actor)  # only what the CLI runs
            if not handed:  # another request about the same tool call was handed it at the same moment
                return hook.denial(f"approvals handed this call to another request, which runs it: {answer.call_id}")
    except (UserError, Conflict) as exc:
        return await _refused(service, hook, exc, actor, None)
    except ApprovalsError as exc:
        logger.warning("%s hook from %s refused: %s", hook.cli, actor.id, exc)
        return hook.denial(f"approvals refused this call: {exc}")
    return hook.write(verdict)


async def _refused(
    service: ApprovalService, hook: HookFormat, exc: Exception, actor: Actor, body: Any
) -> dict[str, Any]:
    reason = _refusal(exc)
    await _audit_refusal(service, hook, reason, actor, body)
    return hook.denial(f"approvals refused this call: {reason}")


def _refusal(exc: Exception) -> str:
    if isinstance(exc, InvalidArguments):
        fields = "; ".join(f"{where or 'input'}: {message}" for where, message in exc.errors)
        return f"the tool input is not valid ({fields})"
    return str(exc)


async def _audit_refusal(service: ApprovalService, hook: HookFormat, reason: str, actor: Actor, body: Any) -> None:
    logger.warning("%s hook from %s refused: %s", hook.cli, actor.id, reason)
    details: dict[str, Any] = {"cli": hook.cli}
    if isinstance(body, dict):
        details |= {
            name: body[name][:200]
            for name in ("session_id", "tool_name", "hook_event_name")
            if isinstance(body.get(name), str)
        }
    try:
        await service.store.calls.record_refusal(hook.engine, reason, actor_id=actor.id, details=details)
    except Exception:  # the denial stands even when the record cannot be written
        logger.exception("could not audit a refused %s hook request", hook.cli)


async def _audit_fallback(
    service: ApprovalService, hook: HookFormat, call: Pending, fallback: Fallback, waited: float, actor: Actor
) -> None:
    """Nobody decided within the hook's wait: say so in the audit log (what `/metrics` counts as a fallback)."""
    logger.info("%s hook: call %s not decided in %.0f s; answered %s", hook.cli, call.id, waited, fallback.value)
    try:
        await service.store.calls.record_fallback(call, fallback=fallback.value, waited=waited, actor_id=actor.id)
    except Exception:  # the fallback answer stands even when the record cannot be written
        logger.exception("could not audit the fallback of %s hook call %s", hook.cli, call.id)


async def _report(service: ApprovalService, hook: HookFormat, body: Any, *, actor: Actor) -> dict[str, Any]:
    """A post-tool hook: the tool ran, so settle its call; the answer says nothing (the tool already ran)."""
    try:
        settled = await service.store.calls.settle_reported(hook.reported(body), actor=actor)
    except (HookInputError, ApprovalsError) as exc:
        logger.warning("%s post-tool report from %s not recorded: %s", hook.cli, actor.id, exc)
    except Exception:  # a report lost is a call left executing for a person to settle, never a blocked CLI
        logger.exception("%s post-tool report from %s failed", hook.cli, actor.id)
    else:
        if settled is not None:
            logger.debug("%s reported call %s ran", hook.cli, settled.id)
    return {}
