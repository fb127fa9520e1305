"""A pydantic-ai agent on the real local model server, through pydantic-ai's own OpenAI provider.

Two things stand between pydantic-ai and llama-cpp-python's server, both on the server's side:
- its chat handler forces a tool only when `tool_choice` names one (`{"type": "function", ...}`);
  pydantic-ai sends `"required"` for a single allowed tool, which the handler refuses (HTTP 500).
  Until the tool answered, the request names it through `extra_body`; afterwards no tools are
  offered, so the 270M model answers in words;
- its request schema refuses `"content": null` in an assistant message with tool calls, which
  OpenAI's API accepts and pydantic-ai sends. `NullContentAsEmpty` sends `""` instead.
Everything else is pydantic-ai's as it ships.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx2
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.capabilities import PrepareTools
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ..llm_server import MODEL_ALIAS

__all__ = ("REFUNDS", "make_pydantic_ai_refund_agent", "pydantic_ai_refund_agent")

REFUNDS: list[tuple[str, float]] = []
"""What the refund tool really did, in this process."""
_BASE: ModelSettings = {"temperature": 0.0, "seed": 7, "max_tokens": 96}


class NullContentAsEmpty(httpx2.AsyncBaseTransport):
    """Sends `""` where pydantic-ai sends `"content": null` beside tool calls (llama-cpp-python refuses null)."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx2.Request(request.method, request.url, headers=headers, json=body)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _before_any_result(ctx: RunContext[Any]) -> bool:
    """No tool has answered yet in the whole history (pydantic-ai counts `run_step` per call to `run`)."""
    return not any(isinstance(part, ToolReturnPart) for message in ctx.messages for part in message.parts)


def _settings(ctx: RunContext[Any]) -> ModelSettings:
    """Name the refund tool until it answered, as llama-cpp-python's handler needs to force it."""
    if _before_any_result(ctx):
        return {**_BASE, "extra_body": {"tool_choice": {"type": "function", "function": {"name": "refund"}}}}
    return _BASE


async def _first_step_only(ctx: RunContext[Any], definitions: list[ToolDefinition]) -> list[ToolDefinition]:
    return definitions if _before_any_result(ctx) else []


def make_pydantic_ai_refund_agent(base_url: str, *, name: str = "real-pydantic-ai") -> Agent[None, Any]:
    """A pydantic-ai agent whose refunds wait for a person."""
    provider = OpenAIProvider(
        base_url=base_url, api_key="local", http_client=httpx2.AsyncClient(transport=NullContentAsEmpty(), timeout=60)
    )
    agent: Agent[None, Any] = Agent(
        OpenAIChatModel(MODEL_ALIAS, provider=provider),
        name=name,
        instructions="You are a shop assistant. Use the refund tool to refund orders.",
        model_settings=_settings,
        output_type=[str, DeferredToolRequests],
        capabilities=[PrepareTools(_first_step_only)],
        retries={"tools": 0, "output": 2},
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: The order to refund.
            amount: How much to refund, in euros.
        """
        REFUNDS.append((order_id, amount))
        return f"Refunded {amount} EUR on order {order_id}."

    return agent


pydantic_ai_refund_agent = make_pydantic_ai_refund_agent(
    os.environ.get("APPROVALS_TEST_LLM_BASE_URL", "http://127.0.0.1:9/v1")
)
