"""pydantic-ai histories in our store: kept in pydantic-ai's own JSON, read through our message types.

A pydantic-ai run's messages are stored exactly as `ModelMessagesTypeAdapter` writes them, so
pydantic-ai (and its tools) can continue the run from the store. Everything of ours that reads
a history (the worker's pending calls and call outcomes, the run page, the API) reads the same
messages through `as_approvals_messages`: a view in our types, never stored. `engine.py` makes
these functions the pydantic-ai engine's history codec.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pydantic_core
from pydantic import TypeAdapter
from pydantic_ai import messages as pai

from .. import view as ours

__all__ = (
    "ANSWERED_MARK",
    "PYDANTIC_AI_FORMAT",
    "as_approvals_message",
    "as_approvals_messages",
    "dump_message",
    "is_pydantic_ai_message",
    "load_array",
    "load_message",
)

PYDANTIC_AI_FORMAT = 1001
"""The format version of a stored message written in pydantic-ai's own JSON."""
ANSWERED_MARK = "approvals:answered"
"""Key in a `ToolReturnPart.metadata` we set when a person answered in the tool's place."""

_message: TypeAdapter[pai.ModelMessage] = TypeAdapter(pai.ModelMessage)


def is_pydantic_ai_message(message: object) -> bool:
    return isinstance(message, pai.ModelRequest | pai.ModelResponse)


def dump_message(message: pai.ModelMessage) -> dict[str, Any]:
    """One message as pydantic-ai serializes it (`ModelMessagesTypeAdapter` writes a list of these)."""
    dumped: dict[str, Any] = _message.dump_python(message, mode="json")
    return dumped


def load_message(data: dict[str, Any] | str | bytes) -> pai.ModelMessage:
    if isinstance(data, str | bytes):
        return _message.validate_json(data)
    return _message.validate_python(data)


def load_array(array: str | bytes) -> list[pai.ModelMessage]:
    """A JSON array of stored messages, parsed by pydantic-ai in one pass."""
    return list(pai.ModelMessagesTypeAdapter.validate_json(array))


def as_approvals_messages(messages: Iterable[Any]) -> list[ours.ModelRequest | ours.ModelResponse]:
    """A history in our types; messages already ours pass through unchanged.

    pydantic-ai repeats the instructions on every request; they are shown where they change.
    """
    view: list[ours.ModelRequest | ours.ModelResponse] = []
    instructions = None
    for message in messages:
        view.append(as_approvals_message(message, shown_instructions=instructions))
        if isinstance(message, pai.ModelRequest) and message.instructions:
            instructions = message.instructions
    return view


def as_approvals_message(
    message: Any, *, shown_instructions: str | None = None
) -> ours.ModelRequest | ours.ModelResponse:
    """One message in our types: what it says to the model, who answered each call, and usage.

    A request's instructions become a system prompt part unless they are `shown_instructions`.
    """
    if isinstance(message, ours.ModelRequest | ours.ModelResponse):
        return message
    if isinstance(message, pai.ModelResponse):
        return ours.ModelResponse(
            parts=[p for p in map(_response_part, message.parts) if p is not None],
            usage=ours.Usage(
                requests=1, input_tokens=message.usage.input_tokens, output_tokens=message.usage.output_tokens
            ),
            model_name=message.model_name,
            finish_reason=message.finish_reason,
            timestamp=message.timestamp,
            run_id=message.run_id,
        )
    if isinstance(message, pai.ModelRequest):
        parts = [p for p in map(_request_part, message.parts) if p is not None]
        if message.instructions and message.instructions != shown_instructions:
            instructions = ours.SystemPromptPart(content=message.instructions)
            if message.timestamp is not None:
                instructions.timestamp = message.timestamp
            parts.insert(0, instructions)
        return ours.ModelRequest(parts=parts, run_id=message.run_id)
    raise TypeError(f"not a message: {type(message).__name__}")


def _response_part(part: Any) -> ours.TextPart | ours.ThinkingPart | ours.ToolCallPart | None:
    if isinstance(part, pai.TextPart):
        return ours.TextPart(content=part.content)
    if isinstance(part, pai.ThinkingPart):
        return ours.ThinkingPart(content=part.content, signature=part.signature, provider_name=part.provider_name)
    if isinstance(part, pai.BaseToolCallPart):
        return ours.ToolCallPart(tool_name=part.tool_name, args=part.args, tool_call_id=part.tool_call_id)
    return None  # files, native tool results and the like: nothing our pages or store act on


def _request_part(part: Any) -> Any:
    if isinstance(part, pai.SystemPromptPart):
        return ours.SystemPromptPart(content=part.content, timestamp=part.timestamp)
    if isinstance(part, pai.UserPromptPart):
        return ours.UserPromptPart(content=_text(part.content), timestamp=part.timestamp)
    if isinstance(part, pai.RetryPromptPart):
        return ours.RetryPromptPart(
            content=part.model_response(),
            tool_name=part.tool_name,
            tool_call_id=part.tool_call_id,
            timestamp=part.timestamp,
        )
    if isinstance(part, pai.BaseToolReturnPart):
        return _tool_return(part)
    return None


def _tool_return(part: pai.BaseToolReturnPart[Any]) -> Any:
    """pydantic-ai's one return part, by `outcome`: a result, a person's answer or denial, or a retry."""
    outcome = getattr(part, "outcome", "success")
    if outcome == "denied":
        return ours.ToolDeniedPart(
            tool_name=part.tool_name,
            tool_call_id=part.tool_call_id,
            reason=_text(part.content),
            timestamp=part.timestamp,
        )
    if outcome in ("retried", "failed", "interrupted"):
        return ours.RetryPromptPart(
            content=_text(part.content),
            tool_name=part.tool_name,
            tool_call_id=part.tool_call_id,
            timestamp=part.timestamp,
        )
    answered = isinstance(part.metadata, dict) and part.metadata.get(ANSWERED_MARK) is True
    return ours.ToolReturnPart(
        tool_name=part.tool_name,
        content=pydantic_core.to_jsonable_python(part.content, fallback=str),
        tool_call_id=part.tool_call_id,
        metadata=None if answered else pydantic_core.to_jsonable_python(part.metadata, fallback=str),
        source="reviewer" if answered else "tool",
        timestamp=part.timestamp,
    )


def _text(content: Any) -> str:
    """Prompt or tool content as text; multimodal items are named, not inlined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and all(isinstance(item, str) or hasattr(item, "kind") for item in content):
        return "\n".join(item if isinstance(item, str) else f"[{type(item).__name__}]" for item in content)
    return json.dumps(pydantic_core.to_jsonable_python(content, fallback=str), ensure_ascii=False)
