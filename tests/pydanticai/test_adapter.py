"""`PydanticAIAgent` on its own: decisions checked before anything runs, steps handed over, restarts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset

from approvals.engines.native.deferred import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolAnswered,
    ToolApproved,
    ToolDenied,
)
from approvals.engines.pydantic_ai import PydanticAIAgent
from approvals.exceptions import InvalidDeferredResults, UserError

from . import agents

pytestmark = pytest.mark.anyio


class Kept:
    """A `RunPersistence` that keeps what it is told, as a store would."""

    def __init__(self) -> None:
        self.executing: list[str] = []
        self.steps: list[list[Any]] = []

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        self.executing.extend(tool_call_ids)

    async def on_step(self, messages: list[Any]) -> None:
        self.steps.append(list(messages))


async def paused() -> tuple[PydanticAIAgent, list[Any], DeferredToolRequests]:
    shop = PydanticAIAgent(agents.shop)
    result = await shop.run("Refund A-1", deps={})
    assert isinstance(result.output, DeferredToolRequests)
    return shop, result.all_messages(), result.output


async def test_decisions_are_checked_before_anything_runs() -> None:
    shop, history, requests = await paused()
    (call,) = requests.approvals
    kept = Kept()
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "no decision for call"),
        ({call.tool_call_id: ToolApproved(args_digest="0" * 64)}, "digest mismatch"),
        ({call.tool_call_id: ToolApproved(override_args={"amount_cents": -5})}, "edited arguments are invalid"),
        ({call.tool_call_id: True, "other": False}, "not one of the calls waiting"),
    ]
    for approvals, problem in cases:
        with pytest.raises(InvalidDeferredResults, match=problem):
            await shop.run(
                None,
                message_history=history,
                deferred_tool_results=DeferredToolResults(approvals=approvals),
                persistence=kept,
            )
    assert kept.executing == [] and kept.steps == []
    with pytest.raises(UserError, match="waiting for decisions"):
        await shop.run(None, message_history=history, persistence=kept)


async def test_approved_calls_are_announced_first_and_each_step_before_its_model_request() -> None:
    shop, history, requests = await paused()
    (call,) = requests.approvals
    kept = Kept()
    done = await shop.run(
        None,
        message_history=history,
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: ToolDenied(message="No.")}),
        persistence=kept,
    )
    assert kept.executing == []  # a denial runs nothing
    (step,) = kept.steps
    assert [m.kind for m in step] == ["request"]  # the denial, stored before the model read it
    assert done.all_messages()[: len(history) + 1] == [*history, *step]
    assert isinstance(done.output, str) and "refund=denied:No." in done.output


async def test_a_run_whose_worker_died_during_the_model_request_asks_the_model_again() -> None:
    """The stored history ends with the request the model never answered: it is sent again, not changed."""
    answers: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers.append(len(messages))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "A-1"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("found it")])

    agent = Agent(FunctionModel(model), name="lookups", deps_type=dict)
    agent.tool_plain(name="lookup_order")(_lookup)
    wrapped = PydanticAIAgent(agent)
    kept = Kept()
    await wrapped.run("Find A-1", deps={}, persistence=kept)
    stored = [m for step in kept.steps for m in step]  # what a store holds when the worker dies now
    assert isinstance(stored[-1], ModelRequest)

    again = await wrapped.run(None, message_history=stored, deps={}, persistence=Kept())
    assert again.output == "found it"
    assert again.new_messages()[0].kind == "response"
    assert answers == [1, 3, 3]


def _lookup(order_id: str) -> str:
    return f"order {order_id}"


async def test_a_structured_output_type_is_kept_and_deferred_requests_are_added() -> None:
    class Refunded(BaseModel):
        order_id: str
        cents: int

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart("refund", {"order_id": "A-1", "amount_cents": 5}, tool_call_id="r")]
            )
        output_tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(output_tool, {"order_id": "A-1", "cents": 5}, tool_call_id="o")])

    agent = Agent(FunctionModel(model), name="typed", deps_type=dict, output_type=Refunded)
    agent.tool(requires_approval=True)(agents.refund)
    wrapped = PydanticAIAgent(agent)
    paused_run = await wrapped.run("Refund A-1", deps={})
    assert isinstance(paused_run.output, DeferredToolRequests)
    (call,) = paused_run.output.approvals
    done = await wrapped.run(
        None,
        message_history=paused_run.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
        deps={},
    )
    assert done.output == Refunded(order_id="A-1", cents=5)


async def test_an_external_tools_call_waits_for_a_persons_answer() -> None:
    lookup = ToolDefinition(
        name="crm_lookup",
        description="Look a customer up in the CRM (done by a person).",
        parameters_json_schema={
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
            "additionalProperties": False,
        },
    )

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("crm_lookup", {"email": "ann@example.com"}, tool_call_id="x")])
        return ModelResponse(parts=[TextPart(agents.outcomes_text(messages))])

    agent = Agent(FunctionModel(model), name="crm", toolsets=[ExternalToolset([lookup])])
    wrapped = PydanticAIAgent(agent)
    assert set(wrapped.tools) == {"crm_lookup"}
    paused_run = await wrapped.run("Who is Ann?")
    assert isinstance(paused_run.output, DeferredToolRequests)
    (call,) = paused_run.output.approvals
    assert (call.args, call.tool_def.description) == ({"email": "ann@example.com"}, lookup.description)
    assert call.reason is not None and "answer" in call.reason
    done = await wrapped.run(
        None,
        message_history=paused_run.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={call.tool_call_id: ToolAnswered(content="VIP since 2019")}
        ),
    )
    assert done.output == "crm_lookup=success:VIP since 2019"


async def test_a_tool_from_a_dynamic_toolset_waits_and_is_approved() -> None:
    """Tools made per run (`@agent.toolset`, like an MCP server's) are unknown until the run runs."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("archive", {"ticket": 7}, tool_call_id="a")])
        return ModelResponse(parts=[TextPart(agents.outcomes_text(messages))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="dynamic")

    @agent.toolset
    def per_run(ctx: RunContext[None]) -> FunctionToolset[None]:
        def archive(ticket: int) -> str:
            return f"archived {ticket}"

        return FunctionToolset([Tool(archive, requires_approval=True)])

    wrapped = PydanticAIAgent(agent)
    assert wrapped.tools == {}
    paused_run = await wrapped.run("Archive ticket 7")
    assert isinstance(paused_run.output, DeferredToolRequests)
    (call,) = paused_run.output.approvals
    assert (call.tool_name, call.args) == ("archive", {"ticket": 7})
    approve = DeferredToolResults(approvals={call.tool_call_id: ToolApproved(args_digest=call.args_digest)})
    done = await wrapped.run(None, message_history=paused_run.all_messages(), deferred_tool_results=approve)
    assert done.output == "archive=success:archived 7"
