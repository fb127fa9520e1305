"""What a paused run asks for, and the decisions that let it continue.

A run that reaches calls needing a person ends with `DeferredToolRequests` (the neutral
`approvals.calls.tools` types, under our agent's public names): each call with its validated
arguments, their digest and the tool definition the model saw. It is resumed with
`DeferredToolResults`, one decision per call id: approve (optionally with edited arguments),
deny with a reason, or answer on the tool's behalf; `results_from_verdicts` reads them from the
core's verdicts (`approvals.calls.verdicts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Discriminator, TypeAdapter

from ...calls.tools import DeferredToolCall, DeferredToolRequests
from ...calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict

__all__ = (
    "DEFAULT_DENIAL_REASON",
    "Decision",
    "DeferredToolCall",
    "DeferredToolRequests",
    "DeferredToolResults",
    "ToolAnswered",
    "ToolApproved",
    "ToolDenied",
    "results_from_verdicts",
)

DEFAULT_DENIAL_REASON = "The reviewer gave no reason."


@dataclass(kw_only=True)
class ToolApproved:
    """Run the call, with the reviewer's edited arguments if given (validated first)."""

    override_args: dict[str, Any] | None = None
    args_digest: str | None = None
    """If set, the approval only holds while the call's arguments still have this digest."""
    kind: Literal["approved"] = "approved"


@dataclass(kw_only=True)
class ToolDenied:
    """Do not run the call; the model is told it was denied, and why."""

    message: str = DEFAULT_DENIAL_REASON
    kind: Literal["denied"] = "denied"


@dataclass(kw_only=True)
class ToolAnswered:
    """Do not run the call; the reviewer's `content` is the result the model receives."""

    content: Any
    kind: Literal["answered"] = "answered"


Decision: TypeAlias = Annotated[ToolApproved | ToolDenied | ToolAnswered, Discriminator("kind")]
decision_adapter: TypeAdapter[ToolApproved | ToolDenied | ToolAnswered] = TypeAdapter(Decision)


@dataclass(kw_only=True)
class DeferredToolResults:
    """Decisions for a paused run's calls, keyed by tool call id.

    `True` and `False` are shorthand for `ToolApproved()` and `ToolDenied()`.
    """

    approvals: Mapping[str, ToolApproved | ToolDenied | ToolAnswered | bool] = field(default_factory=dict)

    def decisions(self) -> dict[str, ToolApproved | ToolDenied | ToolAnswered]:
        """The decisions with the boolean shorthand expanded."""
        expanded: dict[str, ToolApproved | ToolDenied | ToolAnswered] = {}
        for call_id, decision in self.approvals.items():
            if decision is True:
                expanded[call_id] = ToolApproved()
            elif decision is False:
                expanded[call_id] = ToolDenied()
            else:
                expanded[call_id] = decision
        return expanded


def results_from_verdicts(verdicts: Mapping[str, Verdict]) -> DeferredToolResults:
    """The core's verdicts on a paused run's calls, by tool call id, as the decisions our agent resumes with."""
    return DeferredToolResults(approvals={call_id: _decision(verdict) for call_id, verdict in verdicts.items()})


def _decision(verdict: Verdict) -> ToolApproved | ToolDenied | ToolAnswered:
    if isinstance(verdict, Approve):
        return ToolApproved(args_digest=verdict.args_digest)
    if isinstance(verdict, EditAndApprove):
        return ToolApproved(override_args=verdict.args, args_digest=verdict.args_digest)
    if isinstance(verdict, Deny):
        return ToolDenied(message=verdict.reason)
    assert isinstance(verdict, Answer), verdict
    return ToolAnswered(content=verdict.content)
