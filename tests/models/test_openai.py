"""`OpenAIChatModel` against a local server speaking the chat-completions wire format."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import openai
import pytest

from approvals import Tool, ToolDefinition, UserError
from approvals.engines.native.formats import openai_strict_schema
from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
    dump_messages,
)
from approvals.engines.native.models import ModelRequestParameters, ModelSettings, infer_model
from approvals.engines.native.models.openai import PLACEHOLDER_API_KEY, OpenAIChatModel
from approvals.exceptions import ModelAPIError, ModelHTTPError

from .wire_servers import WireServer, closed_port_url, openai_completion, openai_error, openai_server

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-5f1c0ffee0ddba11SECRET"


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
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OPENAI_* variable of the machine running the tests leaks in."""
    for name in [n for n in os.environ if n.startswith("OPENAI_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def server() -> Iterator[WireServer]:
    with openai_server() as wire:
        yield wire


@pytest.fixture
async def model(server: WireServer) -> AsyncIterator[OpenAIChatModel]:
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, max_retries=0)
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
                ToolCallPart(tool_name="refund", args='{"order_id": "A-1", "amount": 12.5}', tool_call_id="call_A1"),
                ToolCallPart(tool_name="refund", args={"order_id": "A-2", "amount": 900}, tool_call_id="call_A2"),
            ],
            model_name="gpt-4o-mini-2024-07-18",
        ),
        ModelRequest(parts=[ToolReturnPart(tool_name="refund", content={"refunded": "12.50"}, tool_call_id="call_A1")]),
        ModelRequest(parts=[ToolDeniedPart(tool_name="refund", tool_call_id="call_A2", reason="too expensive")]),
    ]


def messages_printed_for(exc: BaseException) -> str:
    """Every message a traceback of `exc` would print (explicit causes and unsuppressed contexts)."""
    texts = []
    current: BaseException | None = exc
    while current is not None:
        texts.append(f"{type(current).__name__}: {current} {getattr(current, 'body', '')!r}")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(texts)


async def test_tool_call_comes_back_as_tool_call_part(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(tool_calls=[("call_Wx1", "get_weather", '{"city": "Paris"}')]))
    params = ModelRequestParameters(function_tools=[Tool(get_weather).tool_def], output_tools=[FINAL_RESULT])

    response = await model.request(prompt(), None, params)

    assert response.parts == [ToolCallPart(tool_name="get_weather", args='{"city": "Paris"}', tool_call_id="call_Wx1")]
    assert (response.usage.requests, response.usage.input_tokens, response.usage.output_tokens) == (1, 11, 7)
    assert response.model_name == "gpt-4o-mini-2024-07-18"
    assert response.finish_reason == "tool_calls"

    request = server.requests[-1]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    body = request.body
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What's the weather in Paris?"},
    ]
    weather, final = body["tools"]
    assert weather["type"] == "function"
    assert weather["function"]["name"] == "get_weather"
    assert weather["function"]["description"] == "Get the current weather in a city."
    assert weather["function"]["parameters"] == Tool(get_weather).tool_def.parameters_json_schema
    assert weather["function"]["parameters"]["properties"]["city"]["description"] == "The city, e.g. Paris."
    assert "strict" not in weather["function"]
    assert final["function"]["name"] == "final_result"
    assert body["tool_choice"] == "auto", "some servers leave tools out of the prompt without it"
    assert "parallel_tool_calls" not in body
    assert "stream" not in body or body["stream"] is False


async def test_text_answer_without_tools(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(content="Sunny, 21°C."))

    response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.parts == [TextPart(content="Sunny, 21°C.")]
    assert response.finish_reason == "stop"
    assert "tools" not in server.last_body
    assert "tool_choice" not in server.last_body


async def test_tool_results_and_denial_go_back_linked_to_their_calls(
    server: WireServer, model: OpenAIChatModel
) -> None:
    history = shop_history()
    before = dump_messages(history)
    server.queue(openai_completion(content="A-1 is refunded; A-2 was refused."))

    await model.request(history, None, ModelRequestParameters(function_tools=[Tool(refund).tool_def]))

    assert dump_messages(history) == before, "the adapter must not mutate the history"
    system, user, assistant, result, denial = server.last_body["messages"]
    assert system == {"role": "system", "content": "You are a shop assistant."}
    assert user == {"role": "user", "content": "Refund A-1 and A-2."}
    assert assistant == {
        "role": "assistant",
        "content": "Refunding both orders.",
        "tool_calls": [
            {
                "id": "call_A1",
                "type": "function",
                "function": {"name": "refund", "arguments": '{"order_id": "A-1", "amount": 12.5}'},
            },
            {
                "id": "call_A2",
                "type": "function",
                "function": {"name": "refund", "arguments": '{"order_id": "A-2", "amount": 900}'},
            },
        ],
    }
    assert result == {"role": "tool", "tool_call_id": "call_A1", "content": '{"refunded": "12.50"}'}
    assert denial["role"] == "tool"
    assert denial["tool_call_id"] == "call_A2"
    assert "DENIED" in denial["content"]
    assert "too expensive" in denial["content"]


async def test_assistant_turn_with_only_tool_calls_has_empty_text(server: WireServer, model: OpenAIChatModel) -> None:
    """Servers that render chat templates (llama.cpp) fail on a missing or null content; "" works everywhere."""
    history = shop_history()
    assert isinstance(history[1], ModelResponse)
    history[1] = ModelResponse(parts=[*history[1].tool_calls])
    server.queue(openai_completion(content="ok"))

    await model.request(history, None, ModelRequestParameters())

    assistant = server.last_body["messages"][2]
    assert assistant["content"] == ""
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_A1", "call_A2"]


async def test_retry_prompts_with_and_without_tool_call_id(server: WireServer, model: OpenAIChatModel) -> None:
    history: list[ModelRequest | ModelResponse] = [
        *prompt(),
        ModelResponse(parts=[ToolCallPart(tool_name="get_weather", args='{"town": "Paris"}', tool_call_id="call_bad")]),
        ModelRequest(
            parts=[
                RetryPromptPart(
                    content="city: Field required. Fix the arguments and call again.",
                    tool_name="get_weather",
                    tool_call_id="call_bad",
                )
            ]
        ),
        ModelResponse(parts=[TextPart(content="not json")]),
        ModelRequest(parts=[RetryPromptPart(content="Answer with the final_result tool.")]),
    ]
    server.queue(openai_completion(content="ok"))

    await model.request(history, None, ModelRequestParameters())

    messages = server.last_body["messages"]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_bad",
        "content": "city: Field required. Fix the arguments and call again.",
    }
    assert messages[4] == {"role": "assistant", "content": "not json"}
    assert messages[5] == {"role": "user", "content": "Answer with the final_result tool."}


async def test_strict_tool_sends_strict_schema(server: WireServer, model: OpenAIChatModel) -> None:
    definition = Tool(get_weather, strict=True).tool_def
    server.queue(openai_completion(content="ok"))

    await model.request(prompt(), None, ModelRequestParameters(function_tools=[definition]))

    function = server.last_body["tools"][0]["function"]
    assert function["strict"] is True
    assert function["parameters"] == openai_strict_schema(definition)
    assert function["parameters"]["additionalProperties"] is False
    assert sorted(function["parameters"]["required"]) == ["city", "unit"]


async def test_text_output_not_allowed_requires_a_tool_call(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(tool_calls=[("call_F", "final_result", '{"answer": "sunny"}')]))
    params = ModelRequestParameters(output_tools=[FINAL_RESULT], allow_text_output=False)

    await model.request(prompt(), None, params)

    assert server.last_body["tool_choice"] == "required"


async def test_malformed_arguments_stay_the_providers_text(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(tool_calls=[("call_M", "get_weather", '{"city": "Par')]))

    response = await model.request(prompt(), None, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def]))

    assert response.tool_calls[0].args == '{"city": "Par'


async def test_settings_are_passed_through(server: WireServer, model: OpenAIChatModel) -> None:
    settings: ModelSettings = {
        "max_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "parallel_tool_calls": False,
    }
    server.queue(openai_completion(content="ok"))
    server.queue(openai_completion(content="ok"))

    await model.request(prompt(), settings, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def]))
    with_tools = server.last_body
    await model.request(prompt(), settings, ModelRequestParameters())
    without_tools = server.last_body

    assert with_tools["max_tokens"] == 256
    assert with_tools["temperature"] == 0.2
    assert with_tools["top_p"] == 0.9
    assert with_tools["stop"] == ["END"]
    assert with_tools["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in without_tools, "only meaningful when tools are sent"
    assert without_tools["max_tokens"] == 256


async def test_every_setting_reaches_the_wire(server: WireServer, model: OpenAIChatModel) -> None:
    settings: ModelSettings = {
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"50256": -100},
        "tool_choice": "get_weather",
        "extra_headers": {"X-Trace": "abc"},
        "extra_body": {"reasoning_effort": "low"},
    }
    server.queue(openai_completion(content="ok"))

    await model.request(prompt(), settings, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def]))

    body = server.last_body
    assert (body["seed"], body["presence_penalty"], body["frequency_penalty"]) == (7, 0.5, -0.5)
    assert body["logit_bias"] == {"50256": -100}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["reasoning_effort"] == "low"
    assert server.requests[-1].headers["x-trace"] == "abc"


@pytest.mark.parametrize("choice", ["none", "required", "auto"])
async def test_tool_choice_words_are_sent_as_they_are(server: WireServer, model: OpenAIChatModel, choice: str) -> None:
    server.queue(openai_completion(content="ok"))

    await model.request(
        prompt(), {"tool_choice": choice}, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def])
    )

    assert server.last_body["tool_choice"] == choice


async def test_tool_choice_naming_a_tool_not_offered_is_a_clear_error(
    server: WireServer, model: OpenAIChatModel
) -> None:
    with pytest.raises(UserError, match=r"tool_choice names tool 'refund', which this step does not offer"):
        await model.request(
            prompt(), {"tool_choice": "refund"}, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def])
        )
    assert server.requests == []


async def test_max_tokens_goes_in_the_field_the_server_knows(server: WireServer) -> None:
    for field_name in ("max_tokens", "max_completion_tokens"):
        model = OpenAIChatModel("o4-mini", base_url=server.base_url, api_key=API_KEY, max_tokens_field=field_name)
        server.queue(openai_completion(content="ok"))
        await model.request(prompt(), {"max_tokens": 99}, ModelRequestParameters())
        await model.close()
        assert server.last_body[field_name] == 99
        assert {"max_tokens", "max_completion_tokens"} - {field_name} - set(server.last_body) == {
            "max_tokens",
            "max_completion_tokens",
        } - {field_name}


def test_openai_itself_gets_max_completion_tokens_and_other_servers_max_tokens() -> None:
    assert OpenAIChatModel("o4-mini", api_key=API_KEY).max_tokens_field == "max_completion_tokens"
    assert OpenAIChatModel("x", base_url="https://api.openai.com/v1", api_key=API_KEY).max_tokens_field == (
        "max_completion_tokens"
    )
    assert OpenAIChatModel("llama3.1", base_url="http://127.0.0.1:11434/v1").max_tokens_field == "max_tokens"


async def test_a_server_refusing_required_is_asked_again_with_auto(
    server: WireServer, model: OpenAIChatModel, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's Python server answers a bare 500 to tool_choice="required" (seen with the real one too)."""
    server.queue(openai_error("internal_server_error", ""), status=500)
    server.queue(openai_completion(tool_calls=[("call_1", "final_result", '{"answer": "42"}')]))
    server.queue(openai_completion(tool_calls=[("call_2", "final_result", '{"answer": "43"}')]))
    params = ModelRequestParameters(output_tools=[FINAL_RESULT], allow_text_output=False)

    first = await model.request(prompt(), None, params)
    second = await model.request(prompt(), None, params)

    assert [r.body.get("tool_choice") for r in server.requests] == ["required", "auto", "auto"]
    assert first.tool_calls[0].args == '{"answer": "42"}'
    assert second.tool_calls[0].args == '{"answer": "43"}'
    assert "refused tool_choice='required'" in caplog.text


async def test_required_asked_for_explicitly_is_not_changed_and_the_error_says_why(
    server: WireServer, model: OpenAIChatModel
) -> None:
    server.queue(openai_error("internal_server_error", ""), status=500)

    with pytest.raises(ModelHTTPError, match=r"may not support tool_choice='required'"):
        await model.request(
            prompt(), {"tool_choice": "required"}, ModelRequestParameters(function_tools=[Tool(get_weather).tool_def])
        )
    assert len(server.requests) == 1


async def test_a_failure_that_is_not_about_required_is_raised_as_it_is(
    server: WireServer, model: OpenAIChatModel
) -> None:
    server.queue(openai_error("internal_server_error", "overloaded"), status=500)
    server.queue(openai_error("internal_server_error", "still overloaded"), status=500)
    params = ModelRequestParameters(output_tools=[FINAL_RESULT], allow_text_output=False)

    with pytest.raises(ModelHTTPError, match="still overloaded"):
        await model.request(prompt(), None, params)
    server.queue(openai_completion(content="ok"))
    await model.request(prompt(), None, params)
    assert server.last_body["tool_choice"] == "required", "one outage does not mark the server as refusing it"


async def test_an_answer_that_is_not_json_is_a_model_api_error(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(b"<html>502 Bad Gateway</html>")

    with pytest.raises(ModelAPIError, match="the request failed"):
        await model.request(prompt(), None, ModelRequestParameters())


async def test_no_settings_sends_no_sampling_keys(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(content="ok"))

    await model.request(prompt(), None, ModelRequestParameters())

    assert set(server.last_body) == {"model", "messages"}


async def test_timeout_setting_raises_model_api_error(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue(openai_completion(content="late"), delay=1.0)

    with pytest.raises(ModelAPIError, match="timed out") as caught:
        await model.request(prompt(), {"timeout": 0.2}, ModelRequestParameters())

    assert not isinstance(caught.value, ModelHTTPError)


ERRORS = [
    pytest.param(
        400,
        openai_error(
            "invalid_request_error",
            "Invalid 'messages[1].content': string too long.",
            code="string_above_max_length",
            param="messages[1].content",
        ),
        "string too long",
        id="400",
    ),
    pytest.param(
        401,
        openai_error("invalid_request_error", "Incorrect API key provided: sk-test-***RET.", code="invalid_api_key"),
        "Incorrect API key provided",
        id="401",
    ),
    pytest.param(
        429,
        openai_error(
            "requests", "Rate limit reached for gpt-4o-mini on requests per min (RPM).", code="rate_limit_exceeded"
        ),
        "Rate limit reached",
        id="429",
    ),
    pytest.param(
        500,
        openai_error("server_error", "The server had an error while processing your request. Sorry about that!"),
        "The server had an error",
        id="500",
    ),
]


@pytest.mark.parametrize(("status", "body", "message"), ERRORS)
async def test_error_status_raises_model_http_error(
    server: WireServer, model: OpenAIChatModel, status: int, body: dict[str, Any], message: str
) -> None:
    server.queue(body, status=status)

    with pytest.raises(ModelHTTPError) as caught:
        await model.request(prompt(), None, ModelRequestParameters())

    error = caught.value
    assert error.status_code == status
    assert error.model_name == "gpt-4o-mini"
    assert message in str(error)
    assert error.body == body["error"]
    assert API_KEY not in messages_printed_for(error)
    assert len(server.requests) == 1, "max_retries=0 must reach the SDK"


async def test_sdk_retries_up_to_max_retries(server: WireServer) -> None:
    server.queue(openai_error("server_error", "try again"), status=500, headers={"retry-after-ms": "10"})
    server.queue(openai_completion(content="second time lucky"))
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, max_retries=1)

    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.text == "second time lucky"
    assert len(server.requests) == 2


async def test_closed_port_raises_model_api_error() -> None:
    model = OpenAIChatModel("gpt-4o-mini", base_url=closed_port_url("/v1"), api_key=API_KEY, max_retries=0)

    async with model.client:
        with pytest.raises(ModelAPIError, match=r"cannot connect to http://127\.0\.0\.1") as caught:
            await model.request(prompt(), None, ModelRequestParameters())

    assert not isinstance(caught.value, ModelHTTPError)
    assert API_KEY not in messages_printed_for(caught.value)


async def test_answer_without_choices_raises_model_api_error(server: WireServer, model: OpenAIChatModel) -> None:
    server.queue({**openai_completion(content="x"), "choices": []})

    with pytest.raises(ModelAPIError, match="without any choices"):
        await model.request(prompt(), None, ModelRequestParameters())


async def test_api_key_echoed_by_the_server_is_masked(server: WireServer, model: OpenAIChatModel) -> None:
    # Some proxies echo the whole key back; it must not reach our messages or their causes.
    server.queue(
        openai_error("invalid_request_error", f"Incorrect API key provided: {API_KEY}.", code="invalid_api_key"),
        status=401,
    )

    with pytest.raises(ModelHTTPError) as caught:
        await model.request(prompt(), None, ModelRequestParameters())

    assert caught.value.status_code == 401
    assert "Incorrect API key provided: ***." in str(caught.value)
    assert API_KEY not in messages_printed_for(caught.value)


async def test_infer_model_reads_key_and_base_url_from_env(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.queue(openai_completion(content="hi"))

    model = infer_model("openai:gpt-4o-mini")

    assert isinstance(model, OpenAIChatModel)
    assert (model.model_name, model.system) == ("gpt-4o-mini", "openai")
    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())
    assert response.text == "hi"
    assert server.requests[-1].headers["authorization"] == "Bearer sk-from-env"
    assert server.last_body["model"] == "gpt-4o-mini"


async def test_local_server_needs_no_key(server: WireServer) -> None:
    server.queue(openai_completion(content="hi", model="llama3.1:8b"))
    model = OpenAIChatModel("llama3.1:8b", base_url=server.base_url)

    async with model.client:
        response = await model.request(prompt(), None, ModelRequestParameters())

    assert response.model_name == "llama3.1:8b"
    assert server.requests[-1].headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_given_client_is_used(server: WireServer) -> None:
    server.queue(openai_completion(content="hi"))
    client = openai.AsyncOpenAI(api_key=API_KEY, base_url=server.base_url, max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", client=client)

    async with client:
        await model.request(prompt(), None, ModelRequestParameters())

    assert model.client is client
    assert len(server.requests) == 1


def test_client_and_api_key_together_are_refused() -> None:
    client = openai.AsyncOpenAI(api_key=API_KEY)
    with pytest.raises(UserError, match="either `client` or"):
        OpenAIChatModel("gpt-4o-mini", client=client, api_key=API_KEY)


def test_missing_credentials_raise_user_error() -> None:
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")


def test_missing_sdk_raises_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail
    monkeypatch.delitem(sys.modules, "approvals.engines.native.models.openai")

    with pytest.raises(UserError, match=r"install 'agent-approvals\[openai\]'"):
        importlib.import_module("approvals.engines.native.models.openai")
