"""A LlamaIndex `FunctionAgent` on the real local model server (llama.cpp, Gemma 3 270M), through `OpenAILike`.

The agent is LlamaIndex's as a user writes it, with its refund tool wrapped in `requires_approval`;
the engine pauses it on the real model's call and resumes it from the JSON of its snapshot. What
stands between LlamaIndex's OpenAI client and llama-cpp-python's server is worked around on the
client's side, as in tests/engines/real_model: the refund tool is named in `tool_choice` until its
call was answered, then no tools are offered (so the 270M model answers in words), and an assistant
message's `"content": null` is sent as `""` (`ServerWire`). Nothing asserts on the model's words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike  # type: ignore[import-untyped]  # ships no py.typed

from approvals.calls.engine_state import Snapshot
from approvals.calls.verdicts import Approve, Deny
from approvals.engines.llamaindex import requires_approval
from approvals.engines.llamaindex.engine import engine
from approvals.engines.seam import NO_HOOKS, Completed, Paused, Turn
from approvals.engines.view import ToolDeniedPart, ToolReturnPart

from ...llm_server import MODEL_ALIAS, LocalModelServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_model,
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"),
]

PROMPT = "Please refund order A-1, 25 euros."
INSTRUCTIONS = "You are a shop assistant. Use the refund tool to refund orders."
FORCE_REFUND = {"type": "function", "function": {"name": "refund"}}
"""llama-cpp-python's `chatml-function-calling` handler forces a tool only when `tool_choice` names it."""
Refunds = list[tuple[str, float]]
"""The refunds the tool made: (order id, euros)."""


class ServerWire(httpx.AsyncBaseTransport):
    """Sends an assistant message's `"content": null` as `""`: llama-cpp-python's request schema refuses null."""

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


class RefundFirst(OpenAILike):  # type: ignore[misc]  # untyped base (see the import)
    """Names the refund tool until its call was answered; then offers no tools."""

    def _prepare_chat_with_tools(self, tools: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        history = kwargs.get("chat_history") or []
        if any(message.role == MessageRole.TOOL for message in history):
            kwargs["tool_choice"] = None
            prepared: dict[str, Any] = super()._prepare_chat_with_tools([], *args, **kwargs)
            prepared.pop("tools", None)
            prepared.pop("tool_choice", None)
            return prepared
        kwargs["tool_choice"] = FORCE_REFUND
        prepared = super()._prepare_chat_with_tools(tools, *args, **kwargs)
        return prepared


def agent(server: LocalModelServer, refunds: Refunds, client: httpx.AsyncClient) -> Any:
    def refund(order_id: str, amount: float) -> str:
        """Refund an order: `amount` in euros."""
        refunds.append((order_id, amount))
        return f"Refunded {amount} EUR on order {order_id}."

    llm = RefundFirst(
        model=MODEL_ALIAS,
        api_base=server.base_url,
        api_key="local",
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0.0,
        max_tokens=96,
        timeout=120,
        async_http_client=client,
    )
    workflow = FunctionAgent(
        name="real-refunds",
        tools=[requires_approval(FunctionTool.from_defaults(refund))],
        llm=llm,
        system_prompt=INSTRUCTIONS,
        streaming=False,
    )
    return engine.adopt(workflow)


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
async def test_the_real_model_pauses_on_the_refund_and_the_verdict_decides_it(
    llm_server: LocalModelServer, tmp_path: Path, approve: bool
) -> None:
    refunds: Refunds = []
    async with httpx.AsyncClient(transport=ServerWire(), timeout=120) as client:
        await run(llm_server, refunds, client, approve)


async def run(
    server: LocalModelServer, refunds: list[tuple[str, float]], client: httpx.AsyncClient, approve: bool
) -> None:
    """Pause on the real model's refund call; resume from the snapshot's JSON with `approve` or a denial."""
    paused = await engine.resume(agent(server, refunds, client), Turn(run_id="r", prompt=PROMPT, deps=None), NO_HOOKS)
    assert isinstance(paused, Paused), paused
    (call,) = paused.requests.approvals
    assert call.tool_name == "refund" and set(call.args) == {"order_id", "amount"}
    assert refunds == []
    assert paused.snapshot is not None
    stored = Snapshot(version=paused.snapshot.version, data=json.loads(json.dumps(paused.snapshot.data)))
    history = engine.codec.load_array(json.dumps([engine.codec.dump_message(m) for m in paused.messages]))
    verdict = Approve(args_digest=call.args_digest) if approve else Deny(reason="Refunds need a manager.")
    turn = Turn(
        run_id="r", prompt=None, deps=None, verdicts={call.tool_call_id: verdict}, history=history, snapshot=stored
    )
    end = await engine.resume(agent(server, refunds, client), turn, NO_HOOKS)
    assert isinstance(end, Completed), end
    parts = [part for message in engine.codec.view(end.messages) for part in message.parts]
    if approve:
        assert refunds == [(call.args["order_id"], call.args["amount"])]
        assert any(isinstance(p, ToolReturnPart) and p.tool_call_id == call.tool_call_id for p in parts)
    else:
        assert refunds == []
        assert any(isinstance(p, ToolDeniedPart) and p.reason == "Refunds need a manager." for p in parts)
