"""`OpenAIChatModel`: a run's history and tools over an OpenAI-compatible chat-completions API.

The same wire format is spoken by OpenAI, vLLM, Ollama and the llama.cpp server, so one
adapter covers them all: point `base_url` at the server. The official async SDK does the
HTTP (retries, timeouts, auth); this module only translates our message parts to chat
messages and back, and the SDK's errors to `ModelHTTPError` / `ModelAPIError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Literal, assert_never, cast
from urllib.parse import urlsplit

from ....exceptions import ModelAPIError, ModelHTTPError, UserError
from ..formats import to_openai_tool
from ..messages import (
    ModelRequest,
    ModelRequestPart,
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
    import openai
    from openai import AsyncOpenAI, not_given, omit
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionMessageFunctionToolCall,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolChoiceOptionParam,
        ChatCompletionToolUnionParam,
    )
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides the SDK
    raise UserError("OpenAIChatModel needs the OpenAI SDK: pip install 'agent-approvals[openai]'") from _exc

__all__ = ("OpenAIChatModel",)

logger = logging.getLogger("approvals.engines.native.models")

PLACEHOLDER_API_KEY = "no-key-needed"
"""Sent to a custom `base_url` when no key is configured; local servers ignore it."""
OPENAI_HOST = "api.openai.com"

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
_REFUSAL_STATUSES = frozenset({400, 422, 500, 501})
"""Statuses with which servers refuse a `tool_choice` they do not support (llama.cpp's Python server: a bare 500)."""


class OpenAIChatModel(Model):
    """A chat-completions model: OpenAI itself, or any server that speaks its API.

    `OpenAIChatModel("gpt-4o-mini")` reads `OPENAI_API_KEY` (and `OPENAI_BASE_URL`) from the
    environment; `OpenAIChatModel("llama3.1", base_url="http://localhost:11434/v1")` talks to
    a local server without a key. Pass `client` to reuse a configured `openai.AsyncOpenAI`
    (then `base_url`, `api_key` and `max_retries` are the client's business, and the client
    must be used in one event loop only).

    `max_tokens_field` is the body field `max_tokens` goes in: OpenAI's own API wants
    `max_completion_tokens` (its reasoning models refuse `max_tokens`), while many other
    servers know only `max_tokens`; by default the first is sent to api.openai.com and
    the second everywhere else.
    """

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        max_retries: int = 2,
        max_tokens_field: MaxTokensField | None = None,
    ) -> None:
        self._model_name = model_name
        if client is not None and (base_url is not None or api_key is not None):
            raise UserError("OpenAIChatModel: pass either `client` or `base_url`/`api_key`, not both")
        custom_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if api_key is None and custom_url and not os.environ.get("OPENAI_API_KEY"):
            api_key = PLACEHOLDER_API_KEY
        try:
            self._clients = LoopBoundClients(
                lambda: AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries), fixed=client
            )
        except openai.OpenAIError as exc:
            raise UserError(
                f"Cannot set up the OpenAI client for {model_name!r}: {exc} "
                "(set OPENAI_API_KEY, or pass api_key= or base_url= for a local server)"
            ) from None
        host = urlsplit(str(self._clients.template.base_url)).hostname
        self.max_tokens_field: MaxTokensField = max_tokens_field or (
            "max_completion_tokens" if host == OPENAI_HOST else "max_tokens"
        )
        self._refuses_required = False
        """Set once the server refused `tool_choice="required"` and accepted `"auto"` instead."""

    @property
    def client(self) -> AsyncOpenAI:
        """The SDK client for the running event loop."""
        return self._clients.current()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return "openai"

    async def close(self) -> None:
        await self._clients.close_current()

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """Send the history and tools to `/chat/completions` and map the first choice back.

        Without a `tool_choice` setting, tools are offered with `"auto"` (some servers leave
        tools out of the prompt otherwise), or `"required"` when only a tool call can end
        the step. A server that refuses `"required"` is asked again with `"auto"`, and the
        agent's retry prompt then asks for the tool call.
        """
        settings = settings or {}
        tools = [cast("ChatCompletionToolUnionParam", to_openai_tool(t)) for t in params.all_tools]
        choice = self._tool_choice(settings, params, tools)
        try:
            completion = await self._create(messages, settings, tools, choice)
        except ModelHTTPError as exc:
            defaulted = "tool_choice" not in settings
            if choice != "required" or exc.status_code not in _REFUSAL_STATUSES:
                raise
            if not defaulted:
                raise ModelHTTPError(
                    self._model_name,
                    exc.status_code,
                    exc.body,
                    hint="the server may not support tool_choice='required'; try 'auto' or a tool's name",
                ) from exc
            completion = await self._create(messages, settings, tools, "auto")
            self._refuses_required = True
            logger.warning(
                "%s at %s refused tool_choice='required' (HTTP %s); asking with 'auto' from now on, "
                "and by retry prompt when the model answers in text",
                self._model_name,
                self.client.base_url,
                exc.status_code,
            )
        return self._map_response(completion)

    def _tool_choice(
        self, settings: ModelSettings, params: ModelRequestParameters, tools: list[ChatCompletionToolUnionParam]
    ) -> ChatCompletionToolChoiceOptionParam | None:
        if not tools:
            return None
        choice = settings.get("tool_choice")
        if choice is None:
            return "auto" if params.allow_text_output or self._refuses_required else "required"
        if choice in ("auto", "none", "required"):
            return cast("ChatCompletionToolChoiceOptionParam", choice)
        offered = [t.name for t in params.all_tools]
        if choice not in offered:
            raise UserError(f"tool_choice names tool {choice!r}, which this step does not offer (offered: {offered})")
        return {"type": "function", "function": {"name": choice}}

    async def _create(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings,
        tools: list[ChatCompletionToolUnionParam],
        choice: ChatCompletionToolChoiceOptionParam | None,
    ) -> ChatCompletion:
        client = self.client
        max_tokens: dict[str, Any] = {}
        if "max_tokens" in settings:
            max_tokens[self.max_tokens_field] = settings["max_tokens"]
        try:
            completion: ChatCompletion = await client.chat.completions.create(
                model=self._model_name,
                messages=map_messages(messages),
                tools=tools or omit,
                tool_choice=choice if choice is not None else omit,
                parallel_tool_calls=settings.get("parallel_tool_calls", omit) if tools else omit,
                temperature=settings.get("temperature", omit),
                top_p=settings.get("top_p", omit),
                seed=settings.get("seed", omit),
                presence_penalty=settings.get("presence_penalty", omit),
                frequency_penalty=settings.get("frequency_penalty", omit),
                logit_bias=settings.get("logit_bias", omit),
                stop=settings.get("stop_sequences", omit),
                timeout=settings.get("timeout", not_given),
                extra_headers=settings.get("extra_headers"),
                extra_body=settings.get("extra_body"),
                **max_tokens,
            )
        except openai.APIStatusError as exc:
            body = redact(exc.body, (client.api_key,))
            leaked = body != exc.body
            error = ModelHTTPError(self._model_name, exc.status_code, body)
            raise error from (None if leaked else exc)
        except openai.APITimeoutError as exc:
            raise ModelAPIError(self._model_name, f"request to {endpoint(exc.request)} timed out") from exc
        except openai.APIConnectionError as exc:
            raise ModelAPIError(self._model_name, f"cannot connect to {endpoint(exc.request)}") from exc
        except Exception as exc:  # the SDK's other failures (bad response, closed loop, ...) must not escape raw
            text = redact(str(exc), (client.api_key,))
            raise ModelAPIError(self._model_name, f"the request failed: {type(exc).__name__}: {text}") from None
        return completion

    def _map_response(self, completion: ChatCompletion) -> ModelResponse:
        if not completion.choices:
            raise ModelAPIError(self._model_name, "the provider answered without any choices")
        choice = completion.choices[0]
        message = choice.message
        parts: list[ModelResponsePart] = []
        reasoning = (message.model_extra or {}).get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:  # vLLM, llama.cpp, DeepSeek
            parts.append(ThinkingPart(content=reasoning, provider_name=self.system))
        text = message.content or message.refusal
        if text:
            parts.append(TextPart(content=text))
        for call in message.tool_calls or []:
            if not isinstance(call, ChatCompletionMessageFunctionToolCall):
                raise ModelAPIError(self._model_name, f"unexpected tool call of type {call.type!r}")
            # The arguments stay the provider's JSON text: malformed JSON goes back as a retry.
            parts.append(ToolCallPart(tool_name=call.function.name, args=call.function.arguments, tool_call_id=call.id))
        usage = Usage(requests=1)
        if completion.usage is not None:
            usage.input_tokens = completion.usage.prompt_tokens
            usage.output_tokens = completion.usage.completion_tokens
        return ModelResponse(
            parts=parts,
            usage=usage,
            model_name=completion.model or self._model_name,
            finish_reason=choice.finish_reason,
        )


def map_messages(messages: Sequence[ModelRequest | ModelResponse]) -> list[ChatCompletionMessageParam]:
    """Our history as chat-completions messages (new dicts; the history is not touched)."""
    result: list[ChatCompletionMessageParam] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            result.extend(_map_request_part(part) for part in message.parts)
        else:
            result.append(_map_model_response(message))
    return result


def _map_request_part(part: ModelRequestPart) -> ChatCompletionMessageParam:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": part.content}
    if isinstance(part, ToolReturnPart | ToolDeniedPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": model_facing_content(part)}
    if isinstance(part, RetryPromptPart):
        if part.tool_call_id is None:
            return {"role": "user", "content": model_facing_content(part)}
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": model_facing_content(part)}
    assert_never(part)


def _map_model_response(message: ModelResponse) -> ChatCompletionAssistantMessageParam:
    texts: list[str] = []
    calls: list[ChatCompletionMessageFunctionToolCallParam] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": part.tool_call_id,
                    "type": "function",
                    "function": {"name": part.tool_name, "arguments": part.args_as_json()},
                }
            )
        elif isinstance(part, ThinkingPart):
            continue  # chat-completions servers do not take reasoning back
        else:
            assert_never(part)
    # Always a string: servers that render chat templates (llama.cpp, vLLM) fail on a missing
    # or null `content`, and OpenAI accepts "" beside tool calls.
    assistant: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        assistant["tool_calls"] = calls
    return assistant
