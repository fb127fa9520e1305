"""What a run's history says about where it stands: which calls wait, which are settled, what ran, whose run it is.

A paused run keeps no state outside its messages, so whoever continues it (the agent, or an
engine telling the worker what to hand it) reads these answers from the stored history. They
read the view model (`approvals.engines.view`, what every history codec's `view`
gives), so every engine that keeps a per-message history shares them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ..calls.states import CallStatus
from .view import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
)

__all__ = (
    "call_outcomes",
    "pending_tool_calls",
    "resolved_ids",
    "run_id_of",
    "since_last_response",
    "tool_call_accepted_since_prompt",
)

ModelMessage = ModelRequest | ModelResponse


def run_id_of(messages: Sequence[ModelMessage]) -> str | None:
    """The run the latest messages belong to, if any carries one."""
    return next((m.run_id for m in reversed(messages) if m.run_id), None)


def tool_call_accepted_since_prompt(messages: Sequence[ModelMessage]) -> bool:
    """Whether a tool call got a result or a denial after the latest user prompt (retry prompts do not count)."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart | ToolDeniedPart):
                return True
        if any(isinstance(part, UserPromptPart) for part in message.parts):
            return False
    return False


def _last_response_index(messages: Sequence[ModelMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], ModelResponse):
            return index
    return None


def since_last_response(messages: Sequence[Any]) -> list[Any]:
    """The history's tail from its last model response, in any message format: all that says which calls wait."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].kind == "response":
            return list(messages[index:])
    return []


def resolved_ids(messages: Sequence[ModelMessage]) -> set[str]:
    """Ids of the last response's calls that already have a result, retry prompt or denial."""
    index = _last_response_index(messages)
    if index is None:
        return set()
    return {
        part.tool_call_id
        for message in messages[index + 1 :]
        for part in message.parts
        if isinstance(part, ToolReturnPart | ToolDeniedPart | RetryPromptPart) and part.tool_call_id
    }


def pending_tool_calls(messages: Sequence[ModelMessage]) -> dict[str, ToolCallPart]:
    """The last response's tool calls that have no result yet: the calls a paused run waits on."""
    index = _last_response_index(messages)
    if index is None:
        return {}
    response = messages[index]
    assert isinstance(response, ModelResponse)
    resolved = resolved_ids(messages)
    return {c.tool_call_id: c for c in response.tool_calls if c.tool_call_id not in resolved}


def call_outcomes(messages: Iterable[ModelMessage], executing: Collection[str]) -> dict[str, tuple[CallStatus, Any]]:
    """The outcomes of the approved calls in `executing` that `messages` (in the view model) report, by tool call id.

    A call succeeded with its tool's result, or failed with the retry message the model read;
    a call of `executing` the messages do not settle is left out, and so is any other call. The
    store writes these as given (`store.runs.append_step`, `pause`, `finish`): it never reads a history.
    """
    outcomes: dict[str, tuple[CallStatus, Any]] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    if part.source == "tool" and part.tool_call_id in executing:
                        outcomes[part.tool_call_id] = (CallStatus.SUCCEEDED, part.content)
                elif isinstance(part, RetryPromptPart) and part.tool_call_id and part.tool_call_id in executing:
                    outcomes[part.tool_call_id] = (CallStatus.FAILED, part.content)
    return outcomes
