"""OpenAI Agents histories in our store: the SDK's own input items, one stored row an item, read into the view model.

A run's history is what `RunResult.to_input_list()` gives: the SDK's Responses-style input
items (messages, `function_call`, `function_call_output`, reasoning...). Each is stored as it
is, wrapped with our `note` and the time it was stored, so the run page, the audit and the
worker can read it; the SDK itself never reads this history back (it resumes from the
snapshot, `_snapshot`).

The note is what the SDK's items cannot say: every `function_call_output` carries the tool's
name (its call may sit in an earlier write than the output) and who produced the output: the
tool ("result"), a person who denied the call ("denied", with the reason as the person wrote
it), a person who answered in the tool's place ("answered", with their answer), or a call the
model must redo ("retry": its arguments failed the tool's validation, or the tool failed).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ...calls import clock
from .. import view as ours

__all__ = (
    "OPENAI_AGENTS_FORMAT",
    "AgentsItem",
    "Outcome",
    "as_view",
    "dump_message",
    "is_agents_item",
    "load_array",
    "load_message",
)

OPENAI_AGENTS_FORMAT = 1003
"""The format id of a stored OpenAI Agents input item (with our note)."""

Outcome: TypeAlias = Literal["result", "retry", "denied", "answered"]
_RESPONSE_TYPES = frozenset({"function_call", "reasoning"})


def _now() -> dt.datetime:
    return clock.now()


@dataclass(frozen=True, kw_only=True)
class AgentsItem:
    """One SDK input item as stored: the item itself, our note on it, and when it was stored."""

    item: dict[str, Any]
    """The SDK's input item, exactly as `to_input_list()` gave it."""
    note: dict[str, Any] | None = None
    """For a `function_call_output`: {"tool": name, "outcome": Outcome, "reason"/"answer": what a person said}."""
    at: dt.datetime = field(default_factory=_now)

    @property
    def kind(self) -> Literal["request", "response"]:
        """Which side of the conversation said it: the model ("response") or the run ("request")."""
        kind = self.item.get("type")
        if kind in _RESPONSE_TYPES or (isinstance(kind, str) and kind.endswith("_call")):
            return "response"
        if self.item.get("role") == "assistant":
            return "response"
        return "request"

    @property
    def timestamp(self) -> dt.datetime:
        return self.at

    @property
    def call_id(self) -> str | None:
        call_id = self.item.get("call_id")
        return call_id if isinstance(call_id, str) else None


def is_agents_item(message: object) -> bool:
    return isinstance(message, AgentsItem)


def dump_message(message: AgentsItem) -> dict[str, Any]:
    """One stored row: {"item": the SDK's item, "note": ours, "at": ISO time}."""
    return {"item": message.item, "note": message.note, "at": message.at.isoformat()}


def load_message(data: dict[str, Any] | str | bytes) -> AgentsItem:
    raw = json.loads(data) if isinstance(data, str | bytes) else data
    if not isinstance(raw, dict) or not isinstance(raw.get("item"), dict):
        raise ValueError(f"not a stored OpenAI Agents item: {raw!r}")
    at = raw.get("at")
    return AgentsItem(
        item=raw["item"],
        note=raw.get("note"),
        at=dt.datetime.fromisoformat(at) if isinstance(at, str) else _now(),
    )


def load_array(array: str | bytes) -> list[AgentsItem]:
    return [load_message(row) for row in json.loads(array)]


def as_view(messages: Iterable[Any]) -> list[ours.ModelRequest | ours.ModelResponse]:
    """The history in the view model: consecutive items of one side make one request or response.

    Messages already in the view model pass through unchanged.
    """
    view: list[ours.ModelRequest | ours.ModelResponse] = []
    parts: list[Any] = []
    side: str | None = None
    started: dt.datetime | None = None

    def flush() -> None:
        if parts and side == "response":
            view.append(ours.ModelResponse(parts=list(parts), timestamp=started or _now()))
        elif parts:
            view.append(ours.ModelRequest(parts=list(parts)))
        parts.clear()

    for message in messages:
        if isinstance(message, ours.ModelRequest | ours.ModelResponse):
            flush()
            side = None
            view.append(message)
            continue
        if not isinstance(message, AgentsItem):
            raise TypeError(f"not an OpenAI Agents item: {type(message).__name__}")
        if message.kind != side:
            flush()
            side, started = message.kind, message.at
        part = _part(message)
        if part is not None:
            parts.append(part)
    flush()
    return view


def _part(message: AgentsItem) -> Any:
    item, kind = message.item, message.item.get("type")
    if kind == "function_call":
        return ours.ToolCallPart(
            tool_name=str(item.get("name", "")), args=item.get("arguments"), tool_call_id=str(item.get("call_id"))
        )
    if kind == "function_call_output":
        return _output_part(message)
    if kind == "reasoning":
        summary = "\n".join(str(s.get("text", "")) for s in item.get("summary") or [] if isinstance(s, dict))
        return ours.ThinkingPart(content=summary) if summary else None
    role = item.get("role")
    if kind not in (None, "message") or role is None:
        return None  # hosted tools, computer calls and the like: nothing our pages or store act on
    text = _text(item.get("content"))
    if role == "assistant":
        return ours.TextPart(content=text)
    if role in ("system", "developer"):
        return ours.SystemPromptPart(content=text, timestamp=message.at)
    return ours.UserPromptPart(content=text, timestamp=message.at)


def _output_part(message: AgentsItem) -> Any:
    """A call's output, by who produced it (our note): a result, a person's answer or denial, or a retry."""
    note = message.note or {}
    call_id, tool = str(message.item.get("call_id")), str(note.get("tool", ""))
    output = message.item.get("output")
    outcome = note.get("outcome", "result")
    if outcome == "denied":
        return ours.ToolDeniedPart(
            tool_name=tool, tool_call_id=call_id, reason=str(note.get("reason", "")), timestamp=message.at
        )
    if outcome == "retry":
        return ours.RetryPromptPart(content=_text(output), tool_name=tool, tool_call_id=call_id, timestamp=message.at)
    answered = outcome == "answered"
    return ours.ToolReturnPart(
        tool_name=tool,
        content=note.get("answer") if answered else output,
        tool_call_id=call_id,
        source="reviewer" if answered else "tool",
        timestamp=message.at,
    )


def _text(content: Any) -> str:
    """A message's or output's content as text: a string, or the text of its content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            elif isinstance(part, dict):
                texts.append(f"[{part.get('type', 'content')}]")
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, default=str)
