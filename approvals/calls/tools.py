"""Tools and paused calls as every engine and the store see them, whatever framework the agent is written in.

A model is shown a `ToolDefinition`; a call that needs a person waits as a `DeferredToolCall`
(validated arguments, their digest, the definition the model saw, the tool's policies), and a
run that paused hands the store its `DeferredToolRequests`. An engine's tool is, to the core,
an `ArgsValidator`: what checks a reviewer's edit exactly as the call's own arguments were
checked. These are our native engine's public names too (`approvals.DeferredToolRequests`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .canonical import digest

__all__ = ("ArgsValidator", "DeferredToolCall", "DeferredToolRequests", "ToolDefinition")


@dataclass(kw_only=True)
class ToolDefinition:
    """What a model is told about a tool, plus app-only metadata."""

    name: str
    """The name the model calls the tool by."""
    parameters_json_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False}
    )
    """JSON schema of the arguments object."""
    description: str = ""
    """What the tool does, for the model."""
    strict: bool | None = None
    """Ask providers that support it (OpenAI) to enforce the schema; None lets the exporter decide."""
    sequential: bool = False
    """Run this tool alone, never concurrently with other calls of the same step."""
    metadata: dict[str, Any] | None = None
    """Data for the application (filtering, display); never sent to the model."""

    @property
    def version(self) -> str:
        """Hash of what the model sees, so a changed tool is visible in stored history."""
        return digest(
            {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_json_schema,
                "strict": self.strict,
            }
        )[:16]


class ArgsValidator(Protocol):
    """A tool as the core uses it: the validator of its arguments (and of reviewers' edits), and its definition."""

    @property
    def tool_def(self) -> ToolDefinition:
        """The definition a model is shown."""
        ...

    def validate_args(self, args: str | bytes | dict[str, Any] | None, *, strict_nulls: bool = False) -> Any:
        """The arguments validated; `approvals.exceptions.ToolRetryError` lists the field errors."""
        ...

    def dump_args(self, validated: Any) -> dict[str, Any]:
        """Validated arguments as JSON-compatible data: what is stored and shown to a reviewer."""
        ...


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
    """What a run that paused asks: the calls waiting for decisions."""

    approvals: list[DeferredToolCall] = field(default_factory=list)

    @property
    def tool_call_ids(self) -> list[str]:
        return [call.tool_call_id for call in self.approvals]
