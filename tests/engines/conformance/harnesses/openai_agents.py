"""The OpenAI Agents SDK under the conformance suite: a real `agents.Agent` scripted with an in-process `Model`.

The model reads what the SDK sends it, the Responses-style input items: its own calls and
each call's `function_call_output`. A denial reads as the engine words it (a person refused,
then the reason); arguments a tool refused read as the SDK words a failed call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Annotated, Any

from agents import Agent, RunContextWrapper, function_tool
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic import Field

from ..script import TOOLS_INSTRUCTIONS, Told, Turn, lookup_order_body, refund_body, told_text

DENIED = "DENIED: a person reviewed this call to"
REASON = "Reason: "
FAILED = "An error occurred while "

Respond = Callable[[list[dict[str, Any]]], list[TResponseOutputItem]]


class ScriptedModel(Model):
    """An SDK `Model` whose every response is `respond(input items)`: no network, no provider."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given: str | list[TResponseInputItem] = kwargs["input"] if "input" in kwargs else args[1]
        items = [{"role": "user", "content": given}] if isinstance(given, str) else [dict(i) for i in given]
        return ModelResponse(output=self.respond(items), usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def calls(turn: int, made: Turn) -> list[TResponseOutputItem]:
    """One scripted turn's calls as the SDK's function call items, their ids saying which turn made them."""
    return [
        ResponseFunctionToolCall(
            type="function_call",
            name=tool,
            arguments=json.dumps(args),
            call_id=f"call-{turn}-{i}",
            id=f"fc-{turn}-{i}",
            status="completed",
        )
        for i, (tool, args) in enumerate(made)
    ]


def text(content: str) -> list[TResponseOutputItem]:
    return [
        ResponseOutputMessage(
            type="message",
            id="msg-final",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=content, annotations=[])],
        )
    ]


def turns_made(items: Sequence[dict[str, Any]]) -> int:
    """How many scripted turns the model already made, from the call ids it sees."""
    return len({str(i["call_id"]).split("-")[1] for i in items if i.get("type") == "function_call"})


def told(items: Sequence[dict[str, Any]]) -> list[Told]:
    """Everything the model received about calls, in order."""
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    said: list[Told] = []
    for item in items:
        if item.get("type") != "function_call_output":
            continue
        tool, output = names.get(item["call_id"], ""), str(item.get("output"))
        if output.startswith(DENIED):
            said.append(Told("denied", tool, output.split(REASON, 1)[1]))
        elif output.startswith(FAILED):
            said.append(Told("retry", tool, output))
        else:
            said.append(Told("result", tool, output))
    return said


@function_tool
def lookup_order(ctx: RunContextWrapper[dict[str, Any]], order_id: str) -> str:
    """Look an order up."""
    return lookup_order_body(ctx.context, order_id)


@function_tool(needs_approval=True)
def refund(ctx: RunContextWrapper[dict[str, Any]], order_id: str, amount: Annotated[int, Field(gt=0)]) -> str:
    """Refund part or all of an order."""
    return refund_body(ctx.context, order_id, amount)


class OpenAIAgentsHarness:
    """The OpenAI Agents engine (`approvals.engines.openai_agents`): the registry adopts an `agents.Agent`."""

    engine = "openai_agents"

    def agent(self, name: str, turns: Sequence[Turn]) -> Agent[dict[str, Any]]:
        def respond(items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
            made = turns_made(items)
            return calls(made, turns[made]) if made < len(turns) else text(told_text(told(items)))

        return Agent(
            name=name,
            instructions=TOOLS_INSTRUCTIONS,
            model=ScriptedModel(respond),
            tools=[lookup_order, refund],
        )
