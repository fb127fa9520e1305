"""The native engine (`approvals.Agent`) under the conformance suite, scripted with its own `FunctionModel`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from approvals import Agent, RunContext, Tool
from approvals.engines.native.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
)
from approvals.engines.native.models import FunctionModel
from approvals.engines.native.models.function import AgentInfo

from ..script import TOOLS_INSTRUCTIONS, Told, Turn, as_text, lookup_order_body, refund_body, told_text


def lookup_order(ctx: RunContext[dict[str, Any]], order_id: str) -> str:
    """Look an order up."""
    return lookup_order_body(ctx.deps, order_id)


def refund(ctx: RunContext[dict[str, Any]], order_id: str, amount: Annotated[int, Field(gt=0)]) -> str:
    """Refund part or all of an order."""
    return refund_body(ctx.deps, order_id, amount)


def told(messages: Sequence[ModelMessage]) -> list[Told]:
    """Everything the model received about calls, in order."""
    said: list[Told] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                said.append(Told("result", part.tool_name, as_text(part.content)))
            elif isinstance(part, ToolDeniedPart):
                said.append(Told("denied", part.tool_name, part.reason))
            elif isinstance(part, RetryPromptPart):
                said.append(Told("retry", part.tool_name or "", part.content))
    return said


class NativeHarness:
    """Our own engine."""

    engine = "native"

    def agent(self, name: str, turns: Sequence[Turn]) -> Agent[dict[str, Any]]:
        def respond(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
            asked = sum(1 for m in messages if isinstance(m, ModelResponse))
            if asked < len(turns):
                calls = [
                    ToolCallPart(tool_name=tool, args=args, tool_call_id=f"call-{asked}-{i}")
                    for i, (tool, args) in enumerate(turns[asked])
                ]
                return ModelResponse(parts=list(calls))
            return ModelResponse(parts=[TextPart(content=told_text(told(messages)))])

        return Agent(
            FunctionModel(respond, model_name="scripted"),
            name=name,
            deps_type=dict,
            instructions=TOOLS_INSTRUCTIONS,
            tools=[Tool(lookup_order), Tool(refund, requires_approval=True)],
        )
