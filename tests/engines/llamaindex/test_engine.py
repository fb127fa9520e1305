"""The LlamaIndex engine driven directly, turn by turn: a real `FunctionAgent`, scripted with LlamaIndex's mock LLM.

Each turn goes through JSON, as the store keeps it (the history's rows, the snapshot's document), and
each resumed turn runs a fresh agent, as another worker process would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow

from approvals.calls.engine_state import Snapshot
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.engines import get_engine
from approvals.engines.llamaindex.agent import LlamaIndexAgent
from approvals.engines.llamaindex.engine import LLAMAINDEX_FORMAT, engine
from approvals.engines.native.tools import args_digest
from approvals.engines.seam import NO_HOOKS, Completed, Paused, RunEnd, Turn
from approvals.engines.view import RetryPromptPart, ToolCallPart, ToolDeniedPart, ToolReturnPart
from approvals.exceptions import UserError

from ..conformance.harnesses.llamaindex import LlamaIndexHarness
from ..conformance.script import Told, logged, told_from_output

pytestmark = [
    pytest.mark.anyio,
    # LlamaIndex's workflows inspect the agent (a pydantic model) in their own tasks, touching deprecated attributes
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"),
]

REFUND = [("refund", {"order_id": "A-1", "amount": 5})]


class Hooks:
    """Records which approved calls were announced, and what the tools had done by then."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.announced: list[tuple[list[str], list[str]]] = []

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        self.announced.append((tool_call_ids, logged(self.log)))

    async def on_step(self, messages: list[Any]) -> None:
        raise AssertionError("a snapshot engine stores its steps with the turn's end")


class Run:
    """One scripted run, kept between turns only as the store keeps it: JSON rows and a JSON document."""

    def __init__(self, tmp_path: Path, *turns: list[tuple[str, dict[str, Any]]]) -> None:
        self.turns = list(turns)
        self.log = tmp_path / "log"
        self.hooks = Hooks(self.log)
        self.rows: list[dict[str, Any]] = []
        self.snapshot: Snapshot | None = None

    def agent(self) -> LlamaIndexAgent:
        adopted = engine.adopt(LlamaIndexHarness().agent("shop", self.turns))
        assert adopted is not None
        return adopted

    @property
    def history(self) -> list[Any]:
        return engine.codec.load_array(json.dumps(self.rows))

    async def turn(self, verdicts: dict[str, Verdict] | None = None) -> RunEnd:
        turn = Turn(
            run_id="run-1",
            prompt="Refund A-1" if self.snapshot is None else None,
            deps={"log": str(self.log)},
            verdicts=verdicts or {},
            history=self.history,
            snapshot=self.snapshot,
        )
        end = await engine.resume(self.agent(), turn, self.hooks)
        assert end.messages[: len(self.rows)] == turn.history or not self.rows
        self.rows = [json.loads(json.dumps(engine.codec.dump_message(m))) for m in end.messages]
        assert end.snapshot is not None
        self.snapshot = Snapshot(version=end.snapshot.version, data=json.loads(json.dumps(end.snapshot.data)))
        return end

    def told(self, end: RunEnd) -> list[Told]:
        assert isinstance(end, Completed), end
        return told_from_output(end.output)

    def parts(self) -> list[Any]:
        return [part for message in engine.codec.view(self.history) for part in message.parts]


def test_the_engine_is_registered_under_its_name_and_format() -> None:
    assert get_engine("llamaindex") is engine
    assert engine.codec.format_version == LLAMAINDEX_FORMAT == 1004


async def test_invalid_arguments_go_back_to_the_model_and_valid_ones_wait_validated(tmp_path: Path) -> None:
    run = Run(
        tmp_path,
        [("lookup_order", {"order_id": "A-1"}), ("refund", {"order_id": "A-1", "amount": 0})],
        [("refund", {"order_id": "A-1", "amount": "5"})],
    )
    paused = await run.turn()
    assert isinstance(paused, Paused)
    (call,) = paused.requests.approvals
    assert (call.tool_call_id, call.args) == ("call-1-0", {"order_id": "A-1", "amount": 5})
    assert call.args_digest == args_digest(call.args)
    assert call.tool_def.parameters_json_schema["properties"]["amount"]["exclusiveMinimum"] == 0
    assert logged(run.log) == ["lookup A-1"]
    assert engine.waiting_on(run.history) == ["call-1-0"]
    retries = [p for p in run.parts() if isinstance(p, RetryPromptPart)]
    assert [(p.tool_name, p.tool_call_id) for p in retries] == [("refund", "call-0-1")]
    assert "amount" in retries[0].content


async def test_an_approved_call_runs_once_after_it_is_announced_and_the_run_completes(tmp_path: Path) -> None:
    run = Run(tmp_path, REFUND)
    assert isinstance(await run.turn(), Paused)
    end = await run.turn({"call-0-0": Approve()})
    assert run.told(end) == [Told("result", "refund", "refunded 5 on A-1")]
    assert run.hooks.announced == [(["call-0-0"], [])]  # announced before the refund ran
    assert logged(run.log) == ["refund A-1 5"]
    assert engine.outcomes(end.messages[-3:], {"call-0-0"}) == {"call-0-0": (CallStatus.SUCCEEDED, "refunded 5 on A-1")}
    assert engine.waiting_on(run.history) == []


async def test_an_edit_runs_with_the_edited_arguments(tmp_path: Path) -> None:
    run = Run(tmp_path, REFUND)
    await run.turn()
    end = await run.turn({"call-0-0": EditAndApprove(args={"order_id": "A-1", "amount": 3})})
    assert run.told(end) == [Told("result", "refund", "refunded 3 on A-1")]
    assert logged(run.log) == ["refund A-1 3"]


async def test_a_denial_and_an_answer_reach_the_model_and_the_tool_never_runs(tmp_path: Path) -> None:
    run = Run(tmp_path, [*REFUND, ("refund", {"order_id": "B-2", "amount": 7})])
    paused = await run.turn()
    assert isinstance(paused, Paused)
    assert [c.tool_call_id for c in paused.requests.approvals] == ["call-0-0", "call-0-1"]
    end = await run.turn({"call-0-0": Deny(reason="Outside the window."), "call-0-1": Answer(content="Done by hand.")})
    assert run.told(end) == [
        Told("denied", "refund", "Outside the window."),
        Told("result", "refund", "Done by hand."),
    ]
    assert logged(run.log) == []
    assert run.hooks.announced == []
    settled = [p for p in run.parts() if isinstance(p, ToolReturnPart | ToolDeniedPart)]
    outcomes = [(type(p).__name__, getattr(p, "source", None)) for p in settled]
    assert outcomes == [("ToolDeniedPart", None), ("ToolReturnPart", "reviewer")]


async def test_a_run_that_asks_nobody_completes_in_one_turn(tmp_path: Path) -> None:
    run = Run(tmp_path, [("lookup_order", {"order_id": "A-1"})])
    end = await run.turn()
    assert run.told(end) == [Told("result", "lookup_order", "order A-1: 2 items")]
    calls = [p.tool_name for p in run.parts() if isinstance(p, ToolCallPart)]
    assert calls == ["lookup_order"]


async def test_a_snapshot_of_another_version_or_llamaindex_is_refused_in_words(tmp_path: Path) -> None:
    run = Run(tmp_path, REFUND)
    await run.turn()
    assert run.snapshot is not None
    kept = run.snapshot
    run.snapshot = Snapshot(version=2, data=kept.data)
    with pytest.raises(UserError, match="version 2"):
        await run.turn({"call-0-0": Approve()})
    framework = {**kept.data["framework"], "llama-index-workflows": "1.3.0"}
    run.snapshot = Snapshot(version=1, data={**kept.data, "framework": framework})
    with pytest.raises(UserError, match=r"llama-index-workflows 1\.3\.0"):
        await run.turn({"call-0-0": Approve()})
    assert logged(run.log) == []


async def test_verdicts_for_calls_the_run_does_not_wait_on_are_refused_before_anything_runs(tmp_path: Path) -> None:
    run = Run(tmp_path, REFUND)
    await run.turn()
    with pytest.raises(UserError):
        await run.turn({"call-9": Approve()})
    assert run.hooks.announced == [] and logged(run.log) == []


async def test_an_agent_workflow_pauses_and_resumes_like_a_function_agent(tmp_path: Path) -> None:
    function_agent = LlamaIndexHarness().agent("shop", [REFUND])
    workflow = AgentWorkflow(agents=[function_agent], root_agent="shop")
    adopted = engine.adopt(workflow, name="shop-workflow")
    assert adopted is not None and adopted.name == "shop-workflow"
    assert set(adopted.tools) == {"lookup_order", "refund"} and set(adopted.approval_tools) == {"refund"}
    log = tmp_path / "log"
    first = Turn(run_id="run-2", prompt="Refund A-1", deps={"log": str(log)})
    paused = await engine.resume(adopted, first, NO_HOOKS)
    assert isinstance(paused, Paused) and paused.snapshot is not None
    (call,) = paused.requests.approvals
    again = Turn(
        run_id="run-2",
        prompt=None,
        deps={"log": str(log)},
        verdicts={call.tool_call_id: Approve()},
        history=paused.messages,
        snapshot=paused.snapshot,
    )
    end = await engine.resume(adopted, again, NO_HOOKS)
    assert isinstance(end, Completed)
    assert told_from_output(end.output) == [Told("result", "refund", "refunded 5 on A-1")]
    assert logged(log) == ["refund A-1 5"]
