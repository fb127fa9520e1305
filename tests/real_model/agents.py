"""Agents that talk to the real local model server, for the tests in this folder and for `approvals serve`.

The server's address comes from `APPROVALS_TEST_LLM_BASE_URL`, so a served app (a
subprocess) can import `tests.real_model.agents:refund_agent` and reach the same server.
Sampling is deterministic (temperature 0, a seed); the first step forces the `refund`
tool through `tool_choice`, and later steps offer no tools, so a 270M model answers in
text instead of calling the tool again.
"""

from __future__ import annotations

import os
from typing import Any

from approvals import Agent, RunContext, ToolDefinition
from approvals.engines.native.models import ModelSettings
from approvals.engines.native.models.openai import OpenAIChatModel

from ..llm_server import MODEL_ALIAS

__all__ = ("REFUNDS", "SETTINGS", "make_refund_agent", "refund_agent")

SETTINGS: ModelSettings = {"temperature": 0.0, "seed": 7, "max_tokens": 96, "tool_choice": "refund"}
REFUNDS: list[tuple[str, float]] = []
"""What the refund tool really did, in this process."""


def first_step_only(ctx: RunContext[Any], definitions: list[ToolDefinition]) -> list[ToolDefinition]:
    """Tools on the model's first request; afterwards it is asked to answer in words."""
    return definitions if ctx.run_step <= 1 else []


def make_refund_agent(base_url: str, *, name: str = "real-refunds") -> Agent[None]:
    """A one-tool agent on the real server: every refund waits for a person."""
    agent: Agent[None] = Agent(
        OpenAIChatModel(MODEL_ALIAS, base_url=base_url, max_retries=0),
        name=name,
        instructions="You are a shop assistant. Use the refund tool to refund orders.",
        model_settings=SETTINGS,
        prepare_tools=first_step_only,
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


refund_agent = make_refund_agent(os.environ.get("APPROVALS_TEST_LLM_BASE_URL", "http://127.0.0.1:9/v1"))
