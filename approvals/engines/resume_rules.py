"""The rules a paused run's decisions must pass before anything runs, for any kind of agent.

Every pending call gets exactly one decision; an approval binds to the arguments it was given
for (their digest); edited arguments validate like the model's. Our agents and pydantic-ai
agents (`approvals.engines.pydantic_ai`) both check decisions here, so the rules cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..calls.tools import DeferredToolCall, ToolDefinition
from ..exceptions import InvalidDeferredResults, ToolRetryError, UserError
from .history import pending_tool_calls, resolved_ids
from .native.deferred import DeferredToolResults, ToolAnswered, ToolApproved, ToolDenied
from .native.tools import Tool, args_digest
from .view import ModelRequest, ModelResponse, ToolCallPart

__all__ = ("Settlement", "ToolCallLike", "ValidatedCall", "bind", "check_decisions", "deferred_call", "settle")

Decisions = Mapping[str, ToolApproved | ToolDenied | ToolAnswered]


class ToolCallLike(Protocol):
    """What the manager needs from a model's tool call."""

    @property
    def tool_name(self) -> str: ...
    @property
    def args(self) -> str | dict[str, Any] | None: ...
    @property
    def tool_call_id(self) -> str: ...


@dataclass(kw_only=True)
class ValidatedCall:
    """A tool call whose arguments passed validation."""

    call: ToolCallLike
    tool: Tool[Any]
    args: Any
    """The validated arguments: the args model instance (a dict for `from_schema` tools)."""
    dumped_args: dict[str, Any]
    """The validated arguments as JSON-compatible data, as stored and shown to a reviewer."""
    digest: str
    """Digest of `dumped_args`, binding a decision to exactly these arguments."""


def bind(call: ToolCallLike, tool: Tool[Any], args: Any) -> ValidatedCall:
    """Pair a call with already validated arguments and their digest."""
    dumped = tool.dump_args(args)
    return ValidatedCall(call=call, tool=tool, args=args, dumped_args=dumped, digest=args_digest(dumped))


@dataclass(frozen=True)
class Settlement:
    """A paused run's decisions, checked: the calls it waited on, the decision on each, the approved ones to run."""

    pending: dict[str, ToolCallPart]
    decisions: dict[str, ToolApproved | ToolDenied | ToolAnswered]
    to_run: dict[str, ValidatedCall]


def settle(
    messages: Sequence[ModelRequest | ModelResponse],
    results: DeferredToolResults | None,
    *,
    tools: Mapping[str, Tool[Any]],
    agent_name: str,
    undescribed: Tool[Any] | None = None,
) -> Settlement | None:
    """The decisions on the calls `messages` (the view model) wait on, checked (`check_decisions`); None when none wait.

    Decisions for a run that waits on nothing are refused, and so is a run that waits without
    them. `undescribed` stands in for a waiting call's tool that `tools` does not know.
    """
    pending = pending_tool_calls(messages)
    if not pending:
        if results is not None and results.approvals:
            ids = ", ".join(map(repr, results.approvals))
            raise InvalidDeferredResults(
                [f"the run has no calls waiting for decisions, but decisions were given for {ids}"]
            )
        return None
    if results is None:
        raise UserError(f"The run is waiting for decisions on calls {', '.join(pending)}; pass deferred_tool_results")
    decisions = results.decisions()
    if undescribed is not None:
        tools = {**{call.tool_name: undescribed for call in pending.values()}, **tools}
    to_run = check_decisions(pending, decisions, resolved=resolved_ids(messages), tools=tools, agent_name=agent_name)
    return Settlement(pending, decisions, to_run)


def check_decisions(
    pending: Mapping[str, ToolCallPart],
    decisions: Decisions,
    *,
    resolved: Collection[str],
    tools: Mapping[str, Tool[Any]],
    agent_name: str,
) -> dict[str, ValidatedCall]:
    """The approved calls, validated (with any edit), by id; `InvalidDeferredResults` lists every problem at once."""
    problems = [
        f"no decision for call {call_id!r} ({call.tool_name})"
        for call_id, call in pending.items()
        if call_id not in decisions
    ]
    for call_id in decisions:
        if call_id in resolved:
            problems.append(f"call {call_id!r} was already decided or run; it cannot be decided again")
        elif call_id not in pending:
            problems.append(f"call {call_id!r} is not one of the calls waiting for a decision")

    to_run: dict[str, ValidatedCall] = {}
    for call_id, call in pending.items():
        decision = decisions.get(call_id)
        tool = tools.get(call.tool_name)
        if tool is None:
            problems.append(f"call {call_id!r}: tool {call.tool_name!r} no longer exists in agent {agent_name!r}")
            continue
        if not isinstance(decision, ToolApproved):
            continue
        validated = _bind_valid(call, tool, call.args, problems, "its stored arguments no longer validate: ")
        if validated is None:
            continue
        if decision.args_digest is not None and decision.args_digest != validated.digest:
            problems.append(f"call {call_id!r}: the approval was given for different arguments (digest mismatch)")
        if decision.override_args is not None:
            validated = _bind_valid(call, tool, decision.override_args, problems, "the edited arguments are invalid:\n")
            if validated is None:
                continue
        to_run[call_id] = validated
    if problems:
        raise InvalidDeferredResults(problems)
    return to_run


def _bind_valid(
    call: ToolCallLike, tool: Tool[Any], args: Any, problems: list[str], invalid: str
) -> ValidatedCall | None:
    """The call with `args` once they validate; else None, and `problems` says why after `invalid`."""
    try:
        validated_args = tool.validate_args(args)
    except ToolRetryError as exc:
        problems.append(f"call {call.tool_call_id!r}: {invalid}{exc.message}")
        return None
    return bind(call, tool, validated_args)


def deferred_call(validated: ValidatedCall, definition: ToolDefinition, reason: str | None) -> DeferredToolCall:
    """A call that waits for people: its validated arguments, their digest, and the tool's policies."""
    return DeferredToolCall(
        tool_name=validated.tool.name,
        tool_call_id=validated.call.tool_call_id,
        args=validated.dumped_args,
        args_digest=validated.digest,
        tool_def=definition,
        reason=reason,
        approvals_required=validated.tool.approvals_required,
        approval_ttl=validated.tool.approval_ttl,
        idempotent=validated.tool.idempotent,
    )
