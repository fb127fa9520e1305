"""The engine seam (`approvals.engines.seam`): the worker speaks verdicts and neutral types only.

What an engine does with a turn is the conformance suite's (`tests/engines/conformance/`);
these check the seam's own pieces: a stored decision as the verdict an engine is given, our
agent's reading of a verdict, a state the store cannot keep refused in words, and the worker
and the call lifecycle free of the native engine.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

import pytest

from approvals.calls import engines as base
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove
from approvals.engines import EngineKind, register_engine
from approvals.engines.native.deferred import ToolAnswered, ToolApproved, ToolDenied, results_from_verdicts
from approvals.engines.seam import StateKind, Turn, history_codec, resumable
from approvals.exceptions import UserError
from approvals.store import DecidedCall
from approvals.worker.resumer import AgentRegistry, verdict_of

ROOT = Path(__file__).resolve().parents[1] / "approvals"


def decided(status: str, **fields: Any) -> DecidedCall:
    return DecidedCall(id="c1", tool_call_id="t1", status=status, args_digest="d", **fields)


def test_each_stored_decision_is_the_verdict_its_engine_is_given() -> None:
    assert verdict_of(decided(CallStatus.APPROVED)) == Approve(args_digest="d")
    assert verdict_of(decided(CallStatus.APPROVED, override_args={"amount": 5})) == EditAndApprove(
        args={"amount": 5}, args_digest="d"
    )
    assert verdict_of(decided(CallStatus.DENIED, denial_reason="too much")) == Deny(reason="too much")
    assert verdict_of(decided(CallStatus.EXPIRED)) == Deny(reason="Denied.")
    assert verdict_of(decided(CallStatus.ANSWERED, answer={"ok": True})) == Answer(content={"ok": True})
    with pytest.raises(UserError, match="not decided"):
        verdict_of(decided(CallStatus.PENDING))


def test_our_agent_reads_each_verdict_as_the_decision_it_resumes_with() -> None:
    results = results_from_verdicts(
        {
            "a": Approve(args_digest="d"),
            "e": EditAndApprove(args={"amount": 5}, args_digest="d"),
            "n": Deny(reason="no"),
            "q": Answer(content="42"),
        }
    )
    assert results.decisions() == {
        "a": ToolApproved(args_digest="d"),
        "e": ToolApproved(override_args={"amount": 5}, args_digest="d"),
        "n": ToolDenied(message="no"),
        "q": ToolAnswered(content="42"),
    }


class SnapshotEngine:
    """An engine keeping one document a run: the seam allows it, this store does not keep it yet."""

    name = "snapshots"
    kind = EngineKind.RESUMABLE
    state = StateKind.SNAPSHOT
    codec = None

    def adopt(self, candidate: object, *, name: str | None = None) -> Any:
        return candidate if getattr(candidate, "snapshots", False) else None


class SnapshotAgent:
    name = "snap"
    tools: ClassVar[dict[str, Any]] = {}
    snapshots = True


def test_a_state_the_store_cannot_keep_is_refused_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_engines", dict(base._engines))
    monkeypatch.setattr(base, "_codec_by_type", {})
    register_engine(SnapshotEngine())
    entry = AgentRegistry([SnapshotAgent()]).get("snap")
    assert entry.engine is not None and resumable(entry.engine).state is StateKind.SNAPSHOT
    with pytest.raises(UserError, match="keeps its state as a snapshot, which this store cannot keep"):
        history_codec(entry.resumable_engine)
    assert Turn(run_id="r", prompt="hi", deps=None).history == []


@pytest.mark.parametrize("package", ["worker", "calls"])
def test_the_worker_and_the_call_lifecycle_import_no_engine_internals(package: str) -> None:
    """The worker knows engines only through the seam; the calls know none (`approvals.engines.seam`)."""
    found = []
    for path in sorted((ROOT / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and ("native" in node.module or "pydantic_ai" in node.module)
            ):
                found.append(f"{path.name}: {node.module}")
    assert found == []
