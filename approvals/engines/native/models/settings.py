"""`ModelSettings`: what a run may tell the provider, checked by name and type before anything is sent.

The names follow pydantic-ai's `ModelSettings` where it has them, so its users can move
their settings over as they are. Agent settings are the defaults; a run's settings
override them key by key. A misspelt or mistyped setting is an error at once, never
silently dropped.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import pydantic
from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

from ....exceptions import UserError

__all__ = ("ModelSettings", "ToolChoice", "check_model_settings", "forced_tool_choice", "merge_model_settings")

ToolChoice: TypeAlias = Literal["auto", "none", "required"] | str
"""`"auto"`: the model decides; `"none"`: text only; `"required"`: some tool; any other
string: the tool of that name."""


@with_config(ConfigDict(extra="forbid"))
class ModelSettings(TypedDict, total=False):
    """Settings passed to the provider; each adapter sends those its API supports.

    OpenAI-compatible servers take all of them but `anthropic_thinking`. Anthropic takes
    `max_tokens`, `timeout`, `stop_sequences`, `tool_choice`, `parallel_tool_calls`,
    `anthropic_thinking`, `extra_headers` and `extra_body`.
    """

    max_tokens: int
    """Most tokens to generate in one response."""
    temperature: float
    top_p: float
    timeout: float
    """Seconds to wait for one model request."""
    parallel_tool_calls: bool
    seed: int
    """For providers that sample deterministically given a seed (OpenAI, llama.cpp, vLLM)."""
    presence_penalty: float
    frequency_penalty: float
    logit_bias: dict[str, int]
    stop_sequences: list[str]
    tool_choice: ToolChoice
    """Which tool the model must call, when tools are offered; `"auto"` when not set.

    A forcing choice (`"required"` or a tool's name) holds until a tool call of the run is
    accepted (run, paused or answered); then the agent goes back to `"auto"`, so the model
    can answer (see `Agent(reset_tool_choice=...)`)."""
    anthropic_thinking: dict[str, Any]
    """Anthropic's `thinking` parameter, e.g. `{"type": "enabled", "budget_tokens": 2048}`."""
    extra_headers: dict[str, str]
    """Sent as HTTP headers with each request."""
    extra_body: dict[str, Any]
    """Merged into the JSON body of each request: provider fields this library has no name for."""


_settings_adapter: TypeAdapter[ModelSettings] = TypeAdapter(ModelSettings)


def check_model_settings(settings: Any, *, where: str = "model_settings") -> ModelSettings | None:
    """`settings` checked against `ModelSettings`; `UserError` names each unknown or mistyped key."""
    if settings is None:
        return None
    try:
        return _settings_adapter.validate_python(settings, strict=False)
    except pydantic.ValidationError as exc:
        known = ", ".join(ModelSettings.__annotations__)
        problems = "; ".join(
            f"unknown setting {'.'.join(map(str, e['loc']))!r}"
            if e["type"] == "extra_forbidden"
            else f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise UserError(f"Invalid {where}: {problems} (known settings: {known})") from None


def merge_model_settings(*layers: ModelSettings | None) -> ModelSettings | None:
    """Later layers override earlier ones key by key; None when nothing is set."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return ModelSettings(**merged) if merged else None  # type: ignore[typeddict-item]


def forced_tool_choice(choice: ToolChoice | None) -> bool:
    """Whether `choice` obliges the model to call a tool."""
    return choice is not None and choice not in ("auto", "none")
