"""The OpenAI Agents engine, driven directly: a real `agents.Agent` with a scripted in-process model, turn by turn.

Each turn goes through what a store would do between turns: the history is written and read
back by the engine's codec, and the snapshot as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunContextWrapper, function_tool
from agents.items import TResponseOutputItem

from approvals.calls.engine_state import Snapshot
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.engines import get_engine
from approvals.engines.openai_agents import EditNotSupported, OpenAIAgentsAgent
from approvals.engines.openai_agents.engine import OPENAI_AGENTS_FORMAT, OpenAIAgentsEngine
from approvals.engines.seam import Completed, Paused, RunEnd, Turn
from approvals.engines.view import RetryPromptPart, ToolCallPart, ToolDeniedPart, ToolReturnPart, UserPromptPart
from approvals.exceptions import InvalidDeferredResults, ToolRetryError, UserError

from ..conformance.harnesses.openai_agents import ScriptedModel, calls, lookup_order, refund, text, told, turns_made
from ..conformance.script import Told, refund_body
from ..conformance.script import Turn as Script

pytestmark = pytest.mark.anyio

_registered = get_engine("openai_agents")
assert isinstance(_registered, OpenAIAgentsEngine)
engine: OpenAIAgentsEngine = _registered
REFUND: Script = [("refund", {"order_id": "A-1", "amount": 5})]


@dataclass
class Recorder:
    """The hooks a worker gives a turn, writing what it was told into the tools' log, so the order shows."""

    log: Path
    told: list[list[str]] = field(default_factory=list)

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        with self.log.open("a") as log:
            log.write(f"executing {','.join(tool_call_ids)}\n")
        self.told.append(tool_call_ids)

    async def on_step(self, messages: list[Any]) -> None:
        raise AssertionError("a snapshot engine never reports steps")


@dataclass
class Run:
    """One run of a scripted agent, kept between turns as a store would keep it."""

    turns: list[Script]
    log: Path
    history: list[Any] = field(default_factory=list)
    snapshot: Snapshot | None = None
    asked: int = 0

    def __post_init__(self) -> None:
        def respond(items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
            self.asked += 1
            made = turns_made(items)
            return calls(made, self.turns[made]) if made < len(self.turns) else text(json.dumps(_told(items)))

        agent = Agent[dict[str, Any]](name="shop", model=ScriptedModel(respond), tools=[lookup_order, refund])
        adopted = engine.adopt(agent)
        assert adopted is not None
        self.agent = adopted

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    async def turn(self, verdicts: dict[str, Verdict] | None = None) -> RunEnd:
        hooks = Recorder(self.log)
        end = await engine.resume(
            self.agent,
            Turn(
                run_id="run-1",
                prompt="Refund A-1",
                deps={"log": str(self.log)},
                verdicts=verdicts or {},
                history=self.history,
                snapshot=self.snapshot,
            ),
            hooks,
        )
        assert end.messages[: len(self.history)] == self.history
        rows = json.dumps([engine.codec.dump_message(m) for m in end.messages])  # stored, then read back
        self.history = engine.codec.load_array(rows)
        assert end.snapshot is not None
        self.snapshot = Snapshot(version=end.snapshot.version, data=json.loads(json.dumps(end.snapshot.data)))
        self.hooks = hooks
        return end


def _told(items: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"kind": t.kind, "tool": t.tool, "content": t.content} for t in told(items)]


def told_in(end: RunEnd) -> list[Told]:
    assert isinstance(end, Completed)
    return [Told(**t) for t in json.loads(end.output)]


async def test_a_call_that_needs_approval_pauses_with_its_validated_arguments_and_the_sdks_state(
    tmp_path: Path,
) -> None:
    run = Run([REFUND], tmp_path / "log")
    end = await run.turn()
    assert isinstance(end, Paused)
    (call,) = end.requests.approvals
    assert (call.tool_name, call.tool_call_id, call.args) == ("refund", "call-0-0", {"order_id": "A-1", "amount": 5})
    assert call.tool_def.parameters_json_schema["properties"]["amount"]["exclusiveMinimum"] == 0
    assert call.tool_def.description == "Refund part or all of an order."
    assert engine.waiting_on(run.history) == ["call-0-0"]
    assert run.snapshot is not None and run.snapshot.version == 1
    assert run.snapshot.data["run_state"]["$schemaVersion"] and run.snapshot.data["openai_agents"]
    assert engine.codec.format_version == OPENAI_AGENTS_FORMAT == 1003


async def test_approved_the_call_runs_once_after_the_hooks_are_told_and_its_outcome_is_read(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    end = await run.turn({"call-0-0": Approve()})
    assert told_in(end) == [Told("result", "refund", "refunded 5 on A-1")]
    assert run.hooks.told == [["call-0-0"]]
    assert run.logged() == ["executing call-0-0", "refund A-1 5"]
    assert engine.outcomes(end.messages[2:], {"call-0-0"}) == {"call-0-0": (CallStatus.SUCCEEDED, "refunded 5 on A-1")}
    assert engine.waiting_on(run.history) == []


async def test_the_tools_get_the_runs_deps_as_the_sdk_context_and_the_snapshot_does_not_keep_them(
    tmp_path: Path,
) -> None:
    run = Run([[("lookup_order", {"order_id": "A-1"})], REFUND], tmp_path / "log")
    await run.turn()
    assert run.logged() == ["lookup A-1"]  # the deps' log, reached through ctx.context
    assert run.snapshot is not None and run.snapshot.data["run_state"]["context"]["context"] == {}


async def test_invalid_arguments_go_back_to_the_model_in_the_sdks_words_within_the_turn(tmp_path: Path) -> None:
    run = Run(
        [[("refund", {"order_id": "A-1", "amount": 0})], [("refund", {"order_id": "A-1", "amount": "5"})]],
        tmp_path / "log",
    )
    end = await run.turn()
    assert isinstance(end, Paused) and run.asked == 2  # asked again in the same turn
    (call,) = end.requests.approvals
    assert (call.tool_call_id, call.args) == (
        "call-1-0",
        {"order_id": "A-1", "amount": 5},
    )  # "5" validated as the SDK does
    retries = [p for m in engine.codec.view(run.history) for p in m.parts if isinstance(p, RetryPromptPart)]
    (retry,) = retries
    assert (retry.tool_name, retry.tool_call_id) == ("refund", "call-0-0")
    assert retry.content.startswith("An error occurred while running the tool. Please try again. Error: Invalid JSON")
    assert "greater than 0" in retry.content


async def test_a_response_with_a_valid_and_an_invalid_call_sends_back_one_and_waits_on_the_other(
    tmp_path: Path,
) -> None:
    run = Run(
        [[("refund", {"order_id": "A-1", "amount": 0}), ("refund", {"order_id": "B-2", "amount": 7})]], tmp_path / "log"
    )
    end = await run.turn()
    assert isinstance(end, Paused) and run.asked == 1
    assert end.requests.tool_call_ids == ["call-0-1"]
    assert engine.waiting_on(run.history) == ["call-0-1"]
    end = await run.turn({"call-0-1": Approve()})
    (retry, refunded) = told_in(end)
    assert (retry.kind, retry.tool, refunded) == ("retry", "refund", Told("result", "refund", "refunded 7 on B-2"))


async def test_invalid_json_goes_back_to_the_model_as_the_sdk_reports_it(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    items: list[dict[str, Any]] = []

    def respond(given: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        items[:] = given
        if len(given) == 1:
            (call,) = calls(0, REFUND)
            return [call.model_copy(update={"arguments": "{not json"})]
        return text("gave up")

    run.agent.agent.model = ScriptedModel(respond)
    end = await run.turn()
    assert isinstance(end, Completed) and end.output == "gave up"
    (output,) = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert output.startswith("An error occurred while parsing tool arguments. Please try again with valid JSON.")


async def test_a_denial_reaches_the_model_with_its_reason_and_the_view_shows_it(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    end = await run.turn({"call-0-0": Deny(reason="Outside the refund window.")})
    assert told_in(end) == [Told("denied", "refund", "Outside the refund window.")]
    assert run.logged() == [] and run.hooks.told == []
    (denied,) = [p for m in engine.codec.view(run.history) for p in m.parts if isinstance(p, ToolDeniedPart)]
    assert (denied.tool_name, denied.reason) == ("refund", "Outside the refund window.")
    assert engine.outcomes(end.messages, {"call-0-0"}) == {}


async def test_an_answer_is_the_calls_output_and_the_tool_never_runs(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    end = await run.turn({"call-0-0": Answer(content="Refunded by hand.")})
    assert told_in(end) == [Told("result", "refund", "Refunded by hand.")]
    assert run.hooks.told == [] and run.logged() == []
    returns = [p for m in engine.codec.view(run.history) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_name, p.content, p.source) for p in returns] == [("refund", "Refunded by hand.", "reviewer")]


async def test_an_edit_fails_loudly_before_anything_runs(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    with pytest.raises(EditNotSupported, match="cannot run"):
        await run.turn({"call-0-0": EditAndApprove(args={"order_id": "A-1", "amount": 3})})


async def test_verdicts_must_match_the_calls_waiting_and_the_arguments_approved(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    with pytest.raises(InvalidDeferredResults, match="digest mismatch"):
        await run.turn({"call-0-0": Approve(args_digest="0" * 64)})
    with pytest.raises(InvalidDeferredResults, match="no decision"):
        await run.turn({"call-9": Approve()})


async def test_a_snapshot_it_cannot_read_is_refused_in_words(tmp_path: Path) -> None:
    run = Run([REFUND], tmp_path / "log")
    await run.turn()
    assert run.snapshot is not None
    kept = run.snapshot
    run.snapshot = Snapshot(version=2, data=kept.data)
    with pytest.raises(UserError, match="document version 2"):
        await run.turn({"call-0-0": Approve()})
    future = {**kept.data, "run_state": {**kept.data["run_state"], "$schemaVersion": "9.0"}, "openai_agents": "9.9"}
    run.snapshot = Snapshot(version=1, data=future)
    with pytest.raises(UserError, match=r"written by openai-agents 9\.9 \(RunState schema 9\.0\)"):
        await run.turn({"call-0-0": Approve()})


async def test_a_completed_run_reads_into_the_view_model_in_order(tmp_path: Path) -> None:
    run = Run([[("lookup_order", {"order_id": "A-1"})]], tmp_path / "log")
    end = await run.turn()
    assert isinstance(end, Completed) and told_in(end) == [Told("result", "lookup_order", "order A-1: 2 items")]
    view = engine.codec.view(run.history)
    assert [m.kind for m in view] == ["request", "response", "request", "response"]
    assert isinstance(view[0].parts[0], UserPromptPart) and view[0].parts[0].content == "Refund A-1"
    assert isinstance(view[1].parts[0], ToolCallPart) and view[1].parts[0].args_as_dict() == {"order_id": "A-1"}
    assert all(engine.codec.owns(m) for m in run.history)


def test_the_agents_tools_validate_a_reviewers_edit_the_sdks_way() -> None:
    agent = Agent[Any](name="shop", tools=[lookup_order, refund])
    adopted = engine.adopt(agent, name="shop-2")
    assert isinstance(adopted, OpenAIAgentsAgent) and adopted.name == "shop-2"
    tool = adopted.tools["refund"]
    assert tool.dump_args(tool.validate_args({"order_id": "A-1", "amount": "3"})) == {"order_id": "A-1", "amount": 3}
    with pytest.raises(ToolRetryError):
        tool.validate_args({"order_id": "A-1", "amount": 0})
    assert engine.adopt(adopted) is adopted and engine.adopt(object()) is None


async def test_an_approval_predicate_asks_only_for_the_calls_it_names(tmp_path: Path) -> None:
    async def big(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        return bool(params.get("amount", 0) > 10)

    @function_tool(needs_approval=big, name_override="refund")
    def checked_refund(ctx: RunContextWrapper[dict[str, Any]], order_id: str, amount: int) -> str:
        """Refund part or all of an order."""
        return refund_body(ctx.context, order_id, amount)

    run = Run(
        [[("refund", {"order_id": "A-1", "amount": 5}), ("refund", {"order_id": "B-2", "amount": 50})]],
        tmp_path / "log",
    )
    run.agent = OpenAIAgentsAgent(run.agent.agent.clone(tools=[checked_refund]))
    end = await run.turn()
    assert isinstance(end, Paused) and end.requests.tool_call_ids == ["call-0-1"]
    assert run.logged() == ["refund A-1 5"]  # the small one ran without a person
    end = await run.turn({"call-0-1": Approve()})
    assert told_in(end) == [
        Told("result", "refund", "refunded 5 on A-1"),
        Told("result", "refund", "refunded 50 on B-2"),
    ]


async def test_an_approved_call_whose_tool_fails_is_read_as_failed(tmp_path: Path) -> None:
    @function_tool(needs_approval=True, name_override="refund")
    def broken_refund(order_id: str, amount: int) -> str:
        """Refund part or all of an order."""
        raise RuntimeError("the bank is closed")

    run = Run([REFUND], tmp_path / "log")
    run.agent = OpenAIAgentsAgent(run.agent.agent.clone(tools=[broken_refund]))
    await run.turn()
    end = await run.turn({"call-0-0": Approve()})
    (failed,) = told_in(end)
    assert (failed.kind, failed.tool) == ("retry", "refund") and "the bank is closed" in failed.content
    status, error = engine.outcomes(end.messages, {"call-0-0"})["call-0-0"]
    assert status == CallStatus.FAILED and "the bank is closed" in error


async def test_a_hand_built_function_tool_is_validated_by_its_json_schema(tmp_path: Path) -> None:
    async def invoke(ctx: Any, arguments: str) -> str:
        return f"refunded {json.loads(arguments)['amount']}"

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer", "exclusiveMinimum": 0}},
        "required": ["order_id", "amount"],
        "additionalProperties": False,
    }
    hand_built = FunctionTool(
        name="refund", description="Refund.", params_json_schema=schema, on_invoke_tool=invoke, needs_approval=True
    )
    run = Run([[("refund", {"order_id": "A-1", "amount": 0})], REFUND], tmp_path / "log")
    run.agent = OpenAIAgentsAgent(run.agent.agent.clone(tools=[hand_built]))
    end = await run.turn()
    assert isinstance(end, Paused) and end.requests.tool_call_ids == ["call-1-0"]
    (retry,) = [p for m in engine.codec.view(run.history) for p in m.parts if isinstance(p, RetryPromptPart)]
    assert retry.content.startswith("Tool call validation failed for tool 'refund'") and "amount" in retry.content


async def test_a_call_of_an_agent_the_run_handed_off_to_waits_and_resumes_in_that_agent(tmp_path: Path) -> None:
    run = Run([[("transfer_to_billing", {})], REFUND], tmp_path / "log")
    triage = run.agent.agent
    billing = Agent[dict[str, Any]](name="billing", model=triage.model, tools=[refund])
    run.agent = OpenAIAgentsAgent(triage.clone(tools=[lookup_order], handoffs=[billing]))
    end = await run.turn()
    assert isinstance(end, Paused)
    (call,) = end.requests.approvals
    assert (call.tool_name, call.tool_call_id, call.args["amount"]) == ("refund", "call-1-0", 5)
    end = await run.turn({"call-1-0": Deny(reason="Not today.")})
    assert told_in(end)[-1] == Told("denied", "refund", "Not today.")
    assert run.logged() == []


def test_the_inbox_knows_edits_are_refused_without_importing_the_sdk() -> None:
    import subprocess
    import sys

    from approvals.engines.openai_agents.engine import CANNOT_EDIT

    lazily = "import sys, approvals.engines; from approvals.calls.engines import edit_refusal; "
    lazily += "print(edit_refusal('openai_agents')); print('agents' in sys.modules)"
    said = subprocess.run([sys.executable, "-c", lazily], capture_output=True, text=True, check=True).stdout
    assert said.splitlines() == [CANNOT_EDIT, "False"]
