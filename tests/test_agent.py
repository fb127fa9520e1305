"""The run loop: pause on approval, resume from history plus decisions, limits and errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from approvals import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    InvalidDeferredResults,
    RunContext,
    ToolAnswered,
    ToolApproved,
    ToolDenied,
    ToolRetriesExceeded,
    UsageLimitExceeded,
    UsageLimits,
    UserError,
)
from approvals.engines.native._persistence import NoPersistence
from approvals.engines.native.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
    load_messages,
    model_facing_content,
)
from approvals.engines.native.models import AgentInfo, FunctionModel, TestModel
from approvals.engines.native.models.test import ScriptStep
from approvals.engines.native.usage import RunTotals

pytestmark = pytest.mark.anyio


class Shop:
    """Records what the tools really did."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, Decimal]] = []
        self.deleted: list[int] = []


def make_agent(model: Any, shop: Shop, **kwargs: Any) -> Agent[Shop]:
    agent: Agent[Shop] = Agent(model, name="shop", instructions="You run a shop.", deps_type=Shop, **kwargs)

    @agent.tool_plain
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look up an order."""
        return {"order_id": order_id, "total": "450.00"}

    @agent.tool(requires_approval=lambda ctx, args: args.amount > 100)
    def refund(ctx: RunContext[Shop], order_id: str, amount: Decimal) -> str:
        """Refund an order."""
        ctx.deps.refunds.append((order_id, amount))
        return f"refunded {amount}"

    @agent.tool(requires_approval=True)
    def delete_customer(ctx: RunContext[Shop], customer_id: int) -> str:
        """Delete a customer."""
        ctx.deps.deleted.append(customer_id)
        return "deleted"

    return agent


MIXED_STEP: list[tuple[str, dict[str, Any] | str]] = [
    ("lookup_order", {"order_id": "A-1"}),
    ("refund", {"order_id": "A-1", "amount": "20"}),
    ("refund", {"order_id": "A-1", "amount": "450"}),
    ("delete_customer", {"customer_id": "7"}),
]


async def paused_run(shop: Shop, **kwargs: Any) -> tuple[Agent[Shop], Any]:
    agent = make_agent(TestModel([MIXED_STEP]), shop, **kwargs)
    result = await agent.run("Refund A-1 and delete customer 7", deps=shop)
    return agent, result


async def test_mixed_step_runs_safe_calls_and_pauses_on_the_rest() -> None:
    shop = Shop()
    _, result = await paused_run(shop)
    assert result.paused
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [(c.tool_name, c.args) for c in requests.approvals] == [
        ("refund", {"order_id": "A-1", "amount": "450"}),
        ("delete_customer", {"customer_id": 7}),
    ]
    assert requests.approvals[1].tool_def.description == "Delete a customer."
    assert all(len(c.args_digest) == 64 for c in requests.approvals)
    assert shop.refunds == [("A-1", Decimal("20"))]  # the small refund ran, the large one waits
    assert shop.deleted == []
    first, response, results = result.all_messages()
    assert isinstance(first.parts[0], SystemPromptPart) and isinstance(first.parts[1], UserPromptPart)
    assert isinstance(response, ModelResponse) and len(response.tool_calls) == 4
    assert [type(p) for p in results.parts] == [ToolReturnPart, ToolReturnPart]


async def test_approve_and_deny_then_the_run_completes() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    big_refund, delete = paused.output.approvals
    resumed = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={
                big_refund.tool_call_id: True,
                delete.tool_call_id: ToolDenied(message="Customer has open orders."),
            }
        ),
    )
    assert shop.refunds == [("A-1", Decimal("20")), ("A-1", Decimal("450"))]
    assert shop.deleted == []
    assert resumed.output == (
        'Done. refund returned "refunded 450"; '
        "delete_customer was denied (Customer has open orders.), so I did not do it."
    )
    decided = resumed.new_messages()[0]
    assert isinstance(decided, ModelRequest)
    denial = decided.parts[1]
    assert isinstance(denial, ToolDeniedPart) and denial.reason == "Customer has open orders."
    assert resumed.run_id == paused.run_id


async def test_model_reads_the_denial_and_answers_it() -> None:
    seen: list[str] = []

    def model(messages: Sequence[Any], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(tool_name="delete_customer", args={"customer_id": 1}, tool_call_id="d1")]
            )
        seen.extend(model_facing_content(p) for p in last.parts)
        return ModelResponse(parts=[TextPart(content="Understood, I will not delete the customer.")])

    shop = Shop()
    agent = make_agent(FunctionModel(model), shop)
    paused = await agent.run("delete 1", deps=shop)
    done = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"d1": False}),
    )
    assert done.output == "Understood, I will not delete the customer."
    assert seen[0].startswith("DENIED") and "The reviewer gave no reason." in seen[0]


async def test_answer_on_the_tools_behalf_does_not_run_it() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    big_refund, delete = paused.output.approvals
    resumed = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={
                big_refund.tool_call_id: ToolAnswered(content="Refund issued by hand."),
                delete.tool_call_id: False,
            }
        ),
    )
    assert shop.refunds == [("A-1", Decimal("20"))]
    answer = resumed.new_messages()[0].parts[0]
    assert isinstance(answer, ToolReturnPart) and answer.source == "reviewer"
    assert answer.content == "Refund issued by hand."
    assert isinstance(resumed.output, str)
    assert "refund returned" in resumed.output


async def test_edited_arguments_are_validated_and_used() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    big_refund, delete = paused.output.approvals
    resumed = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={
                big_refund.tool_call_id: ToolApproved(override_args={"order_id": "A-1", "amount": "99.50"}),
                delete.tool_call_id: False,
            }
        ),
    )
    assert shop.refunds[-1] == ("A-1", Decimal("99.50"))
    result = resumed.new_messages()[0].parts[0]
    assert isinstance(result, ToolReturnPart)
    assert result.args_override == {"order_id": "A-1", "amount": "99.50"}
    assert "edited the arguments" in model_facing_content(result)


async def test_invalid_edit_is_refused_and_changes_nothing() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    big_refund, delete = paused.output.approvals
    history = paused.all_messages()
    with pytest.raises(InvalidDeferredResults) as err:
        await agent.run(
            deps=shop,
            message_history=history,
            deferred_tool_results=DeferredToolResults(
                approvals={
                    big_refund.tool_call_id: ToolApproved(override_args={"order_id": "A-1", "amount": "lots"}),
                    delete.tool_call_id: True,
                }
            ),
        )
    assert "the edited arguments are invalid" in str(err.value)
    assert "- amount: Input should be a valid decimal" in str(err.value)
    assert shop.deleted == [] and shop.refunds == [("A-1", Decimal("20"))]  # the valid approval did not run either
    assert history == paused.all_messages()


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ({"call_0_2": True}, "no decision for call 'call_0_3' (delete_customer)"),
        ({"call_0_2": True, "call_0_3": True, "nope": True}, "call 'nope' is not one of the calls waiting"),
        ({"call_0_2": True, "call_0_3": True, "call_0_0": True}, "call 'call_0_0' was already decided or run"),
    ],
)
async def test_missing_unknown_or_duplicate_decisions_change_nothing(decisions: dict[str, bool], expected: str) -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    with pytest.raises(InvalidDeferredResults, match=re.escape(expected)):
        await agent.run(
            deps=shop,
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=decisions),
        )
    assert shop.deleted == [] and len(shop.refunds) == 1


async def test_resuming_without_decisions_or_deciding_twice_is_an_error() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    with pytest.raises(UserError, match="waiting for decisions on calls call_0_2, call_0_3"):
        await agent.run(deps=shop, message_history=paused.all_messages())
    done = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call_0_2": False, "call_0_3": False}),
    )
    with pytest.raises(InvalidDeferredResults, match="no calls waiting"):
        await agent.run(
            deps=shop,
            message_history=done.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_0_2": True}),
        )


async def test_approval_bound_to_a_digest() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    big_refund, delete = paused.output.approvals
    with pytest.raises(InvalidDeferredResults, match="digest mismatch"):
        await agent.run(
            deps=shop,
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(
                approvals={big_refund.tool_call_id: ToolApproved(args_digest="0" * 64), delete.tool_call_id: False}
            ),
        )
    ok = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={
                big_refund.tool_call_id: ToolApproved(args_digest=big_refund.args_digest),
                delete.tool_call_id: False,
            }
        ),
    )
    assert not ok.paused


async def test_a_second_pause_after_resuming() -> None:
    shop = Shop()
    script: list[ScriptStep] = [
        ("delete_customer", {"customer_id": 1}),
        ("delete_customer", {"customer_id": 2}),
        "All done.",
    ]
    agent = make_agent(TestModel(script), shop)
    first = await agent.run("delete 1 then 2", deps=shop)
    second = await agent.run(
        deps=shop,
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call_0_0": True}),
    )
    assert isinstance(second.output, DeferredToolRequests)
    assert second.output.approvals[0].args == {"customer_id": 2}
    third = await agent.run(
        deps=shop,
        message_history=second.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call_1_0": True}),
    )
    assert third.output == "All done."
    assert shop.deleted == [1, 2]


async def test_retries_on_invalid_args_are_exhausted() -> None:
    shop = Shop()
    bad = ("refund", {"order_id": "A-1", "amount": "many"})
    agent = make_agent(TestModel([bad, bad, bad]), shop, retries=1)
    with pytest.raises(ToolRetriesExceeded, match="'refund' exceeded its retry limit of 1"):
        await agent.run("refund", deps=shop)


async def test_invalid_args_are_sent_back_and_the_model_recovers() -> None:
    shop = Shop()
    agent = make_agent(TestModel([("lookup_order", {}), ("lookup_order", {"order_id": "A-1"}), "ok"]), shop)
    result = await agent.run("look", deps=shop)
    retry = result.all_messages()[2].parts[0]
    assert isinstance(retry, RetryPromptPart) and "order_id: Field required" in retry.content
    assert result.output == "ok"


async def test_history_json_round_trip_across_a_pause_in_a_fresh_agent() -> None:
    """The flow a pydantic-ai user knows: pause, serialize, load elsewhere, resume with decisions."""
    shop = Shop()
    _, paused = await paused_run(shop)
    stored = paused.all_messages_json()
    ids = paused.output.tool_call_ids

    fresh_agent = make_agent(TestModel([MIXED_STEP], final_text="Refunded 450; customer 7 deleted."), shop)
    history = load_messages(stored)
    assert history == paused.all_messages()
    result = await fresh_agent.run(
        deps=shop,
        message_history=history,
        deferred_tool_results=DeferredToolResults(approvals=dict.fromkeys(ids, True)),
    )
    assert result.output == "Refunded 450; customer 7 deleted."
    assert shop.deleted == [7]
    assert shop.refunds[-1] == ("A-1", Decimal("450"))


async def test_request_limit() -> None:
    shop = Shop()
    agent = make_agent(TestModel([("lookup_order", {"order_id": "x"})] * 10), shop)
    with pytest.raises(UsageLimitExceeded, match="request limit of 3"):
        await agent.run("loop", deps=shop, usage_limits=UsageLimits(request_limit=3))


async def test_tool_calls_limit_counts_across_a_pause() -> None:
    shop = Shop()
    agent = make_agent(TestModel([MIXED_STEP]), shop, usage_limits=UsageLimits(tool_calls_limit=3))
    paused = await agent.run("go", deps=shop)  # 2 safe calls ran
    assert isinstance(paused.output, DeferredToolRequests)
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit of 3"):
        await agent.run(
            deps=shop,
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=dict.fromkeys(paused.output.tool_call_ids, True)),
        )
    assert shop.deleted == []


async def test_token_limit() -> None:
    shop = Shop()
    agent = make_agent(TestModel(["a long answer " * 50]), shop)
    with pytest.raises(UsageLimitExceeded, match="total_tokens_limit of 10"):
        await agent.run("hi", deps=shop, usage_limits=UsageLimits(total_tokens_limit=10))


class Verdict(BaseModel):
    approved: bool
    note: str


async def test_structured_output_through_the_final_result_tool() -> None:
    script: list[ScriptStep] = [
        "plain text is not allowed",
        ("final_result", {"approved": "maybe"}),
        ("final_result", {"approved": True, "note": "fine"}),
    ]
    agent: Agent[None, Verdict] = Agent(TestModel(script), output_type=Verdict, retries=2)
    result = await agent.run("judge")
    assert result.output == Verdict(approved=True, note="fine")
    retries = [
        p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, RetryPromptPart)
    ]
    assert "Respond by calling the 'final_result' tool" in retries[0].content
    assert "note: Field required" in retries[1].content


async def test_scalar_structured_output_is_wrapped() -> None:
    agent: Agent[None, int] = Agent(TestModel([("final_result", {"response": "42"})]), output_type=int)
    assert (await agent.run("answer")).output == 42


def test_run_sync_and_model_by_name() -> None:
    agent = Agent("test", instructions="Be brief.")
    result = agent.run_sync("hello")
    assert result.output == "Done."
    assert isinstance(result.all_messages()[0].parts[0], SystemPromptPart)


async def test_tool_return_content_goes_to_the_model_and_metadata_stays_apart() -> None:
    from approvals import ToolReturn

    def shot() -> ToolReturn:
        return ToolReturn(return_value="clicked", content="The page now shows a receipt.", metadata={"px": 3})

    agent = Agent(TestModel([("shot", {})]), tools=[shot])
    result = await agent.run("click")
    results = result.all_messages()[2]
    assert isinstance(results.parts[0], ToolReturnPart) and results.parts[0].metadata == {"px": 3}
    assert isinstance(results.parts[1], UserPromptPart) and results.parts[1].content == "The page now shows a receipt."


async def test_no_model_and_no_prompt_are_clear_errors() -> None:
    with pytest.raises(UserError, match="No model"):
        await Agent().run("hi")
    with pytest.raises(UserError, match="needs a prompt"):
        await Agent("test").run()


async def test_before_approved_calls_runs_first_and_can_stop_execution() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    decisions = DeferredToolResults(approvals={"call_0_2": True, "call_0_3": False})
    seen: list[list[str]] = []

    class Refuse(NoPersistence):
        async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
            seen.append(tool_call_ids)
            raise RuntimeError("store unavailable")

    with pytest.raises(RuntimeError, match="store unavailable"):
        await agent.run(
            deps=shop,
            message_history=paused.all_messages(),
            deferred_tool_results=decisions,
            persistence=Refuse(),
        )
    assert seen == [["call_0_2"]]  # only the approved call, denied ones never run
    assert len(shop.refunds) == 1  # nothing ran because the hook failed

    class Record(NoPersistence):
        async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
            seen.append([*tool_call_ids, f"refunds={len(shop.refunds)}"])

    await agent.run(
        deps=shop, message_history=paused.all_messages(), deferred_tool_results=decisions, persistence=Record()
    )
    assert seen[-1] == ["call_0_2", "refunds=1"]
    assert len(shop.refunds) == 2


async def test_on_step_gets_each_step_before_the_next_request_and_the_last_step_stays_in_the_result() -> None:
    requests = 0
    steps: list[tuple[int, list[ModelRequest | ModelResponse]]] = []

    def model(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
        nonlocal requests
        requests += 1
        if requests == 1:
            return ModelResponse(
                parts=[ToolCallPart(tool_name="lookup_order", args={"order_id": "A-1"}, tool_call_id="c1")]
            )
        return ModelResponse(parts=[TextPart(content="It costs 450.")])

    class Steps(NoPersistence):
        async def on_step(self, messages: list[ModelRequest | ModelResponse]) -> None:
            steps.append((requests, list(messages)))

    shop = Shop()
    result = await make_agent(FunctionModel(model), shop).run("Look up A-1", deps=shop, persistence=Steps())
    prompt, response, results, answer = result.new_messages()
    assert steps == [(0, [prompt]), (1, [response, results])]  # each step before the next request
    assert isinstance(answer, ModelResponse) and answer.text == "It costs 450."  # the last step is only in the result


# --- model settings -------------------------------------------------------------------------


def test_a_misspelt_or_mistyped_setting_is_refused_at_once() -> None:
    with pytest.raises(UserError, match=r"unknown setting 'max_tokns'.*known settings: max_tokens"):
        Agent(TestModel(), model_settings={"max_tokns": 5})  # type: ignore[arg-type]
    agent = Agent(TestModel())
    with pytest.raises(UserError, match=r"temperature: Input should be a valid number"):
        agent.run_sync("hi", model_settings={"temperature": "hot"})


async def test_run_settings_override_the_agents_key_by_key() -> None:
    seen: list[Any] = []

    def answer(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
        seen.append(info.model_settings)
        return ModelResponse(parts=[TextPart(content="ok")])

    agent = Agent(FunctionModel(answer), model_settings={"max_tokens": 64, "temperature": 0.0, "seed": 1})
    await agent.run("hi", model_settings={"temperature": 0.7, "extra_body": {"top_k": 5}})

    assert seen == [{"max_tokens": 64, "temperature": 0.7, "seed": 1, "extra_body": {"top_k": 5}}]


def _settings_recorder(steps: list[ModelResponse]) -> tuple[FunctionModel, list[Any]]:
    seen: list[Any] = []

    def answer(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
        seen.append((info.model_settings or {}).get("tool_choice"))
        return steps[len(seen) - 1]

    return FunctionModel(answer), seen


async def test_a_forced_tool_choice_holds_until_a_call_is_accepted_then_resets() -> None:
    model, seen = _settings_recorder(
        [
            ModelResponse(parts=[ToolCallPart(tool_name="lookup_order", args="{}", tool_call_id="c1")]),  # invalid
            ModelResponse(parts=[ToolCallPart(tool_name="lookup_order", args={"order_id": "A"}, tool_call_id="c2")]),
            ModelResponse(parts=[TextPart(content="done")]),
        ]
    )
    agent = make_agent(model, Shop(), model_settings={"tool_choice": "lookup_order"})

    result = await agent.run("Look up A", deps=Shop())

    assert result.output == "done"
    assert seen == ["lookup_order", "lookup_order", None], "a retry prompt keeps it; a result resets it"


async def test_a_forced_tool_choice_is_dropped_after_a_pause_is_decided() -> None:
    model, seen = _settings_recorder(
        [
            ModelResponse(
                parts=[ToolCallPart(tool_name="refund", args={"order_id": "A", "amount": "500"}, tool_call_id="r1")]
            ),
            ModelResponse(parts=[TextPart(content="refused, sorry")]),
        ]
    )
    shop = Shop()
    agent = make_agent(model, shop, model_settings={"tool_choice": "refund"})
    paused = await agent.run("Refund A", deps=shop)
    assert isinstance(paused.output, DeferredToolRequests)

    done = await agent.run(
        deps=shop,
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"r1": ToolDenied(message="no")}),
    )

    assert done.output == "refused, sorry"
    assert seen == ["refund", None]


async def test_reset_tool_choice_can_be_turned_off() -> None:
    model, seen = _settings_recorder(
        [
            ModelResponse(parts=[ToolCallPart(tool_name="lookup_order", args={"order_id": "A"}, tool_call_id="c1")]),
            ModelResponse(parts=[TextPart(content="done")]),
        ]
    )
    agent = make_agent(model, Shop(), model_settings={"tool_choice": "required"}, reset_tool_choice=False)

    await agent.run("Look up A", deps=Shop())

    assert seen == ["required", "required"]


# --- numbers JSON cannot hold ------------------------------------------------------------------


@pytest.mark.parametrize("amount", ["5.4e4673", "-1e999", '"1e999"', '"NaN"'])
async def test_an_infinite_or_nan_argument_goes_back_to_the_model_naming_the_field(amount: str) -> None:
    """`5.4e4673` parses as infinity: it must be a retry prompt, never a crash and never stored."""

    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        return "refunded"

    steps: list[ModelResponse] = [
        ModelResponse(
            parts=[ToolCallPart(tool_name="refund", args=f'{{"order_id": "A", "amount": {amount}}}', tool_call_id="x")]
        ),
        ModelResponse(parts=[TextPart(content="gave up")]),
    ]
    prompts: list[str] = []

    def answer(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompts.extend(p.content for p in last.parts if isinstance(p, RetryPromptPart))
        return steps[len(prompts)]

    agent: Agent[None] = Agent(FunctionModel(answer), retries=3)
    agent.tool_plain(requires_approval=True)(refund)

    result = await agent.run("Refund A")

    assert result.output == "gave up"
    assert len(prompts) == 1
    assert "- amount: Input should be a finite number" in prompts[0]
    assert result.all_messages_json()  # the history still serializes


async def test_an_infinite_number_in_a_structured_output_is_retried() -> None:
    class Quote(BaseModel):
        price: float

    calls = iter(['{"price": 1e999}', '{"price": 9.5}'])

    def answer(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(tool_name="final_result", args=next(calls), tool_call_id="f")])

    result = await Agent(FunctionModel(answer), output_type=Quote).run("Quote")

    assert result.output == Quote(price=9.5)
    retry = result.all_messages()[2].parts[0]
    assert isinstance(retry, RetryPromptPart)
    assert "price: Input should be a finite number" in retry.content


async def test_requests_a_model_does_not_report_still_count_after_a_pause() -> None:
    """A model that reports no usage: each of its answers is one request, live and read back from history alike."""
    steps: list[int] = []

    def ask(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(m, ModelRequest) and any(p.part_kind == "tool-return" for p in m.parts) for m in messages):
            return ModelResponse(parts=[TextPart(content="done")])
        return ModelResponse(parts=[ToolCallPart(tool_name="approve_me", args={}, tool_call_id="c1")])

    agent: Agent[None, str] = Agent(FunctionModel(ask))

    @agent.tool(requires_approval=True)
    def approve_me(ctx: RunContext[None]) -> str:
        """Needs a person."""
        steps.append(ctx.run_step)
        return "ok"

    paused = await agent.run("go")
    assert isinstance(paused.output, DeferredToolRequests)
    approved = DeferredToolResults(approvals={"c1": ToolApproved()})
    history = paused.all_messages()
    with pytest.raises(UsageLimitExceeded, match="request limit of 1"):  # the first request used it up
        await agent.run(
            message_history=history, deferred_tool_results=approved, usage_limits=UsageLimits(request_limit=1)
        )
    finished = await agent.run(message_history=history, deferred_tool_results=approved)
    assert finished.output == "done"
    assert steps == [1, 1]  # each resume ran the approved call at the step of the request that asked, not 0


async def test_a_runs_totals_are_those_of_its_whole_history_and_held_ones_give_the_same_run() -> None:
    """Counted message by message as the run goes, the totals equal those counted from its whole history;
    handing held totals in (as a worker does) runs it exactly as counting them from the history."""
    shop = Shop()
    agent, paused = await paused_run(shop)  # two safe calls ran, two wait
    assert paused.totals == RunTotals.of(paused.all_messages(), paused.run_id)
    assert paused.totals.usage == paused.usage and paused.totals.usage.tool_calls == 2
    big_refund, delete = paused.output.approvals
    decisions = DeferredToolResults(
        approvals={big_refund.tool_call_id: True, delete.tool_call_id: ToolAnswered(content="Deleted by hand.")}
    )
    history = paused.all_messages()
    counted = await agent.run(deps=Shop(), message_history=history, deferred_tool_results=decisions)
    held = await agent.run(
        deps=Shop(), message_history=history, deferred_tool_results=decisions, history_totals=paused.totals
    )
    assert held.totals is paused.totals  # taken over and counted on, not copied
    assert held.output == counted.output
    assert held.totals == counted.totals == RunTotals.of(held.all_messages(), held.run_id)
    assert held.usage.tool_calls == 3  # the approved refund ran; the answered call did not


async def test_held_totals_of_another_history_are_refused() -> None:
    shop = Shop()
    agent, paused = await paused_run(shop)
    with pytest.raises(UserError, match="history_totals count 0 messages"):
        await agent.run(
            deps=shop,
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=dict.fromkeys(paused.output.tool_call_ids, True)),
            history_totals=RunTotals(run_id=paused.run_id),
        )


async def test_a_call_id_used_before_in_the_run_or_twice_in_a_response_is_renewed() -> None:
    def reuse(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) > 3:
            return ModelResponse(parts=[TextPart(content="done")])
        call = ToolCallPart(tool_name="lookup_order", args={"order_id": "A-1"}, tool_call_id="same")
        return ModelResponse(parts=[call, call])

    result = await make_agent(FunctionModel(reuse), Shop()).run("go", deps=Shop())
    ids = [c.tool_call_id for m in result.all_messages() if isinstance(m, ModelResponse) for c in m.tool_calls]
    assert len(ids) == 4 and len(set(ids)) == 4 and ids[0] == "same"
    assert result.totals.tool_call_ids == set(ids)
