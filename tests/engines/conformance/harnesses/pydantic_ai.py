"""pydantic-ai under the conformance suite: a real `pydantic_ai.Agent` scripted with pydantic-ai's `FunctionModel`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ..script import TOOLS_INSTRUCTIONS, Told, Turn, as_text, lookup_order_body, refund_body, told_text

_KINDS: dict[str, Literal["denied", "retry"]] = {"denied": "denied", "retried": "retry"}
"""pydantic-ai tells a denial, and arguments its tool refused, as a tool return with that outcome."""


def told(messages: Sequence[ModelMessage]) -> list[Told]:
    """Everything the model received about calls, in order."""
    said: list[Told] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                said.append(Told(_KINDS.get(part.outcome, "result"), part.tool_name, as_text(part.content)))
            elif isinstance(part, RetryPromptPart):
                said.append(Told("retry", part.tool_name or "", as_text(part.content)))
    return said


class PydanticAIHarness:
    """The pydantic-ai engine (`approvals.engines.pydantic_ai`): the registry adopts a `pydantic_ai.Agent`."""

    engine = "pydantic_ai"

    def agent(self, name: str, turns: Sequence[Turn]) -> Agent[dict[str, Any], str]:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            asked = sum(1 for m in messages if isinstance(m, ModelResponse))
            if asked < len(turns):
                return ModelResponse(
                    parts=[
                        ToolCallPart(tool, args, tool_call_id=f"call-{asked}-{i}")
                        for i, (tool, args) in enumerate(turns[asked])
                    ]
                )
            return ModelResponse(parts=[TextPart(told_text(told(messages)))])

        agent: Agent[dict[str, Any], str] = Agent(
            FunctionModel(respond, model_name="scripted"), name=name, deps_type=dict, instructions=TOOLS_INSTRUCTIONS
        )

        @agent.tool
        def lookup_order(ctx: RunContext[dict[str, Any]], order_id: str) -> str:
            """Look an order up."""
            return lookup_order_body(ctx.deps, order_id)

        @agent.tool(requires_approval=True)
        def refund(ctx: RunContext[dict[str, Any]], order_id: str, amount: Annotated[int, Field(gt=0)]) -> str:
            """Refund part or all of an order."""
            return refund_body(ctx.deps, order_id, amount)

        return agent
