"""What a paused run asks for, and the decisions that let it continue.

A run that reaches calls needing a person ends with `DeferredToolRequests`: each call with
its validated arguments, their digest and the tool definition the model saw. It is
resumed with `DeferredToolResults`, one decision per call id: approve (optionally with
edited arguments), deny with a reason, or answer on the tool's behalf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Discriminator, TypeAdapter

from .tools import ToolDefinition

__all__ = (
    "DEFAULT_DENIAL_REASON",
    "Decision",
    "DeferredToolCall",
    "DeferredToolRequests",
    "DeferredToolResults",
    "ToolAnswered",
    "ToolApproved",
    "ToolDenied",
)

DEFAULT_DENIAL_REASON = "The reviewer gave no reason."


@dataclass(kw_only=True)
class DeferredToolCall:
    """One call waiting for a person."""

    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    """The validated arguments, as JSON-compatible data: what the reviewer sees."""
    args_digest: str
    """SHA-256 of the canonical JSON of `args`: an approval can be bound to exactly these."""
    tool_def: ToolDefinition
    """The definition the model was shown for this call."""
    reason: str | None = None
    """Why approval is needed, when the tool said (`ApprovalRequired(reason)`)."""
    approvals_required: int = 1
    """Distinct approvers the tool asks for."""
    approval_ttl: float | None = None
    """Seconds the call may wait before it expires as a denial; None waits forever."""
    idempotent: bool = False
    """The tool is safe to run twice, so a crash mid-call may simply retry it."""


@dataclass(kw_only=True)
class DeferredToolRequests:
    """The output of a run that paused: the calls waiting for decisions."""

    approvals: list[DeferredToolCall] = field(default_factory=list)

    @property
    def tool_call_ids(self) -> list[str]:
        return [call.tool_call_id for call in self.approvals]


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
