"""The message history of a run: requests to the model and its responses, made of typed parts.

A history is a list of `ModelRequest` and `ModelResponse`. Every part carries a `part_kind`
discriminator, so a stored history loads back into exactly the same objects
(`dump_messages` / `load_messages`, with a format version for later upgrades). Tool
results keep app-only `metadata` apart from what the model reads, and a person's denial
is its own part, so no provider adapter can mistake it for a tool's output.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, cast

import pydantic
import pydantic_core
from pydantic import Discriminator, TypeAdapter

from ...calls import clock
from ...exceptions import UserError

if TYPE_CHECKING:
    from .. import HistoryCodec

__all__ = (
    "MESSAGE_FORMAT_VERSION",
    "ModelMessage",
    "ModelRequest",
    "ModelRequestPart",
    "ModelResponse",
    "ModelResponsePart",
    "RetryPromptPart",
    "SystemPromptPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolDeniedPart",
    "ToolReturnPart",
    "Usage",
    "UserPromptPart",
    "dump_message",
    "as_approvals_messages",
    "dump_messages",
    "format_version_of",
    "load_message",
    "load_message_array",
    "load_messages",
    "model_facing_content",
)

MESSAGE_FORMAT_VERSION = 1
"""Version of the stored JSON shape; `load_messages` upgrades older versions."""


def _now() -> dt.datetime:
    return clock.now()


@dataclass(kw_only=True, slots=True)
class SystemPromptPart:
    """Instructions for the model, sent first."""

    content: str
    timestamp: dt.datetime = field(default_factory=_now)
    part_kind: Literal["system-prompt"] = "system-prompt"


@dataclass(kw_only=True, slots=True)
class UserPromptPart:
    """What the user asked."""

    content: str
    timestamp: dt.datetime = field(default_factory=_now)
    part_kind: Literal["user-prompt"] = "user-prompt"


@dataclass(kw_only=True, slots=True)
class ToolReturnPart:
    """The result of a tool call, sent back to the model."""

    tool_name: str
    content: Any
    """JSON-compatible result the model reads."""
    tool_call_id: str
    metadata: Any = None
    """App-only data from `ToolReturn.metadata`; never sent to the model."""
    source: Literal["tool", "reviewer", "not-run"] = "tool"
    """Who produced the result: the tool ran; a person answered instead; or the call was skipped."""
    args_override: dict[str, Any] | None = None
    """The arguments a reviewer substituted before approving, when they edited them."""
    timestamp: dt.datetime = field(default_factory=_now)
    part_kind: Literal["tool-return"] = "tool-return"


@dataclass(kw_only=True, slots=True)
class RetryPromptPart:
    """Tells the model what was wrong with a tool call or its output, so it can try again."""

    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None
    timestamp: dt.datetime = field(default_factory=_now)
    part_kind: Literal["retry-prompt"] = "retry-prompt"


@dataclass(kw_only=True, slots=True)
class ToolDeniedPart:
    """A person refused a tool call; the model reads this instead of a result."""

    tool_name: str
    tool_call_id: str
    reason: str
    """The reviewer's reason, passed on to the model."""
    timestamp: dt.datetime = field(default_factory=_now)
    part_kind: Literal["tool-denied"] = "tool-denied"


@dataclass(kw_only=True, slots=True)
class TextPart:
    """Text from the model."""

    content: str
    part_kind: Literal["text"] = "text"


@dataclass(kw_only=True, slots=True)
class ThinkingPart:
    """The model's reasoning, as the provider returned it.

    Kept in the history because some providers need it back: Anthropic requires the
    thinking blocks of a turn with tool calls, unchanged and with their `signature`, when
    the conversation continues. A redacted block has empty `content` and its encrypted
    data in `signature`. Adapters for providers that do not take reasoning back skip it.
    """

    content: str
    signature: str | None = None
    redacted: bool = False
    provider_name: str | None = None
    """The provider that wrote it; only that provider is sent it back."""
    part_kind: Literal["thinking"] = "thinking"


@dataclass(kw_only=True, slots=True)
class ToolCallPart:
    """The model asks to call a tool."""

    tool_name: str
    args: str | dict[str, Any] | None
    """As the model sent them: a JSON string or an object."""
    tool_call_id: str
    part_kind: Literal["tool-call"] = "tool-call"

    def args_as_dict(self) -> dict[str, Any]:
        """The arguments parsed into a dict (not validated); malformed JSON gives `{}`."""
        if isinstance(self.args, dict):
            return self.args
        if not self.args:
            return {}
        try:
            parsed = json.loads(self.args)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def args_as_json(self) -> str:
        """The arguments as JSON text."""
        if isinstance(self.args, str):
            return self.args or "{}"
        return json.dumps(self.args or {}, ensure_ascii=False)


ModelRequestPart: TypeAlias = Annotated[
    SystemPromptPart | UserPromptPart | ToolReturnPart | RetryPromptPart | ToolDeniedPart,
    Discriminator("part_kind"),
]
ModelResponsePart: TypeAlias = Annotated[TextPart | ThinkingPart | ToolCallPart, Discriminator("part_kind")]


@dataclass(kw_only=True, slots=True)
class Usage:
    """Token and request counts; adds up across a run."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def incr(self, other: Usage) -> None:
        """Add another usage into this one."""
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.tool_calls += other.tool_calls


@dataclass(kw_only=True, slots=True)
class ModelRequest:
    """What is sent to the model: prompts, tool results, retry prompts, denials."""

    parts: list[ModelRequestPart]
    run_id: str | None = None
    kind: Literal["request"] = "request"


@dataclass(kw_only=True, slots=True)
class ModelResponse:
    """What the model answered: text and tool calls."""

    parts: list[ModelResponsePart]
    usage: Usage = field(default_factory=Usage)
    model_name: str | None = None
    finish_reason: str | None = None
    timestamp: dt.datetime = field(default_factory=_now)
    run_id: str | None = None
    kind: Literal["response"] = "response"

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def text(self) -> str:
        """All text parts joined."""
        return "".join(p.content for p in self.parts if isinstance(p, TextPart))


ModelMessage: TypeAlias = Annotated[ModelRequest | ModelResponse, Discriminator("kind")]

_message_adapter: TypeAdapter[ModelRequest | ModelResponse] = TypeAdapter(ModelMessage)
_history_adapter: TypeAdapter[list[ModelRequest | ModelResponse]] = TypeAdapter(list[ModelMessage])


@functools.cache
def _registry() -> ModuleType:
    """The engine registry (`approvals.engines`), imported when a message not ours is first met."""
    from ... import engines

    return engines


def _foreign_codec(message: object) -> HistoryCodec:
    """The codec of the engine a message not ours belongs to, loaded if need be."""
    codec: HistoryCodec = _registry().codec_of(message)
    return codec


def _codec_for_format(format_version: int) -> HistoryCodec:
    """The codec of the engine that stores messages in `format_version`, a format not ours."""
    codec: HistoryCodec = _registry().codec_for_format(format_version)
    return codec


def _is_ours(format_version: int) -> bool:
    """Whether a stored message's format is one of ours (current, or older ones `_upgrade_message` brings up)."""
    return 1 <= format_version <= MESSAGE_FORMAT_VERSION


def dump_message(message: ModelRequest | ModelResponse) -> dict[str, Any]:
    """One message as JSON-compatible data (for one stored row); another engine's message in its engine's JSON."""
    if not isinstance(message, ModelRequest | ModelResponse):
        return _foreign_codec(message).dump_message(message)
    dumped: dict[str, Any] = _message_adapter.dump_python(message, mode="json")
    return dumped


def as_approvals_messages(messages: Sequence[Any]) -> list[ModelRequest | ModelResponse]:
    """A history as our message types, for reading it: another engine's run's converted, ours as they are."""
    if all(isinstance(m, ModelRequest | ModelResponse) for m in messages):
        return list(messages)
    foreign = next(m for m in messages if not isinstance(m, ModelRequest | ModelResponse))
    return _foreign_codec(foreign).view(messages)


def format_version_of(messages: Sequence[Any]) -> int:
    """The format the messages of one write are stored in: ours, or their engine's (another engine's run)."""
    if messages and not isinstance(messages[0], ModelRequest | ModelResponse):
        return _foreign_codec(messages[0]).format_version
    return MESSAGE_FORMAT_VERSION


def load_message(
    data: dict[str, Any] | str | bytes, *, format_version: int = MESSAGE_FORMAT_VERSION
) -> ModelRequest | ModelResponse:
    """Load one message dumped by `dump_message`, from any supported format version (another engine's too)."""
    if not _is_ours(format_version):
        return cast(ModelRequest | ModelResponse, _codec_for_format(format_version).load_message(data))
    raw = json.loads(data) if isinstance(data, str | bytes) else data
    return _message_adapter.validate_python(_upgrade_message(raw, format_version))


def load_stored_history(
    rows: Iterable[tuple[str | bytes | dict[str, Any], int]],
) -> list[ModelRequest | ModelResponse]:
    """Messages from stored `(JSON text, format version)` rows, in order (see `load_stored_array`)."""
    stored = list(rows)
    if all(isinstance(data, str) for data, _ in stored):
        texts = cast(list[str], [data for data, _ in stored])
        return load_stored_array("[" + ",".join(texts) + "]", [version for _, version in stored])
    return [load_message(data, format_version=version) for data, version in stored]


def load_message_array(array: str | bytes) -> list[ModelRequest | ModelResponse]:
    """Messages in the current format from one JSON array of them, parsed and validated in one pass."""
    return _history_adapter.validate_json(array)


def load_stored_array(array: str | bytes, versions: Sequence[int]) -> list[ModelRequest | ModelResponse]:
    """Stored messages from one JSON array of them, with each one's format version.

    When every message is in the current format, the array is parsed and validated in one
    pass (pydantic-core's `validate_json`): a resume that loads a long history pays for one
    parse, not one `json.loads` and one validation per message. Another engine's history
    (all in its format) is read by its codec, in one pass too.
    """
    if all(version == MESSAGE_FORMAT_VERSION for version in versions):
        return _history_adapter.validate_json(array)
    first = versions[0]
    if not _is_ours(first) and all(version == first for version in versions):
        return cast(list[ModelRequest | ModelResponse], _codec_for_format(first).load_array(array))
    return [
        load_message(data, format_version=version) for data, version in zip(json.loads(array), versions, strict=True)
    ]


def dump_messages(messages: Sequence[ModelRequest | ModelResponse]) -> bytes:
    """A whole history as JSON, with its format version."""
    return pydantic_core.to_json(
        {
            "format_version": MESSAGE_FORMAT_VERSION,
            "messages": _history_adapter.dump_python(list(messages), mode="json"),
        }
    )


def load_messages(data: str | bytes | dict[str, Any]) -> list[ModelRequest | ModelResponse]:
    """Load a history dumped by `dump_messages` (any supported format version)."""
    raw = json.loads(data) if isinstance(data, str | bytes) else data
    if not isinstance(raw, dict) or "messages" not in raw:
        raise UserError("Not a stored message history: expected an object with 'format_version' and 'messages'")
    version = raw.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= MESSAGE_FORMAT_VERSION:
        raise UserError(
            f"Message history format version {version!r} is not supported "
            f"(this version of approvals reads 1 to {MESSAGE_FORMAT_VERSION})"
        )
    try:
        return _history_adapter.validate_python([_upgrade_message(m, version) for m in raw["messages"]])
    except pydantic.ValidationError as exc:
        raise UserError(f"Stored message history is malformed: {exc}") from exc


def _upgrade_message(message: dict[str, Any], version: int) -> dict[str, Any]:
    """Bring a message stored in an older format up to the current one (none needed yet)."""
    if version > MESSAGE_FORMAT_VERSION:
        raise UserError(f"Message format version {version} is newer than this version of approvals understands")
    return message


def model_facing_content(part: ToolReturnPart | ToolDeniedPart | RetryPromptPart) -> str:
    """The text a provider adapter sends the model for a tool result, denial or retry prompt.

    One wording for every provider: a denial says plainly that a person refused and that
    the same call will not be accepted, so the model does not simply try again.
    """
    if isinstance(part, ToolDeniedPart):
        reason = part.reason.strip()
        if reason and reason[-1] not in ".!?":
            reason += "."
        return (
            f"DENIED: a person reviewed this call to {part.tool_name!r} and did not allow it. "
            f"Reason: {reason} "
            "The call was not executed. Do not repeat the same call; take the reason into account, "
            "and tell the user if you cannot continue without it."
        )
    if isinstance(part, RetryPromptPart):
        return part.content
    text = part.content if isinstance(part.content, str) else json.dumps(part.content, ensure_ascii=False)
    if part.source == "reviewer":
        return f"A person answered this call on the tool's behalf (the tool was not run): {text}"
    if part.args_override is not None:
        edited = json.dumps(part.args_override, ensure_ascii=False)
        return f"A person edited the arguments before approving; the call ran with {edited}. Result: {text}"
    return text
