"""Runs against a real OpenAI-compatible server (llama.cpp's, serving Gemma 3 270M).

No fake sits between our adapter and the server: what passes here passed a chat
template, a request validator and a grammar that someone else wrote.
"""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel

from approvals import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
    load_messages,
)
from approvals.engines.native.models import ModelRequestParameters, ModelSettings
from approvals.engines.native.models.openai import OpenAIChatModel

from ..llm_server import MODEL_ALIAS, LocalModelServer
from .agents import REFUNDS, make_refund_agent

PROMPT = "Please refund order A-1, 25 euros."


@pytest.fixture(autouse=True)
def no_refunds_yet() -> None:
    REFUNDS.clear()


@pytest.mark.parametrize("verdict", ["approve", "deny", "edit"])
def test_pause_store_and_resume_in_a_fresh_agent(llm_server: LocalModelServer, verdict: str) -> None:
    paused = make_refund_agent(llm_server.base_url).run_sync(PROMPT)

    assert isinstance(paused.output, DeferredToolRequests)
    [request] = paused.output.approvals
    assert request.tool_name == "refund"
    assert set(request.args) == {"order_id", "amount"}
    assert REFUNDS == []
    stored = paused.all_messages_json()

    decisions: dict[str, ToolApproved | ToolDenied] = {
        "approve": ToolApproved(),
        "deny": ToolDenied(message="Refunds above 20 euros need a manager."),
        "edit": ToolApproved(override_args={"order_id": "A-1", "amount": 20.0}),
    }
    decision = decisions[verdict]
    done = make_refund_agent(llm_server.base_url).run_sync(
        message_history=load_messages(stored),
        deferred_tool_results=DeferredToolResults(approvals={request.tool_call_id: decision}),
    )

    assert isinstance(done.output, str)
    final = done.all_messages()[-1]
    assert isinstance(final, ModelResponse) and final.model_name == MODEL_ALIAS and not final.tool_calls
    answered = done.all_messages()[-2].parts[0]
    if verdict == "approve":
        assert [(request.args["order_id"], float(request.args["amount"]))] == REFUNDS
        assert isinstance(answered, ToolReturnPart) and answered.source == "tool"
    elif verdict == "deny":
        assert REFUNDS == []
        assert isinstance(answered, ToolDeniedPart) and answered.reason == "Refunds above 20 euros need a manager."
    else:
        assert REFUNDS == [("A-1", 20.0)]
        assert isinstance(answered, ToolReturnPart) and answered.args_override == {"order_id": "A-1", "amount": 20.0}


def test_run_sync_three_times_on_one_agent(llm_server: LocalModelServer) -> None:
    agent: Agent[None] = Agent(
        OpenAIChatModel(MODEL_ALIAS, base_url=llm_server.base_url, max_retries=0),
        model_settings={"temperature": 0.0, "seed": 1, "max_tokens": 24},
    )

    outputs = [agent.run_sync(f"Say hello to customer {n}.").output for n in range(3)]

    assert all(isinstance(output, str) for output in outputs)


class RefundRequest(BaseModel):
    order_id: str
    amount: float


def test_structured_output_with_the_output_tool_forced(llm_server: LocalModelServer) -> None:
    agent = Agent(
        OpenAIChatModel(MODEL_ALIAS, base_url=llm_server.base_url, max_retries=0),
        output_type=RefundRequest,
        model_settings={"temperature": 0.0, "seed": 3, "max_tokens": 96, "tool_choice": "final_result"},
    )

    result = agent.run_sync("Order A-7 should be refunded 12.50 euros. Extract the refund request.")

    assert isinstance(result.output, RefundRequest)


def test_structured_output_when_the_server_refuses_required(
    llm_server: LocalModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """This server answers tool_choice="required" with a bare 500: the adapter asks with "auto" instead."""
    model = OpenAIChatModel(MODEL_ALIAS, base_url=llm_server.base_url, max_retries=0)
    agent = Agent(
        model, output_type=RefundRequest, retries=3, model_settings={"temperature": 0.0, "seed": 3, "max_tokens": 96}
    )

    with caplog.at_level(logging.WARNING, logger="approvals.engines.native.models"):
        result = agent.run_sync("Order A-7 should be refunded 12.50 euros. Extract the refund request.")

    assert "refused tool_choice='required'" in caplog.text
    assert isinstance(result.output, RefundRequest)


def shop_history(final: str = "Refunded 25.0 EUR on order 1.") -> list[ModelRequest | ModelResponse]:
    return [
        ModelRequest(parts=[SystemPromptPart(content="You are a shop assistant."), UserPromptPart(content=PROMPT)]),
        ModelResponse(
            parts=[ToolCallPart(tool_name="refund", args={"order_id": "1", "amount": 25.0}, tool_call_id="c")]
        ),
        ModelRequest(parts=[ToolReturnPart(tool_name="refund", content=final, tool_call_id="c")]),
    ]


@pytest.mark.anyio
async def test_a_turn_of_only_tool_calls_passes_the_servers_chat_template(llm_server: LocalModelServer) -> None:
    """The template reads `content` of every message: a missing one was an HTTP 500 on every resume."""
    model = OpenAIChatModel(MODEL_ALIAS, base_url=llm_server.base_url, max_retries=0)
    try:
        response = await model.request(shop_history(), {"max_tokens": 16, "temperature": 0.0}, ModelRequestParameters())
    finally:
        await model.close()

    assert response.model_name == MODEL_ALIAS and response.finish_reason in ("stop", "length")


@pytest.mark.anyio
async def test_offered_tools_reach_the_models_prompt(llm_server: LocalModelServer) -> None:
    """This server keeps tools out of the prompt unless `tool_choice` is sent: we send "auto"."""
    model = OpenAIChatModel(MODEL_ALIAS, base_url=llm_server.base_url, max_retries=0)
    prompt = [ModelRequest(parts=[SystemPromptPart(content="Use the refund tool."), UserPromptPart(content=PROMPT)])]
    settings: ModelSettings = {"max_tokens": 8, "temperature": 0.0, "seed": 7}
    tools = [make_refund_agent(llm_server.base_url).tools["refund"].tool_def]
    try:
        bare = await model.request(prompt, settings, ModelRequestParameters())
        offered = await model.request(prompt, settings, ModelRequestParameters(function_tools=tools))
    finally:
        await model.close()

    assert offered.usage.input_tokens > bare.usage.input_tokens + 100, (bare.usage, offered.usage)
