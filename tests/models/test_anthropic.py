"""`AnthropicModel` against a local server speaking the Messages API wire format."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import anthropic
import pytest

from approvals import Tool, ToolDefinition, UserError
from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
    dump_messages,
    load_messages,
)
from approvals.engines.native.models import ModelRequestParameters, ModelSettings, infer_model
from approvals.engines.native.models.anthropic import DEFAULT_MAX_TOKENS, PLACEHOLDER_API_KEY, AnthropicModel
from approvals.exceptions import ModelAPIError, ModelHTTPError

from .wire_servers import WireServer, anthropic_error, anthropic_message, anthropic_server, closed_port_url

pytestmark = pytest.mark.anyio

API_KEY = "sk-ant-api03-test-5f1c0ffee0ddba11SECRET"


def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Get the current weather in a city.

    Args:
        city: The city, e.g. Paris.
        unit: Temperature unit.
    """
    return "sunny"


def refund(order_id: str, amount: float) -> str:
    """Refund part of an order.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
    """
    return "ok"


FINAL_RESULT = ToolDefinition(
    name="final_result",
    description="The structured answer.",
    parameters_json_schema={"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ANTHROPIC_* variable or credentials profile of the machine running the tests leaks in."""
    for name in [n for n in os.environ if n.startswith("ANTHROPIC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/anthropic profile either


@pytest.fixture
def server() -> Iterator[WireServer]:
    with anthropic_server() as wire:
        yield wire


@pytest.fixture
async def model(server: WireServer) -> AsyncIterator[AnthropicModel]:
    model = AnthropicModel("claude-sonnet-5-5", base_url=server.base_url, api_key=API_KEY, max_retries=0)
    async with model.client:
        yield model


def prompt(text: str = "What's the weather in Paris?") -> list[ModelRequest | ModelResponse]:
    return [ModelRequest(parts=[SystemPromptPart(content="You are terse."), UserPromptPart(content=text)])]


def shop_history() -> list[ModelRequest | ModelResponse]:
    """A run resumed after an approval: one result, then a second request with the denial."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart(content="You are a shop assistant."),
                UserPromptPart(content="Refund A-1 and A-2."),
            ]
        ),
        ModelResponse(
            parts=[
                TextPart(content="Refunding both orders."),
                ToolCallPart(tool_name="refund", args='{"order_id": "A-1", "amount": 12.5}', tool_call_id="toolu_A1"),
                ToolCallPart(tool_name="refund", args={"order_id": "A-2", "amount": 900}, tool_call_id="toolu_A2"),
            ],
            model_name="claude-sonnet-5-5-20260512",
        ),
        ModelRequest(
            parts=[ToolReturnPart(tool_name="refund", content={"refunded": "12.50"}, tool_call_id="toolu_A1")]
        ),
        ModelRequest(parts=[ToolDeniedPart(tool_name="refund", tool_call_id="toolu_A2", reason="too expensive")]),
    ]


def messages_printed_for(exc: BaseException) -> str:
    """Every message a traceback of `exc` would print (explicit causes and unsuppressed contexts)."""
    texts = []
    current: BaseException | None = exc
    while current is not None:
        texts.append(f"{type(current).__name__}: {current} {getattr(current, 'body', '')!r}")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(texts)


async def test_tool_call_comes_back_as_tool_call_part(server: WireServer, model: AnthropicModel) -> None:
    server.queue(
        anthropic_message(
            text="Let me check.", tool_uses=[("toolu_01Wx", "get_weather", {"city": "Paris", "unit": "c"})]
        )
    )
    params = ModelRequestParameters(function_tools=[Tool(get_weather).tool_def], output_tools=[FINAL_RESULT])

    response = await model.request(prompt(), None, params)

    assert response.parts == [
        TextPart(content="Let me check."),
        ToolCallPart(tool_name="get_weather", args={"city": "Paris", "unit": "c"}, tool_call_id="toolu_01Wx"),
    ]
    assert (response.usage.requests, response.usage.input_tokens, response.usage.output_tokens) == (1, 21, 9)
    assert response.model_name == "claude-sonnet-5-5-20260512"
    assert response.finish_reason == "tool_use"

    request = server.requests[-1]
    assert request.path == "/v1/messages"
    assert API_KEY in (
        request.headers.get("x-api-key"),
        request.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert request.headers["anthropic-version"]
    body = request.body
    assert body["model"] == "claude-sonnet-5-5"
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris?"}]},
    ]
    weather, final = body["tools"]
    assert weather == {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "input_schema": Tool(get_weather).tool_def.parameters_json_schema,
    }
    assert weather["input_schema"]["properties"]["city"]["description"] == "The city, e.g. Paris."
    assert final["name"] == "final_result"
    assert "tool_choice" not in body


async def test_text_answer_without_tools(server: WireServer, model: AnthropicModel) -> None:
    server.queue(anthropic_message(text="Sunny, 21°C."))

    response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.parts == [TextPart(content="Sunny, 21°C.")]
    assert response.finish_reason == "end_turn"
    assert "tools" not in server.last_body
    assert "tool_choice" not in server.last_body


async def test_tool_results_share_one_user_message_after_the_assistant_turn(
    server: WireServer, model: AnthropicModel
) -> None:
    history = shop_history()
    before = dump_messages(history)
    server.queue(anthropic_message(text="A-1 is refunded; A-2 was refused."))

    await model.request(history, None, ModelRequestParameters(function_tools=[Tool(refund).tool_def]))

    assert dump_messages(history) == before, "the adapter must not mutate the history"
    body = server.last_body
    assert body["system"] == "You are a shop assistant."
    user, assistant, results = body["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "Refund A-1 and A-2."}]}
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Refunding both orders."},
            {"type": "tool_use", "id": "toolu_A1", "name": "refund", "input": {"order_id": "A-1", "amount": 12.5}},
            {"type": "tool_use", "id": "toolu_A2", "name": "refund", "input": {"order_id": "A-2", "amount": 900}},
        ],
    }
    assert results["role"] == "user"
    result, denial = results["content"]
    assert result == {"type": "tool_result", "tool_use_id": "toolu_A1", "content": '{"refunded": "12.50"}'}
    assert denial["type"] == "tool_result"
    assert denial["tool_use_id"] == "toolu_A2"
    assert denial["is_error"] is True
    assert "DENIED" in denial["content"]
    assert "too expensive" in denial["content"]


async def test_tool_results_come_before_text_in_a_merged_user_message(
    server: WireServer, model: AnthropicModel
) -> None:
    history = shop_history()
    history[-1] = ModelRequest(
        parts=[
            UserPromptPart(content="Also, what about A-3?"),
            ToolDeniedPart(tool_name="refund", tool_call_id="toolu_A2", reason="too expensive"),
        ]
    )
    server.queue(anthropic_message(text="ok"))

    await model.request(history, None, ModelRequestParameters())

    last = server.last_body["messages"][-1]
    assert [(block["type"], block.get("tool_use_id")) for block in last["content"]] == [
        ("tool_result", "toolu_A1"),
        ("tool_result", "toolu_A2"),
        ("text", None),
    ]


async def test_retry_prompts_with_and_without_tool_call_id(server: WireServer, model: AnthropicModel) -> None:
    history: list[ModelRequest | ModelResponse] = [
        *prompt(),
        ModelResponse(parts=[ToolCallPart(tool_name="get_weather", args={"town": "Paris"}, tool_call_id="toolu_bad")]),
        ModelRequest(
            parts=[
                RetryPromptPart(
                    content="city: Field required. Fix the arguments and call again.",
                    tool_name="get_weather",
                    tool_call_id="toolu_bad",
                )
            ]
        ),
        ModelResponse(parts=[TextPart(content="not json")]),
        ModelRequest(parts=[RetryPromptPart(content="Answer with the final_result tool.")]),
    ]
    server.queue(anthropic_message(text="ok"))

    await model.request(history, None, ModelRequestParameters())

    messages = server.last_body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_bad",
            "content": "city: Field required. Fix the arguments and call again.",
            "is_error": True,
        }
    ]
    assert messages[4]["content"] == [{"type": "text", "text": "Answer with the final_result tool."}]


async def test_system_prompts_are_joined_with_blank_lines(server: WireServer, model: AnthropicModel) -> None:
    history: list[ModelRequest | ModelResponse] = [
        ModelRequest(
            parts=[
                SystemPromptPart(content="You are a shop assistant."),
                SystemPromptPart(content="Never refund more than 100 EUR."),
                UserPromptPart(content="Hi"),
            ]
        )
    ]
    server.queue(anthropic_message(text="Hello"))

    await model.request(history, None, ModelRequestParameters())

    assert server.last_body["system"] == "You are a shop assistant.\n\nNever refund more than 100 EUR."
    assert server.last_body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


async def test_no_system_prompt_sends_no_system_key(server: WireServer, model: AnthropicModel) -> None:
    server.queue(anthropic_message(text="Hello"))

    await model.request([ModelRequest(parts=[UserPromptPart(content="Hi")])], None, ModelRequestParameters())

    assert "system" not in server.last_body


async def test_strict_tool_is_marked_strict(server: WireServer, model: AnthropicModel) -> None:
    server.queue(anthropic_message(text="ok"))

    await model.request(
        prompt(), None, ModelRequestParameters(function_tools=[Tool(get_weather, strict=True).tool_def])
    )

    assert server.last_body["tools"][0]["strict"] is True


async def test_text_output_not_allowed_requires_a_tool_call(server: WireServer, model: AnthropicModel) -> None:
    server.queue(anthropic_message(tool_uses=[("toolu_F", "final_result", {"answer": "sunny"})]))
    params = ModelRequestParameters(output_tools=[FINAL_RESULT], allow_text_output=False)

    await model.request(prompt(), None, params)

    assert server.last_body["tool_choice"] == {"type": "any"}


async def test_cached_input_tokens_count_as_input(server: WireServer, model: AnthropicModel) -> None:
    server.queue(
        anthropic_message(text="ok", input_tokens=5, cache_read_input_tokens=1000, cache_creation_input_tokens=200)
    )

    response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.usage.input_tokens == 1205


async def test_thinking_blocks_are_kept_and_sent_back_unchanged(server: WireServer, model: AnthropicModel) -> None:
    """With extended thinking, the API requires a tool-use turn's thinking blocks back, signature and all."""
    answer = anthropic_message(tool_uses=[("toolu_T", "get_weather", {"city": "Oslo"})])
    answer["content"][:0] = [
        {"type": "thinking", "thinking": "The user wants Oslo.", "signature": "EqQBCgIYAhIM"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    ]
    server.queue(answer)
    server.queue(anthropic_message(text="Sunny in Oslo."))
    settings: ModelSettings = {"anthropic_thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048}
    params = ModelRequestParameters(function_tools=[Tool(get_weather).tool_def])

    history = prompt()
    response = await model.request(history, settings, params)
    assert response.parts == [
        ThinkingPart(content="The user wants Oslo.", signature="EqQBCgIYAhIM", provider_name="anthropic"),
        ThinkingPart(content="", signature="EmwKAhgBEgy3va3pzix", redacted=True, provider_name="anthropic"),
        ToolCallPart(tool_name="get_weather", args={"city": "Oslo"}, tool_call_id="toolu_T"),
    ]
    stored = load_messages(dump_messages([*history, response]))
    stored.append(
        ModelRequest(parts=[ToolReturnPart(tool_name="get_weather", content="sunny", tool_call_id="toolu_T")])
    )
    await model.request(stored, settings, params)

    body = server.last_body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "The user wants Oslo.", "signature": "EqQBCgIYAhIM"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    ]


async def test_dropping_thinking_blocks_is_refused_as_the_api_does(server: WireServer, model: AnthropicModel) -> None:
    """The fake server holds the documented rule, so the test above can fail."""
    history = prompt()
    history.append(
        ModelResponse(parts=[ToolCallPart(tool_name="get_weather", args={"city": "Oslo"}, tool_call_id="toolu_T")])
    )
    history.append(ModelRequest(parts=[ToolReturnPart(tool_name="get_weather", content="x", tool_call_id="toolu_T")]))
    settings: ModelSettings = {"anthropic_thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048}

    with pytest.raises(ModelHTTPError) as raised:
        await model.request(history, settings, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def]))
    assert raised.value.status_code == 400
    assert "must start with a thinking block" in str(raised.value)


async def test_thinking_from_another_provider_is_not_sent(server: WireServer, model: AnthropicModel) -> None:
    history = prompt()
    history.append(ModelResponse(parts=[ThinkingPart(content="hmm", provider_name="openai"), TextPart(content="Hi")]))
    history.append(ModelRequest(parts=[UserPromptPart(content="And tomorrow?")]))
    server.queue(anthropic_message(text="ok"))

    await model.request(history, None, ModelRequestParameters())

    assert server.last_body["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}


async def test_settings_are_passed_through(server: WireServer, model: AnthropicModel) -> None:
    settings: ModelSettings = {
        "max_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "parallel_tool_calls": False,
    }
    server.queue(anthropic_message(text="ok"))

    await model.request(prompt(), settings, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def]))

    body = server.last_body
    assert body["max_tokens"] == 256
    assert body["stop_sequences"] == ["END"]
    # The API version SDK 2.x speaks answers 400 to sampling parameters, so they are not sent.
    assert "temperature" not in body
    assert "top_p" not in body
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


async def test_timeout_setting_raises_model_api_error(server: WireServer, model: AnthropicModel) -> None:
    server.queue(anthropic_message(text="late"), delay=1.0)

    with pytest.raises(ModelAPIError, match="timed out") as caught:
        await model.request(prompt(), {"timeout": 0.2}, ModelRequestParameters())

    assert not isinstance(caught.value, ModelHTTPError)


ERRORS = [
    pytest.param(
        400,
        anthropic_error("invalid_request_error", "messages.1.content.0: unexpected `tool_use_id` found"),
        "unexpected `tool_use_id` found",
        id="400",
    ),
    pytest.param(401, anthropic_error("authentication_error", "invalid x-api-key"), "invalid x-api-key", id="401"),
    pytest.param(
        429,
        anthropic_error("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
        "per-minute rate limit",
        id="429",
    ),
    pytest.param(500, anthropic_error("api_error", "Internal server error"), "Internal server error", id="500"),
    pytest.param(529, anthropic_error("overloaded_error", "Overloaded"), "Overloaded", id="529"),
]


@pytest.mark.parametrize(("status", "body", "message"), ERRORS)
async def test_error_status_raises_model_http_error(
    server: WireServer, model: AnthropicModel, status: int, body: dict[str, Any], message: str
) -> None:
    server.queue(body, status=status)

    with pytest.raises(ModelHTTPError) as caught:
        await model.request(prompt(), None, ModelRequestParameters())

    error = caught.value
    assert error.status_code == status
    assert error.model_name == "claude-sonnet-5-5"
    assert message in str(error)
    assert error.body == body
    assert API_KEY not in messages_printed_for(error)
    assert len(server.requests) == 1, "max_retries=0 must reach the SDK"


async def test_sdk_retries_up_to_max_retries(server: WireServer) -> None:
    server.queue(anthropic_error("overloaded_error", "Overloaded"), status=529, headers={"retry-after-ms": "10"})
    server.queue(anthropic_message(text="second time lucky"))
    model = AnthropicModel("claude-sonnet-5-5", base_url=server.base_url, api_key=API_KEY, max_retries=1)

    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.text == "second time lucky"
    assert len(server.requests) == 2


async def test_closed_port_raises_model_api_error() -> None:
    model = AnthropicModel("claude-sonnet-5-5", base_url=closed_port_url(), api_key=API_KEY, max_retries=0)

    async with model.client:
        with pytest.raises(ModelAPIError, match=r"cannot connect to http://127\.0\.0\.1") as caught:
            await model.request(prompt(), None, ModelRequestParameters())

    assert not isinstance(caught.value, ModelHTTPError)
    assert API_KEY not in messages_printed_for(caught.value)


async def test_api_key_echoed_by_the_server_is_masked(server: WireServer, model: AnthropicModel) -> None:
    # Some proxies echo the whole key back; it must not reach our messages or their causes.
    server.queue(anthropic_error("authentication_error", f"invalid x-api-key: {API_KEY}"), status=401)

    with pytest.raises(ModelHTTPError) as caught:
        await model.request(prompt(), None, ModelRequestParameters())

    assert caught.value.status_code == 401
    assert "invalid x-api-key: ***" in str(caught.value)
    assert API_KEY not in messages_printed_for(caught.value)


async def test_infer_model_reads_key_and_base_url_from_env(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    server.queue(anthropic_message(text="hi", model="claude-x"))

    model = infer_model("anthropic:claude-x")

    assert isinstance(model, AnthropicModel)
    assert (model.model_name, model.system) == ("claude-x", "anthropic")
    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())
    assert response.text == "hi"
    headers = server.requests[-1].headers
    assert "sk-ant-from-env" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert server.last_body["model"] == "claude-x"


async def test_local_server_needs_no_key(server: WireServer) -> None:
    server.queue(anthropic_message(text="hi"))
    model = AnthropicModel("claude-x", base_url=server.base_url)

    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.text == "hi"
    headers = server.requests[-1].headers
    assert PLACEHOLDER_API_KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


async def test_given_client_is_used(server: WireServer) -> None:
    server.queue(anthropic_message(text="hi"))
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=server.base_url, max_retries=0)
    model = AnthropicModel("claude-x", client=client)

    async with client:
        await model.request(prompt(), None, ModelRequestParameters())

    assert model.client is client
    assert len(server.requests) == 1


def test_client_and_api_key_together_are_refused() -> None:
    client = anthropic.AsyncAnthropic(api_key=API_KEY)
    with pytest.raises(UserError, match="either `client` or"):
        AnthropicModel("claude-x", client=client, api_key=API_KEY)


def test_missing_credentials_raise_user_error() -> None:
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-x")


def test_missing_sdk_raises_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # makes `import anthropic` fail
    monkeypatch.delitem(sys.modules, "approvals.engines.native.models.anthropic")

    with pytest.raises(UserError, match=r"install 'agent-approvals\[anthropic\]'"):
        importlib.import_module("approvals.engines.native.models.anthropic")
