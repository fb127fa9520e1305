"""Each framework's agent on the real local model server (llama.cpp, Gemma 3 270M), through the framework's own client.

The agents are the frameworks' as a user writes them, on their own OpenAI-compatible clients:
a LangGraph `create_agent` graph with `HumanInTheLoopMiddleware` on LangChain's `ChatOpenAI`,
and an OpenAI Agents `Agent` with a `needs_approval` tool on the SDK's
`OpenAIChatCompletionsModel`. Our real worker runs them (`ApprovalService.start_run`,
`Resumer.resume`) on SQLite and PostgreSQL: the run pauses on the refund with arguments its
tool's schema validated; approved, the refund runs once and the run completes; denied, the
reason is in the framework's stored history and the model's next request carried it.

What stands between the frameworks and llama-cpp-python's server, as for pydantic-ai
(tests/real_model/pydantic_ai_agents.py), all on the server's side:
- its `chatml-function-calling` handler forces a tool only when `tool_choice` names one: each
  agent names the refund tool until the call was answered, and then offers no tools, so the
  270M model answers in words instead of calling it again;
- its request schema refuses `"content": null` in an assistant message with tool calls, which
  OpenAI's API accepts and both clients send: `ServerWire` sends `""` instead;
- it reads `max_tokens`, not `max_completion_tokens` (what `ChatOpenAI` sends): `extra_body`.
Nothing asserts on the model's words.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import agents
import httpx
import pytest
from agents import ModelSettings as AgentsModelSettings
from agents import OpenAIChatCompletionsModel
from agents.items import ModelResponse as AgentsModelResponse
from agents.items import TResponseInputItem
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain.tools import tool
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI

from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Approve, Deny
from approvals.engines.langgraph._history import unwrap
from approvals.engines.view import ToolDeniedPart
from approvals.service import ApprovalService
from approvals.store import Actor, Store
from approvals.worker.resumer import AgentRegistry, Resumer

from ...llm_server import MODEL_ALIAS, LocalModelServer
from ...store.conftest import *  # noqa: F403  (db_url, store: SQLite and PostgreSQL)

pytestmark = [pytest.mark.anyio, pytest.mark.real_model]

AGENT = "real-refunds"
PROMPT = "Please refund order A-1, 25 euros."
INSTRUCTIONS = "You are a shop assistant. Use the refund tool to refund orders."
REASON = "Refunds need a manager's signature."
STARTER = Actor("shop", "reviewer", person=False)
REVIEWER = Actor("alice", "reviewer")
SAMPLING: dict[str, Any] = {"temperature": 0.0, "seed": 7, "max_tokens": 96}
FORCE_REFUND = {"type": "function", "function": {"name": "refund"}}
"""llama-cpp-python's `chatml-function-calling` handler forces a tool only when `tool_choice` names it."""


class ServerWire(httpx.AsyncBaseTransport):
    """What passes between a framework's OpenAI client and the server: recorded, with the one fix the server needs.

    llama-cpp-python's request schema refuses `"content": null` in an assistant message with
    tool calls, which OpenAI's API accepts and the clients send: `""` is sent instead. Every
    chat completion request's messages are kept (`requests`), as sent.
    """

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.requests: list[list[dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            self.requests.append(body.get("messages", []))
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request(request.method, request.url, headers=headers, json=body)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Shop:
    """One test's refund tool's real effects, and the wire to the model server."""

    base_url: str
    refunds: list[tuple[str, float]] = field(default_factory=list)
    wire: ServerWire = field(default_factory=ServerWire)

    def refund(self, order_id: str, amount: float) -> str:
        self.refunds.append((order_id, amount))
        return f"Refunded {amount} EUR on order {order_id}."

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=self.wire, timeout=120)


# LangGraph: a `create_agent` graph with `HumanInTheLoopMiddleware`, on LangChain's `ChatOpenAI`.


class RefundFirst(AgentMiddleware[Any, Any, Any]):
    """Names the refund tool in `tool_choice` until a refund call was answered; then offers no tools.

    Once the model has its answer (a result or a denial), the 270M model is left to answer in words.
    """

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any]:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return await handler(request.override(tools=[], tool_choice=None))
        return await handler(request.override(tool_choice=FORCE_REFUND))


def langgraph_agent(shop: Shop) -> Any:
    @tool(parse_docstring=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: The order to refund.
            amount: How much to refund, in euros.
        """
        return shop.refund(order_id, amount)

    model = ChatOpenAI(
        model=MODEL_ALIAS,
        base_url=shop.base_url,
        api_key="local",  # type: ignore[arg-type]
        http_async_client=shop.client(),
        max_retries=0,
        temperature=SAMPLING["temperature"],
        seed=SAMPLING["seed"],
        extra_body={"max_tokens": SAMPLING["max_tokens"]},  # its `max_tokens` goes out as `max_completion_tokens`
    )
    return create_agent(
        model,
        tools=[refund],
        system_prompt=INSTRUCTIONS,
        middleware=[RefundFirst(), HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
        name=AGENT,
    )


def langgraph_told(history: list[Any], tool_call_id: str) -> str | None:
    """What the graph's messages told the model about a call: its tool message's content."""
    for message in map(unwrap, history):
        if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
            return str(message.content)
    return None


# OpenAI Agents: an `agents.Agent` with a `needs_approval` tool, on the SDK's `OpenAIChatCompletionsModel`.


class RefundFirstCompletions(OpenAIChatCompletionsModel):
    """The SDK's chat completions model, offering no tools once a call has its output (`tool_choice` names refund)."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: AgentsModelSettings,
        tools: list[agents.Tool],
        *args: Any,
        **kwargs: Any,
    ) -> AgentsModelResponse:
        if isinstance(input, list) and any(dict(item).get("type") == "function_call_output" for item in input):
            tools, model_settings = [], dataclasses.replace(model_settings, tool_choice=None)
        return await super().get_response(system_instructions, input, model_settings, tools, *args, **kwargs)


def openai_agents_agent(shop: Shop) -> Any:
    @agents.function_tool(needs_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: The order to refund.
            amount: How much to refund, in euros.
        """
        return shop.refund(order_id, amount)

    client = AsyncOpenAI(base_url=shop.base_url, api_key="local", http_client=shop.client(), max_retries=0)
    return agents.Agent(
        name=AGENT,
        instructions=INSTRUCTIONS,
        model=RefundFirstCompletions(model=MODEL_ALIAS, openai_client=client),
        model_settings=AgentsModelSettings(
            tool_choice="refund",
            temperature=SAMPLING["temperature"],
            max_tokens=SAMPLING["max_tokens"],
            extra_body={"seed": SAMPLING["seed"]},
        ),
        tools=[refund],
    )


def openai_agents_told(history: list[Any], tool_call_id: str) -> str | None:
    """What the SDK's input items told the model about a call: its `function_call_output`'s output."""
    for stored in history:
        item = stored.item
        if item.get("type") == "function_call_output" and item.get("call_id") == tool_call_id:
            return str(item["output"])
    return None


@dataclass(frozen=True)
class Framework:
    agent: Callable[[Shop], Any]
    """The framework's agent, its refund tool gated, on the framework's own OpenAI-compatible client."""
    told: Callable[[list[Any], str], str | None]
    """What the stored history (the framework's own messages) says the model was told about a call."""


FRAMEWORKS = {
    "langgraph": Framework(langgraph_agent, langgraph_told),
    "openai_agents": Framework(openai_agents_agent, openai_agents_told),
}


@pytest.fixture
async def shop(llm_server: LocalModelServer) -> AsyncIterator[Shop]:
    shop = Shop(llm_server.base_url)
    yield shop
    await shop.wire.aclose()


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize("verdict", ["approve", "deny"])
async def test_a_frameworks_agent_on_the_real_model_pauses_then_runs_once_or_hears_the_denial(
    shop: Shop, store: Store, framework: str, verdict: str
) -> None:
    registry = AgentRegistry([FRAMEWORKS[framework].agent(shop)])
    service = ApprovalService(store, registry)
    worker = Resumer(store, registry)

    run_id = await service.start_run(AGENT, PROMPT, actor=STARTER)
    assert await worker.resume(run_id) == run_id
    run = await store.runs.get_run(run_id)
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.engine == framework
    [call] = await store.calls.run_calls(run_id)
    assert call.tool_name == "refund" and set(call.args) == {"order_id", "amount"}
    assert isinstance(call.args["order_id"], str) and isinstance(call.args["amount"], float)
    tool = service.registered_tool(AGENT, "refund")
    assert tool is not None and tool.validate_args(call.args) is not None  # what a reviewer sees, the tool accepts
    assert shop.refunds == []

    verdict_ = Approve(args_digest=call.args_digest) if verdict == "approve" else Deny(reason=REASON)
    await service.decide(call.id, verdict_, actor=REVIEWER)
    requests_before_resume = len(shop.wire.requests)
    assert await worker.resume(run_id) == run_id
    run = await store.runs.get_run(run_id)
    assert run.status == RunStatus.COMPLETED, run.error
    call = await store.calls.get_call(call.id)
    if verdict == "approve":
        order_id, amount = call.args["order_id"], call.args["amount"]
        assert shop.refunds == [(order_id, amount)]  # once, with the arguments the reviewer saw
        assert call.status == CallStatus.SUCCEEDED and call.result == f"Refunded {amount} EUR on order {order_id}."
    else:
        assert shop.refunds == [] and call.status == CallStatus.DENIED
        told = FRAMEWORKS[framework].told(await store.runs.load_history(run_id), call.tool_call_id)
        assert told is not None and REASON in told
        [asked_again, *_] = shop.wire.requests[requests_before_resume:]
        answers = [m for m in asked_again if m.get("role") == "tool" and m.get("tool_call_id") == call.tool_call_id]
        assert [m["content"] for m in answers] == [told]  # the model's next request carried it, as stored
        denials = [part for m in await service.history(run_id) for part in m.parts if isinstance(part, ToolDeniedPart)]
        assert [(d.tool_call_id, d.reason) for d in denials] == [(call.tool_call_id, REASON)]
