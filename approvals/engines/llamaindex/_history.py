"""LlamaIndex histories in our store: one `ChatMessage` a row, in its own JSON, read into the view model.

The messages are those the agent's model reads (its memory and scratchpad): the prompt, each
assistant message with its `ToolCallBlock`s, and each tool result as a `role="tool"` message
carrying `tool_call_id`. LlamaIndex hands a tool's output to the model as text only, so the
engine adds one key of its own to each stored tool message (`MARK`): the tool's name and what
the call came to (a result, a person's answer, a denial, or a tool error the model retried
after). These stored copies are only read (the run page, the audit, the worker); the run itself
continues from the LlamaIndex context in the run's snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from pydantic import TypeAdapter

from .. import view as ours

__all__ = (
    "LLAMAINDEX_FORMAT",
    "MARK",
    "Outcome",
    "StoredMessage",
    "as_view",
    "dump_message",
    "is_llamaindex_message",
    "load_array",
    "load_message",
    "text_of",
    "tool_message",
    "unwrap",
)

LLAMAINDEX_FORMAT = 1004
"""The format id of a stored message written as LlamaIndex's `ChatMessage.model_dump(mode="json")`."""
MARK = "approvals"
"""Key in a stored tool message's `additional_kwargs`: `{"tool_name", "outcome", "reason"?}`."""
Outcome = Literal["result", "answered", "denied", "error"]

_messages: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])


@dataclass(frozen=True)
class StoredMessage:
    """A `ChatMessage` of a run's history as the store holds it: the message, and which side said it."""

    message: ChatMessage

    @property
    def kind(self) -> Literal["request", "response"]:
        return "response" if self.message.role == MessageRole.ASSISTANT else "request"


def unwrap(message: StoredMessage | ChatMessage) -> ChatMessage:
    return message.message if isinstance(message, StoredMessage) else message


def is_llamaindex_message(message: object) -> bool:
    return isinstance(message, StoredMessage | ChatMessage)


def dump_message(message: StoredMessage | ChatMessage) -> dict[str, Any]:
    dumped: dict[str, Any] = unwrap(message).model_dump(mode="json")
    return dumped


def load_message(data: dict[str, Any] | str | bytes) -> StoredMessage:
    if isinstance(data, str | bytes):
        return StoredMessage(ChatMessage.model_validate_json(data))
    return StoredMessage(ChatMessage.model_validate(data))


def load_array(array: str | bytes) -> list[StoredMessage]:
    return [StoredMessage(message) for message in _messages.validate_json(array)]


def tool_message(
    tool_call_id: str, tool_name: str, blocks: list[Any], outcome: Outcome, reason: str | None = None
) -> StoredMessage:
    """A tool result as LlamaIndex's agent puts it in its scratchpad, plus our mark of what it is."""
    mark: dict[str, Any] = {"tool_name": tool_name, "outcome": outcome}
    if reason is not None:
        mark["reason"] = reason
    return StoredMessage(
        ChatMessage(
            role=MessageRole.TOOL, blocks=list(blocks), additional_kwargs={"tool_call_id": tool_call_id, MARK: mark}
        )
    )


def text_of(message: ChatMessage) -> str:
    """A message's text blocks, as the model reads them (other blocks named, not inlined)."""
    parts = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif not isinstance(block, ToolCallBlock):
            parts.append(f"[{block.block_type}]")
    return "".join(parts)


def as_view(messages: Iterable[Any]) -> list[ours.ModelRequest | ours.ModelResponse]:
    """A history in the view model; messages already in it pass through unchanged."""
    view: list[ours.ModelRequest | ours.ModelResponse] = []
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, ours.ModelRequest | ours.ModelResponse):
            view.append(message)
            continue
        if isinstance(message, StoredMessage):
            message = message.message
        if not isinstance(message, ChatMessage):
            raise TypeError(f"not a message: {type(message).__name__}")
        if message.role == MessageRole.ASSISTANT:
            response = _response(message)
            names.update({part.tool_call_id: part.tool_name for part in response.tool_calls})
            view.append(response)
        elif message.role == MessageRole.TOOL:
            view.append(ours.ModelRequest(parts=[_tool_part(message, names)]))
        elif message.role in (MessageRole.SYSTEM, MessageRole.DEVELOPER):
            view.append(ours.ModelRequest(parts=[ours.SystemPromptPart(content=text_of(message))]))
        else:
            view.append(ours.ModelRequest(parts=[ours.UserPromptPart(content=text_of(message))]))
    return view


def _response(message: ChatMessage) -> ours.ModelResponse:
    parts: list[Any] = []
    text = text_of(message)
    if text:
        parts.append(ours.TextPart(content=text))
    calls = [block for block in message.blocks if isinstance(block, ToolCallBlock)]
    for block in calls:
        parts.append(
            ours.ToolCallPart(tool_name=block.tool_name, args=block.tool_kwargs, tool_call_id=block.tool_call_id or "")
        )
    if not calls:  # an integration that keeps OpenAI's tool calls in `additional_kwargs`
        for call in message.additional_kwargs.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            if function:
                parts.append(
                    ours.ToolCallPart(
                        tool_name=function.get("name", ""),
                        args=function.get("arguments"),
                        tool_call_id=call.get("id", ""),
                    )
                )
    return ours.ModelResponse(parts=parts)


def _tool_part(message: ChatMessage, names: dict[str, str]) -> Any:
    """A tool message by its mark: a result, a person's answer or denial, or an error the model retried after."""
    call_id = str(message.additional_kwargs.get("tool_call_id") or "")
    mark = message.additional_kwargs.get(MARK)
    mark = mark if isinstance(mark, dict) else {}
    name = str(mark.get("tool_name") or names.get(call_id, ""))
    text = text_of(message)
    outcome = mark.get("outcome", "result")
    if outcome == "denied":
        return ours.ToolDeniedPart(tool_name=name, tool_call_id=call_id, reason=str(mark.get("reason", text)))
    if outcome == "error":
        return ours.RetryPromptPart(content=text, tool_name=name, tool_call_id=call_id)
    return ours.ToolReturnPart(
        tool_name=name, content=text, tool_call_id=call_id, source="reviewer" if outcome == "answered" else "tool"
    )
