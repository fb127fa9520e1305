"""The LangGraph engine driven directly: a real `create_agent` graph with `HumanInTheLoopMiddleware`, a scripted model.

Each turn goes through JSON as the store keeps it (the history row by row through the codec,
the snapshot document through `json`), so what is tested is what a worker in another
process would resume from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.agents.middleware.human_in_the_loop import InterruptOnConfig
from langgraph.graph.state import CompiledStateGraph

from approvals.calls.engine_state import Snapshot
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.engines import get_engine
from approvals.engines.langgraph import LANGGRAPH_FORMAT, LangGraphAgent
from approvals.engines.langgraph.engine import engine
from approvals.engines.seam import Completed, Paused, RunEnd, Turn
from approvals.engines.view import RetryPromptPart, ToolDeniedPart, ToolReturnPart, UserPromptPart
from approvals.exceptions import UserError

from ..conformance.harnesses.langgraph import ScriptedChatModel, lookup_order, refund
from ..conformance.script import Told, told_from_output
from ..conformance.script import Turn as Script

pytestmark = pytest.mark.anyio

REFUND: Script = [("refund", {"order_id": "A-1", "amount": 5})]


@dataclass
class Hooks:
    """Records what the engine announces before approved calls run."""

    announced: list[list[str]] = field(default_factory=list)

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        self.announced.append(tool_call_ids)

    async def on_step(self, messages: list[Any]) -> None:
        raise AssertionError("a SNAPSHOT engine never reports steps")


def graph(
    *turns: Script, interrupt_on: dict[str, bool | InterruptOnConfig] | None = None, **hitl: Any
) -> LangGraphAgent:
    built: CompiledStateGraph[Any, Any, Any, Any] = create_agent(
        ScriptedChatModel(turns=[list(turn) for turn in turns]),
        tools=[lookup_order, refund],
        middleware=[HumanInTheLoopMiddleware(interrupt_on=interrupt_on or {"refund": True}, **hitl)],
        context_schema=dict,
        name="shop",
    )
    adopted = engine.adopt(built)
    assert adopted is not None
    return adopted


class Run:
    """One run through the engine, its state kept between turns as the store keeps it."""

    def __init__(self, agent: LangGraphAgent, log: Path) -> None:
        self.agent, self.log, self.hooks = agent, log, Hooks()
        self.history: list[Any] = []
        self.snapshot: Snapshot | None = None

    async def turn(self, verdicts: dict[str, Verdict] | None = None) -> RunEnd:
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
            self.hooks,
        )
        assert end.messages[: len(self.history)] == self.history  # the stored history first, unchanged
        rows = [json.dumps(engine.codec.dump_message(m)) for m in end.messages]
        self.history = engine.codec.load_array("[" + ",".join(rows) + "]")
        assert end.snapshot is not None
        self.snapshot = Snapshot(version=end.snapshot.version, data=json.loads(json.dumps(end.snapshot.data)))
        return end

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "log"


async def test_an_approved_call_pauses_resumes_from_the_json_snapshot_and_runs_once(log: Path) -> None:
    run = Run(graph(REFUND), log)
    paused = await run.turn()
    assert isinstance(paused, Paused)
    (call,) = paused.requests.approvals
    assert (call.tool_name, call.args, call.tool_call_id) == ("refund", {"order_id": "A-1", "amount": 5}, "call-0-0")
    assert call.tool_def.parameters_json_schema["properties"]["amount"]["exclusiveMinimum"] == 0
    assert engine.waiting_on(run.history) == ["call-0-0"]
    assert run.logged() == []

    done = await run.turn({"call-0-0": Approve()})
    assert isinstance(done, Completed)
    assert run.hooks.announced == [["call-0-0"]]
    assert run.logged() == ["refund A-1 5"]
    assert told_from_output(done.output) == [Told("result", "refund", "refunded 5 on A-1")]
    new = done.messages[len(paused.messages) :]
    assert engine.outcomes(new, {"call-0-0"}) == {"call-0-0": (CallStatus.SUCCEEDED, "refunded 5 on A-1")}
    assert engine.waiting_on(run.history) == []


@pytest.mark.parametrize("mode", ["batched", "per_call"])
async def test_a_call_that_needs_nobody_beside_one_that_waits_is_not_waited_on_and_runs_once(
    log: Path, mode: str
) -> None:
    run = Run(graph([("lookup_order", {"order_id": "A-1"}), *REFUND], interrupt_mode=mode), log)
    paused = await run.turn()
    assert isinstance(paused, Paused)
    assert paused.requests.tool_call_ids == ["call-0-1"]
    assert engine.waiting_on(run.history) == ["call-0-1"]
    done = await run.turn({"call-0-1": Approve()})
    assert isinstance(done, Completed)
    assert sorted(run.logged()) == ["lookup A-1", "refund A-1 5"]
    assert [t.tool for t in told_from_output(done.output)] == ["lookup_order", "refund"]


async def test_refused_arguments_go_back_to_the_model_in_toolnodes_words_within_the_turn(log: Path) -> None:
    run = Run(
        graph([("refund", {"order_id": "A-1", "amount": 0})], [("refund", {"order_id": "A-1", "amount": "5"})]), log
    )
    paused = await run.turn()
    assert isinstance(paused, Paused)
    (call,) = paused.requests.approvals
    assert (call.tool_call_id, call.args) == ("call-1-0", {"order_id": "A-1", "amount": 5})  # validated: "5" is 5
    retries = [p for m in engine.codec.view(run.history) for p in m.parts if isinstance(p, RetryPromptPart)]
    (retry,) = retries
    assert retry.tool_call_id == "call-0-0"
    assert retry.content.startswith("Error invoking tool 'refund' with kwargs {'order_id': 'A-1', 'amount': 0}")
    assert "amount: Input should be greater than 0" in retry.content


async def test_a_refused_call_beside_a_valid_one_is_retried_and_only_the_valid_one_waits(log: Path) -> None:
    both: Script = [("refund", {"order_id": "A-1", "amount": -1}), ("refund", {"order_id": "B-2", "amount": 7})]
    run = Run(graph(both), log)
    paused = await run.turn()
    assert isinstance(paused, Paused)
    assert paused.requests.tool_call_ids == ["call-0-1"]
    assert engine.waiting_on(run.history) == ["call-0-1"]  # the refused call is answered in the history

    done = await run.turn({"call-0-1": Approve()})
    assert isinstance(done, Completed)
    assert run.logged() == ["refund B-2 7"]
    kinds = [(t.kind, t.tool) for t in told_from_output(done.output)]
    assert kinds == [("retry", "refund"), ("result", "refund")]
    answered = [
        p.tool_call_id
        for m in engine.codec.view(run.history)
        for p in m.parts
        if isinstance(p, ToolReturnPart | RetryPromptPart | ToolDeniedPart)
    ]
    assert sorted(map(str, answered)) == ["call-0-0", "call-0-1"]  # each call answered once in the history


async def test_a_denial_and_an_answer_reach_the_model_and_the_view_says_who_answered(log: Path) -> None:
    two: Script = [("refund", {"order_id": "A-1", "amount": 5}), ("refund", {"order_id": "B-2", "amount": 7})]
    run = Run(graph(two), log)
    await run.turn()
    done = await run.turn({"call-0-0": Deny(reason="Outside the window."), "call-0-1": Answer(content={"ok": True})})
    assert isinstance(done, Completed)
    assert run.hooks.announced == [] and run.logged() == []
    assert told_from_output(done.output) == [
        Told("denied", "refund", "Outside the window."),
        Told("result", "refund", '{"ok": true}'),
    ]
    parts = [p for m in engine.codec.view(run.history) for p in m.parts]
    assert [p.reason for p in parts if isinstance(p, ToolDeniedPart)] == ["Outside the window."]
    assert [(p.content, p.source) for p in parts if isinstance(p, ToolReturnPart)] == [('{"ok": true}', "reviewer")]
    assert isinstance(parts[0], UserPromptPart)


async def test_an_edit_runs_with_the_edited_arguments_and_the_result_is_the_tools(log: Path) -> None:
    run = Run(graph(REFUND), log)
    await run.turn()
    edited = run.agent.tools["refund"].dump_args(
        run.agent.tools["refund"].validate_args({"order_id": "A-1", "amount": "3"})
    )
    done = await run.turn({"call-0-0": EditAndApprove(args=edited)})
    assert run.logged() == ["refund A-1 3"]
    assert engine.outcomes(done.messages, {"call-0-0"}) == {"call-0-0": (CallStatus.SUCCEEDED, "refunded 3 on A-1")}


async def test_per_call_interrupts_are_answered_by_their_ids(log: Path) -> None:
    two: Script = [("refund", {"order_id": "A-1", "amount": 5}), ("refund", {"order_id": "B-2", "amount": 7})]
    run = Run(graph(two, interrupt_mode="per_call"), log)
    paused = await run.turn()
    assert isinstance(paused, Paused)
    assert sorted(paused.requests.tool_call_ids) == ["call-0-0", "call-0-1"]
    done = await run.turn({"call-0-0": Approve(), "call-0-1": Deny(reason="No.")})
    assert isinstance(done, Completed)
    assert run.logged() == ["refund A-1 5"]
    assert sorted((t.kind, t.content) for t in told_from_output(done.output)) == [
        ("denied", "No."),
        ("result", "refunded 5 on A-1"),
    ]


async def test_a_decision_the_middleware_does_not_allow_is_refused_in_words(log: Path) -> None:
    only: dict[str, bool | InterruptOnConfig] = {"refund": {"allowed_decisions": ["approve", "reject"]}}
    run = Run(graph(REFUND, interrupt_on=only), log)
    await run.turn()
    with pytest.raises(UserError, match="allows only as approve, reject"):
        await run.turn({"call-0-0": Answer(content="done by hand")})
    assert run.logged() == []


async def test_a_snapshot_of_another_version_or_a_newer_checkpoint_library_is_refused(log: Path) -> None:
    run = Run(graph(REFUND), log)
    await run.turn()
    assert run.snapshot is not None
    kept = run.snapshot
    run.snapshot = Snapshot(version=kept.version + 1, data=kept.data)
    with pytest.raises(UserError, match="document version"):
        await run.turn({"call-0-0": Approve()})
    framework = {**kept.data["framework"], "langgraph-checkpoint": "999.0.0"}
    run.snapshot = Snapshot(version=kept.version, data={**kept.data, "framework": framework})
    with pytest.raises(UserError, match="cannot read it"):
        await run.turn({"call-0-0": Approve()})
    assert run.logged() == []


def test_the_engine_is_registered_by_name_and_format_and_its_codec_round_trips() -> None:
    assert get_engine("langgraph") is engine
    assert engine.codec.format_version == LANGGRAPH_FORMAT == 1002
    agent = graph(REFUND)
    assert engine.adopt(object()) is None
    assert engine.adopt(agent) is agent
    assert agent.gated == {"refund"} and set(agent.tools) == {"lookup_order", "refund"}


UNNAMED = create_agent(
    ScriptedChatModel(turns=[]),
    tools=[refund],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
)
"""A graph nobody named: LangGraph calls it "LangGraph"."""


def test_a_graph_loaded_by_import_path_without_a_name_is_named_after_its_attribute() -> None:
    from approvals.worker.resumer import AgentRegistry

    assert UNNAMED.name == "LangGraph"
    loaded = AgentRegistry().load("tests.engines.langgraph.test_engine:UNNAMED")
    assert loaded.name == "UNNAMED"
