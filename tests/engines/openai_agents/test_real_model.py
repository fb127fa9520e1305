"""An OpenAI Agents agent on the real local model server (llama.cpp, Gemma 3 270M), through the SDK's own client.

The SDK talks to the server with `OpenAIChatCompletionsModel`. Two things stand between them,
both on the server's side, as for pydantic-ai (tests/real_model/pydantic_ai_agents.py):
- llama-cpp-python's handler forces a tool only when `tool_choice` names one: the first request
  names the refund tool; once a call has its output no tools are offered (`FirstStepTools`),
  so the 270M model answers in words;
- its request schema refuses `"content": null` in an assistant message with tool calls, which
  OpenAI's API accepts and the SDK sends: `NullContentAsEmpty` sends `""` instead.
An approved refund ends the run with its output (`tool_use_behavior="stop_on_first_tool"`); a
denied one goes back to the model, which reads the denial and answers.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Tool, function_tool
from agents.items import ModelResponse, TResponseInputItem
from openai import AsyncOpenAI

from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Approve, Deny
from approvals.engines import get_engine
from approvals.engines.view import ToolDeniedPart
from approvals.store import Actor, Database, Store
from approvals.store.migrate import upgrade
from approvals.worker.resumer import AgentRegistry, Resumer

from ...llm_server import MODEL_ALIAS, LocalModelServer

pytestmark = pytest.mark.anyio


class NullContentAsEmpty(httpx.AsyncBaseTransport):
    """Sends `""` where the SDK sends `"content": null` beside tool calls (llama-cpp-python refuses null)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request(request.method, request.url, headers=headers, json=body)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class FirstStepTools(OpenAIChatCompletionsModel):
    """The SDK's chat completions model, offering the tools (forced) only until a call has its output."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        if isinstance(input, list) and any(dict(item).get("type") == "function_call_output" for item in input):
            tools, model_settings = [], dataclasses.replace(model_settings, tool_choice=None)
        return await super().get_response(system_instructions, input, model_settings, tools, *args, **kwargs)


SETTINGS = ModelSettings(tool_choice="refund", temperature=0.0, max_tokens=96, extra_body={"seed": 7})


def refund_agent(client: AsyncOpenAI, refunds: list[tuple[str, float]]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: The order to refund.
            amount: How much to refund, in euros.
        """
        refunds.append((order_id, amount))
        return f"Refunded {amount} EUR on order {order_id}."

    return Agent(
        name="real-openai-agents",
        instructions="You are a shop assistant. Use the refund tool to refund orders.",
        model=FirstStepTools(model=MODEL_ALIAS, openai_client=client),
        model_settings=SETTINGS,
        tools=[refund],
        tool_use_behavior="stop_on_first_tool",
    )


@pytest.mark.parametrize("verdict", ["approve", "deny"])
async def test_a_real_models_refund_waits_for_a_person_then_runs_once_or_never(
    llm_server: LocalModelServer, tmp_path: Path, verdict: str
) -> None:
    refunds: list[tuple[str, float]] = []
    url = f"sqlite:///{tmp_path}/approvals.db"
    upgrade(url)
    database = Database(url)
    store = Store(database)
    client = AsyncOpenAI(
        base_url=llm_server.base_url,
        api_key="local",
        http_client=httpx.AsyncClient(transport=NullContentAsEmpty(), timeout=120),
    )
    worker = Resumer(store, AgentRegistry([refund_agent(client, refunds)]))
    try:
        run_id = await store.runs.start_run(
            "real-openai-agents", "Please refund order A-1, 25 euros.", actor=Actor("shop", "reviewer")
        )
        assert await worker.resume(run_id) == run_id
        run = await store.runs.get_run(run_id)
        assert run.status == RunStatus.AWAITING_APPROVAL, run.error
        [call] = await store.calls.run_calls(run_id)
        assert call.tool_name == "refund" and set(call.args) == {"order_id", "amount"}
        assert refunds == []

        decided = Approve(args_digest=call.args_digest) if verdict == "approve" else Deny(reason="Needs a manager.")
        await store.calls.decide(call.id, decided, actor=Actor("alice", "reviewer"))
        assert await worker.resume(run_id) == run_id
        run = await store.runs.get_run(run_id)
        assert run.status == RunStatus.COMPLETED, run.error
        call = await store.calls.get_call(call.id)
        if verdict == "approve":
            assert refunds == [(call.args["order_id"], call.args["amount"])]
            assert call.status == CallStatus.SUCCEEDED and run.output == call.result
        else:
            assert refunds == [] and call.status == CallStatus.DENIED
            codec = get_engine("openai_agents").codec
            assert codec is not None
            view = codec.view(await store.runs.load_history(run_id))
            denials = [p for m in view for p in m.parts if isinstance(p, ToolDeniedPart)]
            assert [(p.tool_call_id, p.reason) for p in denials] == [(call.tool_call_id, "Needs a manager.")]
            assert isinstance(run.output, str)  # the model's words, once it read the denial
    finally:
        await client.close()
        await database.dispose()
