"""What a caller that waits for a decision is told: one answer for every gate and hook format.

A call's status says where it stands; a caller needs less: may it run the tool (and with
which arguments), must it not (and why), did a person answer in the tool's place, or does
the call still wait. Asked again with the same idempotency key, a caller gets the answer
of the same call, so an approval is never given twice for two calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ...calls.states import CallStatus

__all__ = ("Decision", "GateAnswer", "answer_for")


class Decision(StrEnum):
    """What the caller does next."""

    PENDING = "pending"
    """Nobody decided yet: ask again (or fall back)."""
    APPROVED = "approved"
    """Run the tool with `GateAnswer.args` (a reviewer's edit, if they edited)."""
    DENIED = "denied"
    """Do not run it; `GateAnswer.reason` says why (the model may read it)."""
    ANSWERED = "answered"
    """Do not run it; `GateAnswer.answer` is what the tool would have returned."""
    EXPIRED = "expired"
    """Nobody decided in time: the call will not be approved any more."""


_BY_STATUS = {
    CallStatus.PENDING: Decision.PENDING,
    CallStatus.OUTCOME_UNKNOWN: Decision.PENDING,
    CallStatus.APPROVED: Decision.APPROVED,
    CallStatus.EXECUTING: Decision.APPROVED,
    CallStatus.SUCCEEDED: Decision.APPROVED,
    CallStatus.FAILED: Decision.APPROVED,
    CallStatus.DENIED: Decision.DENIED,
    CallStatus.ANSWERED: Decision.ANSWERED,
    CallStatus.EXPIRED: Decision.EXPIRED,
    CallStatus.CANCELLED: Decision.DENIED,
}
_CANCELLED = "The session was cancelled by an admin."
_EXPIRED = "Nobody decided in time; the call expired."


@dataclass(frozen=True)
class GateAnswer:
    """A call's decision as a caller reads it."""

    call_id: str
    tool_call_id: str
    status: CallStatus
    decision: Decision
    args: Any
    """The arguments to run the tool with: the reviewer's edit, or the call's own."""
    edited: bool
    reason: str | None = None
    answer: Any = None
    decided_by: str | None = None
    handed_out: bool = False
    """This answer hands the approved call to its caller to run now (it is `executing` from then on).
    An approval handed out before, to this caller's earlier or concurrent request, says False: not to run again."""

    @property
    def decided(self) -> bool:
        return self.decision is not Decision.PENDING


def answer_for(call: Any, *, handed_out: bool = False) -> GateAnswer:
    """The answer for a stored call (`ToolCallRow`); `handed_out` when this answer hands it to its caller."""
    status = CallStatus(call.status)
    decision = _BY_STATUS[status]
    reason = None
    if status is CallStatus.DENIED:
        reason = call.denial_reason
    elif status is CallStatus.CANCELLED:
        reason = _CANCELLED
    elif status is CallStatus.EXPIRED:
        reason = _EXPIRED
    return GateAnswer(
        call_id=call.id,
        tool_call_id=call.tool_call_id,
        status=status,
        decision=decision,
        args=call.current_args,
        edited=call.override_args is not None,
        reason=reason,
        answer=call.answer if status is CallStatus.ANSWERED else None,
        decided_by=call.decided_by,
        handed_out=handed_out,
    )
