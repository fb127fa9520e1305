"""LangGraph runs' histories in our store: LangChain messages in LangChain's JSON, read into the view model.

One stored row a message, written by `messages_to_dict` and read by `messages_from_dict`, so
the stored history is the agent's `messages` channel as LangChain itself serializes it. In
memory each is held in a `StoredMessage`, which adds the one thing the store reads of a
message, its side (`kind`: a request to the model, or its response). The run page, the audit
and the worker read the history through `view`: a human message is a user prompt, an AI
message its text and tool calls, a tool message a tool's result, a person's answer, a denial
or a retry. Which one a tool message is, LangChain's own marks say: `HumanInTheLoopMiddleware`
stamps the messages it writes for a reviewer's decision (`additional_kwargs["lc_source"] ==
"hitl_interrupt_decision"`, `lc_data["decision"]` is `reject` or `respond`), and `ToolNode`
reports a failed call with `status="error"`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)

from .. import view as ours

__all__ = (
    "HITL_SOURCE",
    "LANGGRAPH_FORMAT",
    "RETRY_PREFIX",
    "StoredMessage",
    "ToolOutcome",
    "dump_message",
    "is_langchain_message",
    "load_array",
    "load_message",
    "tool_outcome",
    "unwrap",
    "view",
)

LANGGRAPH_FORMAT = 1002
"""The format id of a stored message written in LangChain's own JSON (`messages_to_dict`)."""
HITL_SOURCE = "hitl_interrupt_decision"
"""`additional_kwargs["lc_source"]` of the tool messages `HumanInTheLoopMiddleware` writes for a decision."""
RETRY_PREFIX = "Error invoking tool "
"""How `ToolNode` starts the message for arguments its tool refused (`TOOL_INVOCATION_ERROR_TEMPLATE`)."""
_REJECTED = "User rejected the tool call for `{name}` with reason: "
"""How the middleware frames a reject decision's message (`_answer_message`)."""
_EDITED = "\n\nTool response:\n"
"""What separates the middleware's edit notice from the tool's own result (`_notice`)."""

ToolOutcome = tuple[Literal["result", "answer", "denied", "retry"], str]


@dataclass(frozen=True)
class StoredMessage:
    """A LangChain message of a run's history, as the store holds it: the message, and which side said it."""

    message: BaseMessage

    @property
    def kind(self) -> Literal["request", "response"]:
        return "response" if isinstance(self.message, AIMessage) else "request"


def is_langchain_message(message: object) -> bool:
    return isinstance(message, StoredMessage | BaseMessage)


def unwrap(message: StoredMessage | BaseMessage) -> BaseMessage:
    return message.message if isinstance(message, StoredMessage) else message


def dump_message(message: StoredMessage | BaseMessage) -> dict[str, Any]:
    """One message as LangChain serializes it: `{"type": ..., "data": {...}}`."""
    dumped: dict[str, Any] = messages_to_dict([unwrap(message)])[0]
    return dumped


def load_message(data: dict[str, Any] | str | bytes) -> StoredMessage:
    loaded = json.loads(data) if isinstance(data, str | bytes) else data
    return StoredMessage(messages_from_dict([loaded])[0])


def load_array(array: str | bytes) -> list[StoredMessage]:
    return [StoredMessage(message) for message in messages_from_dict(json.loads(array))]


def tool_outcome(message: ToolMessage) -> ToolOutcome:
    """What a tool message told the model: a tool's result, a person's answer, a denial's reason, or a retry.

    A reject decision whose message is `ToolNode`'s own retry text is the engine's: arguments
    the tool's schema refused, sent back to the model before anyone was asked.
    """
    text = str(message.text)
    marks = message.additional_kwargs
    if marks.get("lc_source") == HITL_SOURCE:
        data = marks.get("lc_data")
        decision = data.get("decision") if isinstance(data, dict) else None
        if decision == "respond":
            return "answer", text
        framed = _REJECTED.format(name=message.name)
        reason = text.removeprefix(framed) if text.startswith(framed) else text
        return ("retry" if reason.startswith(RETRY_PREFIX) else "denied"), reason
    if message.status == "error":
        return "retry", text
    if " Executed instead: " in text and _EDITED in text:
        return "result", text.split(_EDITED, 1)[1]  # a reviewer's edit ran: the tool's result after the notice
    return "result", text


def view(messages: Iterable[Any]) -> list[ours.ModelRequest | ours.ModelResponse]:
    """The messages in the view model; consecutive tool messages make one request, as the model read them."""
    viewed: list[ours.ModelRequest | ours.ModelResponse] = []
    for message in messages:
        if isinstance(message, ours.ModelRequest | ours.ModelResponse):
            viewed.append(message)
            continue
        if isinstance(message, StoredMessage):
            message = message.message
        if isinstance(message, AIMessage):
            viewed.append(_response(message))
            continue
        part = _request_part(message)
        if part is None:
            continue
        last = viewed[-1] if viewed else None
        if isinstance(message, ToolMessage) and isinstance(last, ours.ModelRequest) and _only_outcomes(last):
            last.parts.append(part)
            continue
        viewed.append(ours.ModelRequest(parts=[part]))
    return viewed


def _only_outcomes(request: ours.ModelRequest) -> bool:
    outcomes = ours.ToolReturnPart | ours.ToolDeniedPart | ours.RetryPromptPart
    return bool(request.parts) and all(isinstance(part, outcomes) for part in request.parts)


def _response(message: AIMessage) -> ours.ModelResponse:
    parts: list[Any] = []
    if message.text:
        parts.append(ours.TextPart(content=str(message.text)))
    parts.extend(
        ours.ToolCallPart(tool_name=call["name"], args=call["args"], tool_call_id=call["id"] or "")
        for call in message.tool_calls
    )
    usage = message.usage_metadata
    return ours.ModelResponse(
        parts=parts,
        usage=ours.Usage(
            requests=1,
            input_tokens=usage["input_tokens"] if usage else 0,
            output_tokens=usage["output_tokens"] if usage else 0,
        ),
        model_name=message.response_metadata.get("model_name"),
        finish_reason=message.response_metadata.get("finish_reason"),
    )


def _request_part(message: BaseMessage) -> Any:
    if isinstance(message, HumanMessage):
        return ours.UserPromptPart(content=str(message.text))
    if isinstance(message, SystemMessage):
        return ours.SystemPromptPart(content=str(message.text))
    if not isinstance(message, ToolMessage):
        return None  # function and chat messages: nothing a create_agent run writes
    name, call_id = message.name or "", message.tool_call_id
    kind, content = tool_outcome(message)
    if kind == "denied":
        return ours.ToolDeniedPart(tool_name=name, tool_call_id=call_id, reason=content)
    if kind == "retry":
        return ours.RetryPromptPart(content=content, tool_name=name, tool_call_id=call_id)
    return ours.ToolReturnPart(
        tool_name=name, content=content, tool_call_id=call_id, source="reviewer" if kind == "answer" else "tool"
    )
