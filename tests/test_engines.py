"""The engine seam: engines adopt agents and store histories by name and format, never by class names.

The core knows no engine's message types: a made-up engine's messages go through
`approvals.engines.native.messages` and the worker's call outcomes exactly as pydantic-ai's do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pydantic_ai
import pytest
from pydantic import TypeAdapter
from typing_extensions import TypedDict

from approvals import Agent, Tool, ToolRetryError, UserError
from approvals.calls import engines as base
from approvals.calls.states import CallStatus
from approvals.engines import EngineKind, HistoryCodec, engine_for_format, get_engine, register_engine
from approvals.engines.history import call_outcomes
from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolReturnPart,
    UserPromptPart,
    as_approvals_messages,
    dump_message,
    format_version_of,
    load_message,
    load_stored_array,
    load_stored_history,
)
from approvals.engines.native.models import TestModel
from approvals.engines.pydantic_ai import PydanticAIAgent
from approvals.engines.pydantic_ai.engine import PYDANTIC_AI_FORMAT
from approvals.worker.resumer import AgentRegistry, as_resumable

NOT_AN_AGENT = "just a string"


@pytest.fixture
def registry_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Engines a test registers are gone after it."""
    monkeypatch.setattr(base, "_engines", dict(base._engines))
    monkeypatch.setattr(base, "_lazy", dict(base._lazy))
    monkeypatch.setattr(base, "_codec_by_type", {})


def test_our_agent_is_adopted_as_it_is_by_the_native_engine() -> None:
    agent = Agent(TestModel(), name="plain")
    assert as_resumable(agent) is agent
    registry = AgentRegistry([agent])
    entry = registry.get("plain")
    assert entry.agent is agent and entry.engine is get_engine("native")
    assert entry.codec.format_version == 1 and entry.codec is engine_for_format(1).codec
    assert get_engine("native").kind is EngineKind.RESUMABLE
    assert get_engine("native").adopt(object()) is None


def test_a_pydantic_ai_agent_is_adopted_by_its_engine_wrapped_once() -> None:
    engine = get_engine("pydantic_ai")
    assert engine is engine_for_format(PYDANTIC_AI_FORMAT)
    raw = pydantic_ai.Agent("test")
    wrapped = engine.adopt(raw, name="named")
    assert isinstance(wrapped, PydanticAIAgent) and wrapped.name == "named" and wrapped.agent is raw
    assert engine.adopt(wrapped) is wrapped
    assert engine.adopt(Agent(TestModel(), name="ours")) is None
    entry = AgentRegistry([wrapped]).get("named")
    assert entry.engine is engine and entry.codec.format_version == PYDANTIC_AI_FORMAT


def test_anything_else_is_refused_in_the_users_words() -> None:
    with pytest.raises(UserError, match=r"Not an agent: expected an agent of approvals, pydantic-ai, .* found object"):
        as_resumable(object())
    with pytest.raises(UserError, match=r"'tests.test_engines:NOT_AN_AGENT' is not an Agent \(found str\)"):
        AgentRegistry().load("tests.test_engines:NOT_AN_AGENT")


@pytest.mark.usefixtures("registry_copy")
def test_an_engine_that_cannot_be_imported_says_what_to_install() -> None:
    register_engine("approvals_no_such_module:engine", name="ghost", formats=(4242,), extra="ghost-extra")
    with pytest.raises(
        UserError, match=r"'ghost' engine cannot be loaded .*install its extra: approvals\[ghost-extra\]"
    ):
        load_message("{}", format_version=4242)
    with pytest.raises(UserError, match="No registered engine stores messages in format 4343"):
        load_stored_array("[{}]", [4343])


@pytest.mark.usefixtures("registry_copy")
def test_a_lazy_engine_is_checked_against_what_it_was_registered_as() -> None:
    register_engine("approvals.engines.native.engine:engine", name="impostor", formats=(4242,))
    with pytest.raises(
        UserError, match="is engine 'native' storing formats \\[1\\], not 'impostor' storing \\[4242\\]"
    ):
        get_engine("impostor")


@dataclass
class Note:
    """A made-up engine's message: the core has never heard of it."""

    text: str


class NoteCodec:
    format_version = 4242

    def dump_message(self, message: Any) -> dict[str, Any]:
        return {"note": message.text}

    def load_array(self, array: str | bytes) -> list[Any]:
        return [self.load_message(item) for item in json.loads(array)]

    def load_message(self, data: dict[str, Any] | str | bytes) -> Any:
        raw = json.loads(data) if isinstance(data, str | bytes) else data
        return Note(raw["note"])

    def view(self, messages: Iterable[Any]) -> list[Any]:
        return [ModelRequest(parts=[UserPromptPart(content=m.text)]) if isinstance(m, Note) else m for m in messages]

    def owns(self, message: object) -> bool:
        return isinstance(message, Note)


class NoteEngine:
    name = "notes"
    kind = EngineKind.RESUMABLE
    codec: HistoryCodec = NoteCodec()

    def adopt(self, candidate: object, *, name: str | None = None) -> Any | None:
        return None


@pytest.mark.usefixtures("registry_copy")
def test_another_engines_history_is_stored_and_read_through_its_codec() -> None:
    register_engine(NoteEngine())
    notes = [Note("one"), Note("two")]
    assert format_version_of(notes) == 4242
    rows = [(json.dumps(dump_message(note)), 4242) for note in notes]  # type: ignore[arg-type]
    assert rows[0][0] == '{"note": "one"}'
    loaded: list[Any] = load_stored_history(rows)  # one pass over the array, by the codec
    one_by_one: list[Any] = load_stored_history([(json.loads(text), version) for text, version in rows])
    assert loaded == one_by_one == notes
    view = as_approvals_messages(notes)
    assert [m.parts[0].content for m in view] == ["one", "two"]  # type: ignore[union-attr]
    with pytest.raises(UserError, match="Another engine is already registered as 'notes'"):
        register_engine(NoteEngine())


def test_the_worker_reads_call_outcomes_of_the_calls_it_ran_only() -> None:
    step: list[ModelRequest | ModelResponse] = [
        ModelRequest(
            parts=[
                ToolReturnPart(tool_name="refund", content={"ok": True}, tool_call_id="ran"),
                ToolReturnPart(tool_name="lookup", content="found", tool_call_id="safe"),  # needed no approval
                ToolReturnPart(tool_name="refund", content="done", tool_call_id="answered", source="reviewer"),
                RetryPromptPart(content="amount too big", tool_name="refund", tool_call_id="failed"),
                RetryPromptPart(content="try again"),
            ]
        )
    ]
    outcomes = call_outcomes(step, {"ran", "answered", "failed", "elsewhere"})
    assert outcomes == {
        "ran": (CallStatus.SUCCEEDED, {"ok": True}),
        "failed": (CallStatus.FAILED, "amount too big"),
    }
    assert call_outcomes(step, frozenset()) == {}


class RefundArgs(TypedDict):
    order_id: str
    amount: int


def refund(order_id: str, amount: int) -> str:
    return f"refunded {amount} on {order_id}"


def test_a_tool_validated_by_a_given_validator() -> None:
    adapter: TypeAdapter[RefundArgs] = TypeAdapter(RefundArgs)
    schema = adapter.json_schema()
    tool = Tool.from_validator(
        refund,
        validator=adapter,
        json_schema=schema,
        name="refund",
        description="Refund an order.",
        requires_approval=True,
        approvals_required=2,
    )
    assert tool.tool_def.parameters_json_schema == schema
    assert tool.tool_def.description == "Refund an order."
    assert (tool.requires_approval, tool.approvals_required) == (True, 2)
    assert tool.validate_args('{"order_id": "A-1", "amount": "12"}') == {"order_id": "A-1", "amount": 12}
    assert tool.dump_args(tool.validate_args({"order_id": "A-1", "amount": 3})) == {"order_id": "A-1", "amount": 3}
    with pytest.raises(ToolRetryError, match=r"- amount: Input should be a valid integer") as refused:
        tool.validate_args({"order_id": "A-1", "amount": "lots"})
    assert refused.value.errors == [
        ("amount", 'Input should be a valid integer, unable to parse string as an integer (got "lots")')
    ]
