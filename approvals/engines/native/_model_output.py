"""A model's response made storable before anything else sees it.

A model is untrusted input. Some of what it can send cannot be stored or sent back at all:
NUL characters (PostgreSQL's JSONB refuses `\\u0000`), lone surrogates (not valid UTF-8),
and tool call ids that are empty, very long, or used twice (results are matched to calls by
id, and a run's calls are stored under it). Such output once made a run fail at its final
write and be retried forever. Here each bad character becomes U+FFFD, as a UTF-8 decoder
does with bytes it cannot read, and each unusable id is replaced with a fresh one, used
consistently from then on: the model sees its own call and its result under the new id.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from .messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart

__all__ = ("MAX_TOOL_CALL_ID_LENGTH", "storable_response")

MAX_TOOL_CALL_ID_LENGTH = 128
"""Longer ids are replaced (providers' own are 30 to 60 characters; the column holds 200)."""
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_PRINTABLE_ID = re.compile(r"^[\x21-\x7e]+$")


def storable_response(response: ModelResponse, used_ids: AbstractSet[str]) -> ModelResponse:
    """`response` with unstorable characters replaced and unusable ids renewed (used in the run, or twice in it).

    The response is returned as it is when nothing needs changing (the common case).
    `used_ids` is only read: the run's `RunTotals` adds the response's ids once it is in the history.
    """
    own_ids: set[str] = set()
    parts = [_storable_part(part, used_ids, own_ids) for part in response.parts]
    if all(new is old for new, old in zip(parts, response.parts, strict=True)):
        return response
    return replace(response, parts=parts)


def _storable_part(part: Any, used_ids: AbstractSet[str], own_ids: set[str]) -> Any:
    if isinstance(part, TextPart | ThinkingPart):
        content = _clean_text(part.content)
        return part if content is part.content else replace(part, content=content)
    if isinstance(part, ToolCallPart):
        call_id = part.tool_call_id
        if (
            not call_id
            or len(call_id) > MAX_TOOL_CALL_ID_LENGTH
            or not _PRINTABLE_ID.match(call_id)
            or call_id in used_ids
            or call_id in own_ids
        ):
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        own_ids.add(call_id)
        tool_name = _clean_text(part.tool_name)
        args = _clean_args(part.args)
        if call_id is part.tool_call_id and tool_name is part.tool_name and args is part.args:
            return part
        return replace(part, tool_call_id=call_id, tool_name=tool_name, args=args)
    return part


def _clean_text(text: str) -> str:
    """The same string when it is clean; otherwise a copy with NULs and lone surrogates as U+FFFD."""
    if not _UNSTORABLE.search(text):
        return text
    repaired = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # pairs survive, lone halves do not
    return repaired.replace("\x00", "\ufffd")


def _clean_args(args: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(args, dict):
        cleaned: dict[str, Any] = _clean_value(args)
        return cleaned
    if not isinstance(args, str):
        return args
    text = _clean_text(args)
    if "\\u" not in text:
        return text
    try:  # an escaped NUL or surrogate (\\u0000, \\ud800) decodes to the very characters above
        parsed = json.loads(text)
    except ValueError:
        return text
    cleaned = _clean_value(parsed)
    return text if cleaned is parsed else json.dumps(cleaned, ensure_ascii=False)


def _clean_value(value: Any) -> Any:
    """`value` itself when clean; otherwise a cleaned copy of the JSON structure."""
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict):
        items = {_clean_text(k): _clean_value(v) for k, v in value.items()}
        if all(k in value and value[k] is v for k, v in items.items()):
            return value
        return items
    if isinstance(value, list):
        cleaned = [_clean_value(v) for v in value]
        return value if all(a is b for a, b in zip(cleaned, value, strict=True)) else cleaned
    return value
