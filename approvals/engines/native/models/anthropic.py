"""`AnthropicModel`: a run's history and tools over Anthropic's Messages API.

The Messages API is stricter than chat completions: system prompts are a top-level
parameter, roles must alternate user/assistant, and every `tool_result` for one assistant
turn must sit in the very next user message. A run resumed after an approval appends a
second request right after the first, so consecutive turns of one role are merged here,
tool results first. The official async SDK does the HTTP; its errors become
`ModelHTTPError` / `ModelAPIError`.

Sampling settings (`temperature`, `top_p`, `seed`, penalties) are not sent: the 2.x SDK
has no such parameters and the API version it speaks (2026-10-21) answers 400 to them.
Thinking blocks are kept in the history and sent back unchanged, as the API requires on
tool-use turns with extended thinking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, assert_never, cast

from ....exceptions import ModelAPIError, ModelHTTPError, UserError
from ..formats import to_anthropic_tool
from ..messages import (
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    model_facing_content,
)
from ._sdk import LoopBoundClients, endpoint, redact
from .base import Model, ModelRequestParameters, ModelSettings

try:
    import anthropic
    from anthropic import AsyncAnthropic, not_given, omit
    from anthropic.types import (
        ContentBlockParam,
        Message,
        MessageParam,
        ThinkingConfigParam,
        ToolChoiceParam,
        ToolParam,
    )
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides the SDK
    raise UserError("AnthropicModel needs the Anthropic SDK: pip install 'agent-approvals[anthropic]'") from _exc

__all__ = ("DEFAULT_MAX_TOKENS", "AnthropicModel")

DEFAULT_MAX_TOKENS = 4096
"""Sent when the settings give no `max_tokens`; the Messages API requires one."""
PLACEHOLDER_API_KEY = "no-key-needed"
"""Sent to a custom `base_url` when no key is configured; local servers ignore it."""

_Role = Literal["user", "assistant"]


class AnthropicModel(Model):
    """A Claude model through the Messages API.

    `AnthropicModel("claude-sonnet-5-5")` reads `ANTHROPIC_API_KEY` (and `ANTHROPIC_BASE_URL`)
    from the environment. Pass `client` to reuse a configured `anthropic.AsyncAnthropic`
    (then `base_url`, `api_key` and `max_retries` are the client's business).
    """

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncAnthropic | None = None,
        max_retries: int = 2,
    ) -> None:
        self._model_name = model_name
        if client is not None and (base_url is not None or api_key is not None):
            raise UserError("AnthropicModel: pass either `client` or `base_url`/`api_key`, not both")
        custom_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        env_key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if api_key is None and custom_url and not env_key:
            api_key = PLACEHOLDER_API_KEY
        self._clients = LoopBoundClients(
            lambda: AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=max_retries), fixed=client
        )
        template = self._clients.template
        if template.api_key is None and template.auth_token is None and template.credentials is None:
            raise UserError(
                f"No Anthropic credentials for {model_name!r}: set ANTHROPIC_API_KEY, "
                "or pass api_key= or base_url= for a local server"
            )

    @property
    def client(self) -> AsyncAnthropic:
        """The SDK client for the running event loop."""
        return self._clients.current()

    async def close(self) -> None:
        await self._clients.close_current()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return "anthropic"

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """Send the history and tools to `/v1/messages` and map the answer back."""
        settings = settings or {}
        system, turns = map_messages(messages)
        tools = [cast("ToolParam", to_anthropic_tool(t)) for t in params.all_tools]
        client = self.client
        try:
            message = await client.messages.create(
                model=self._model_name,
                max_tokens=settings.get("max_tokens", DEFAULT_MAX_TOKENS),
                messages=turns,
                system=system if system is not None else omit,
                tools=tools or omit,
                tool_choice=(_tool_choice(settings, params) or omit) if tools else omit,
                stop_sequences=settings.get("stop_sequences", omit),
                thinking=cast("ThinkingConfigParam", settings["anthropic_thinking"])
                if "anthropic_thinking" in settings
                else omit,
                timeout=settings.get("timeout", not_given),
                extra_headers=settings.get("extra_headers"),
                extra_body=settings.get("extra_body"),
            )
        except anthropic.APIStatusError as exc:
            body = redact(exc.body, (client.api_key, client.auth_token))
            error = ModelHTTPError(self._model_name, exc.status_code, body)
            raise error from (None if body != exc.body else exc)
        except anthropic.APITimeoutError as exc:
            raise ModelAPIError(self._model_name, f"request to {endpoint(exc.request)} timed out") from exc
        except anthropic.APIConnectionError as exc:
            raise ModelAPIError(self._model_name, f"cannot connect to {endpoint(exc.request)}") from exc
        except Exception as exc:  # the SDK's other failures (bad response, closed loop, ...) must not escape raw
            text = redact(str(exc), (client.api_key, client.auth_token))
            raise ModelAPIError(self._model_name, f"the request failed: {type(exc).__name__}: {text}") from None
        return self._map_response(message)

    def _map_response(self, message: Message) -> ModelResponse:
        parts: list[ModelResponsePart] = []
        for block in message.content:
            if block.type == "text":
                parts.append(TextPart(content=block.text))
            elif block.type == "tool_use":
                parts.append(ToolCallPart(tool_name=block.name, args=dict(block.input), tool_call_id=block.id))
            elif block.type == "thinking":
                parts.append(ThinkingPart(content=block.thinking, signature=block.signature, provider_name=self.system))
            elif block.type == "redacted_thinking":
                parts.append(ThinkingPart(content="", signature=block.data, redacted=True, provider_name=self.system))
            # Server-tool blocks (web search, code execution) have no part of ours yet; they are dropped.
        usage = message.usage
        input_tokens = (
            usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
        )
        return ModelResponse(
            parts=parts,
            usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=usage.output_tokens),
            model_name=message.model or self._model_name,
            finish_reason=message.stop_reason,
        )


def map_messages(messages: Sequence[ModelRequest | ModelResponse]) -> tuple[str | None, list[MessageParam]]:
    """The system prompt (prompts joined by blank lines) and alternating user/assistant turns."""
    system: list[str] = []
    turns: list[tuple[_Role, list[ContentBlockParam]]] = []
    for message in messages:
        role: _Role
        blocks: list[ContentBlockParam]
        if isinstance(message, ModelRequest):
            role, blocks = "user", []
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    system.append(part.content)
                else:
                    blocks.append(_map_request_part(part))
        else:
            role, blocks = "assistant", _map_response_parts(message.parts)
        if not blocks:
            continue  # the API refuses empty turns
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    result: list[MessageParam] = []
    for role, blocks in turns:
        if role == "user":  # every tool_result must come before other content in its message
            results_first: list[ContentBlockParam] = sorted(blocks, key=lambda block: block["type"] != "tool_result")
            result.append({"role": "user", "content": results_first})
        else:
            result.append({"role": "assistant", "content": blocks})
    return ("\n\n".join(system) if system else None), result


def _map_request_part(
    part: UserPromptPart | ToolReturnPart | ToolDeniedPart | RetryPromptPart,
) -> ContentBlockParam:
    if isinstance(part, UserPromptPart):
        return {"type": "text", "text": part.content}
    if isinstance(part, ToolReturnPart):
        return {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": model_facing_content(part)}
    if part.tool_call_id is None:  # a retry prompt about the text output, not a tool call
        return {"type": "text", "text": model_facing_content(part)}
    return {
        "type": "tool_result",
        "tool_use_id": part.tool_call_id,
        "content": model_facing_content(part),
        "is_error": True,
    }


def _map_response_parts(parts: Sequence[ModelResponsePart]) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    for part in parts:
        if isinstance(part, TextPart):
            if part.content:  # the API refuses empty text blocks
                blocks.append({"type": "text", "text": part.content})
        elif isinstance(part, ToolCallPart):
            blocks.append(
                {"type": "tool_use", "id": part.tool_call_id, "name": part.tool_name, "input": part.args_as_dict()}
            )
        elif isinstance(part, ThinkingPart):
            # Sent back unchanged: the API checks the signature, and requires the blocks on tool-use turns.
            if part.provider_name != "anthropic" or part.signature is None:
                continue
            if part.redacted:
                blocks.append({"type": "redacted_thinking", "data": part.signature})
            else:
                blocks.append({"type": "thinking", "thinking": part.content, "signature": part.signature})
        else:
            assert_never(part)
    return blocks


def _tool_choice(settings: ModelSettings, params: ModelRequestParameters) -> ToolChoiceParam | None:
    """The `tool_choice` block: the setting if given, else "any" when only a tool call can end the step.

    None for plain "auto", the API's default (it always shows the model its tools).
    """
    choice = settings.get("tool_choice")
    if choice is None:
        choice = "auto" if params.allow_text_output else "required"
    tool_choice: dict[str, Any]
    if choice == "auto":
        tool_choice = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        tool_choice = {"type": "any"}
    else:
        offered = [t.name for t in params.all_tools]
        if choice not in offered:
            raise UserError(f"tool_choice names tool {choice!r}, which this step does not offer (offered: {offered})")
        tool_choice = {"type": "tool", "name": choice}
    if settings.get("parallel_tool_calls") is False:
        tool_choice["disable_parallel_tool_use"] = True
    elif tool_choice == {"type": "auto"}:
        return None
    return cast("ToolChoiceParam", tool_choice)
