"""`OpenAIChatModel`: a run's history and tools over an OpenAI-compatible chat-completions API.

The same wire format is spoken by OpenAI, vLLM, Ollama and the llama.cpp server, so one
adapter covers them all: point `base_url` at the server. The official async SDK does the
HTTP (retries, timeouts, auth); this module only translates our message parts to chat
messages and back, and the SDK's errors to `ModelHTTPError` / `ModelAPIError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, assert_never, cast

from ..exceptions import ModelAPIError, ModelHTTPError, UserError
from ..formats import to_openai_tool
from ..messages import (
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    model_facing_content,
)
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
        ChatCompletionToolUnionParam,
    )
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides the SDK
    raise UserError(
        "OpenAIChatModel needs the OpenAI SDK: install approvals[openai] (pip install 'approvals[openai]')"
    ) from _exc

__all__ = ("OpenAIChatModel",)

PLACEHOLDER_API_KEY = "no-key-needed"
"""Sent to a custom `base_url` when no key is configured; local servers ignore it."""


class OpenAIChatModel(Model):
    """A chat-completions model: OpenAI itself, or any server that speaks its API.

    `OpenAIChatModel("gpt-4o-mini")` reads `OPENAI_API_KEY` (and `OPENAI_BASE_URL`) from the
    environment; `OpenAIChatModel("llama3.1", base_url="http://localhost:11434/v1")` talks to
    a local server without a key. Pass `client` to reuse a configured `openai.AsyncOpenAI`
    (then `base_url`, `api_key` and `max_retries` are the client's business).
    """

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        max_retries: int = 2,
    ) -> None:
        self._model_name = model_name
        if client is not None:
            if base_url is not None or api_key is not None:
                raise UserError("OpenAIChatModel: pass either `client` or `base_url`/`api_key`, not both")
            self.client = client
            return
        custom_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if api_key is None and custom_url and not os.environ.get("OPENAI_API_KEY"):
            api_key = PLACEHOLDER_API_KEY
        try:
            self.client = AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries)
        except openai.OpenAIError as exc:
            raise UserError(
                f"Cannot set up the OpenAI client for {model_name!r}: {exc} "
                "(set OPENAI_API_KEY, or pass api_key= or base_url= for a local server)"
            ) from None

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return "openai"

    async def request(
        self,
        messages: Sequence[ModelRequest | ModelResponse],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """Send the history and tools to `/chat/completions` and map the first choice back."""
        settings = settings or {}
        tools = [cast("ChatCompletionToolUnionParam", to_openai_tool(t)) for t in params.all_tools]
        try:
            completion = await self.client.chat.completions.create(
                model=self._model_name,
                messages=map_messages(messages),
                tools=tools or omit,
                tool_choice="required" if tools and not params.allow_text_output else omit,
                parallel_tool_calls=settings.get("parallel_tool_calls", omit) if tools else omit,
                max_tokens=settings.get("max_tokens", omit),
                temperature=settings.get("temperature", omit),
                top_p=settings.get("top_p", omit),
                stop=settings.get("stop_sequences", omit),
                timeout=settings.get("timeout", not_given),
            )
        except openai.APIStatusError as exc:
            body = _redact(exc.body, self.client.api_key)
            leaked = body != exc.body
            error = ModelHTTPError(self._model_name, exc.status_code, body)
            raise error from (None if leaked else exc)
        except openai.APITimeoutError as exc:
            raise ModelAPIError(self._model_name, f"request to {_endpoint(exc)} timed out") from exc
        except openai.APIConnectionError as exc:
            raise ModelAPIError(self._model_name, f"cannot connect to {_endpoint(exc)}") from exc
        return self._map_response(completion)

    def _map_response(self, completion: ChatCompletion) -> ModelResponse:
        if not completion.choices:
            raise ModelAPIError(self._model_name, "the provider answered without any choices")
        choice = completion.choices[0]
        message = choice.message
        parts: list[ModelResponsePart] = []
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
        else:
            assert_never(part)
    assistant: ChatCompletionAssistantMessageParam = {"role": "assistant"}
    if texts or not calls:
        assistant["content"] = "\n\n".join(texts)
    if calls:
        assistant["tool_calls"] = calls
    return assistant


def _redact(value: Any, secret: str) -> Any:
    """`value` (a parsed error body) with every occurrence of `secret` masked."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {key: _redact(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact(item, secret) for item in value]
    return value


def _endpoint(exc: openai.APIConnectionError) -> str:
    """Where the failed request went, without query string or credentials."""
    url = exc.request.url
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"
