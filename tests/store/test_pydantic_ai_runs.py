"""Real pydantic-ai agents on our store and worker, on SQLite and PostgreSQL (issue 16).

The agents are `pydantic_ai.Agent`s with pydantic-ai's own `FunctionModel`; they pause on
pydantic-ai's `DeferredToolRequests`, their history is stored in pydantic-ai's JSON, and the
worker resumes them with the people's decisions. What every engine does (approve, edit, deny,
answer, a worker killed mid-call) is checked in tests/engines/conformance; here, what is
pydantic-ai's own.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAIAgentClass
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart
from sqlalchemy import select

from approvals.calls.verdicts import Answer, Approve
from approvals.engines.pydantic_ai import PydanticAIAgent
from approvals.engines.pydantic_ai.engine import PYDANTIC_AI_FORMAT
from approvals.service import ApprovalService
from approvals.store import Actor, Store
from approvals.store.models import MessageRow
from approvals.worker.resumer import AgentRegistry, Resumer

from ..pydanticai import agents

pytestmark = pytest.mark.anyio

STARTER = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")


def registry() -> AgentRegistry:
    return AgentRegistry([agents.shop, agents.big_refunds, agents.reminders])


def logged(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def paused_shop_run(store: Store, tmp_path: Path) -> str:
    run_id = await store.runs.start_run("pai-shop", "Refund A-1", actor=STARTER, deps={"log": str(tmp_path / "log")})
    assert await Resumer(store, registry()).resume(run_id) == run_id
    assert (await store.runs.get_run(run_id)).status == "awaiting_approval"
    return run_id


async def test_a_pydantic_ai_run_pauses_with_its_call_stored_and_its_history_in_pydantic_ais_json(
    store: Store, tmp_path: Path
) -> None:
    run_id = await paused_shop_run(store, tmp_path)
    assert logged(tmp_path) == ["lookup A-1"]  # the safe tool ran; the refund waits
    (call,) = await store.calls.run_calls(run_id)
    assert (call.tool_name, call.args, call.status) == ("refund", {"order_id": "A-1", "amount_cents": 450}, "pending")
    assert call.args_digest == ApprovalService.args_digest(call.args)
    definition = await store.calls.tool_definition(call.tool_version)
    assert definition.parameters_json_schema["properties"]["amount_cents"] == {
        "exclusiveMinimum": 0,
        "maximum": 100000,
        "type": "integer",
        "description": "How much, in cents.",
    }

    async with store.db.read() as session:
        rows = (await session.execute(select(MessageRow).where(MessageRow.run_id == run_id))).scalars().all()
    assert {row.format_version for row in rows} == {PYDANTIC_AI_FORMAT}
    history: list[Any] = list(await store.runs.load_history(run_id))
    assert ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(history)) == history
    assert history[0].instructions == "You help customers of the shop."  # pydantic-ai's own field, kept


async def test_approval_required_and_call_deferred_wait_with_quorum_and_reason(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("pai-big", "Refund B-9", actor=STARTER, deps={"log": str(tmp_path / "log")})
    await Resumer(store, registry()).resume(run_id)
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    assert set(calls) == {"refund_big", "ask_customer"}
    assert (calls["refund_big"].approvals_required, calls["refund_big"].reason) == (2, "over 500.00")
    assert calls["refund_big"].idempotent
    assert calls["ask_customer"].reason == "a person asks the customer"

    await store.calls.decide(calls["refund_big"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["ask_customer"].id, Answer(content="It arrived broken."), actor=ALICE)
    assert await Resumer(store, registry()).resume() is None  # one approval of two: still waiting
    await store.calls.decide(calls["refund_big"].id, Approve(), actor=BOB)
    await Resumer(store, registry()).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error
    assert "refund_big=success:refunded 90000 on B-9" in run.output
    assert "ask_customer=success:It arrived broken." in run.output
    assert logged(tmp_path) == ["refund_big B-9 90000"]


async def test_the_stored_history_continues_in_pydantic_ai_itself(store: Store, tmp_path: Path) -> None:
    """What the store keeps is a pydantic-ai history: pydantic-ai alone can carry on from it."""
    run_id = await paused_shop_run(store, tmp_path)
    (call,) = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Approve(), actor=ALICE)
    await Resumer(store, registry()).resume(run_id)
    history: list[Any] = list(await store.runs.load_history(run_id))
    assert isinstance(history[-2], ModelRequest)
    assert any(isinstance(p, ToolReturnPart) and p.tool_name == "refund" for p in history[-2].parts)
    follow_up = await agents.shop.run("Thanks!", message_history=history, deps={})
    assert follow_up.output == "You are welcome."
    assert len(follow_up.all_messages()) > len(history)


def test_a_pydantic_ai_agent_registers_wrapped_once_and_by_import_path() -> None:
    registry = AgentRegistry()
    wrapped = registry.register(agents.shop)
    assert isinstance(wrapped, PydanticAIAgent) and wrapped.name == "pai-shop"
    assert registry.register(agents.shop) is wrapped
    assert set(wrapped.tools) == {"lookup_order", "refund"}
    loaded = registry.load("tests.pydanticai.agents:big_refunds")
    assert loaded.name == "pai-big" and registry.get("pai-big").agent is loaded
    other = PydanticAIAgentClass(agents.scripted(), name="pai-shop")
    with pytest.raises(Exception, match="already registered"):
        registry.register(other)


async def test_a_call_left_past_its_time_expires_as_a_denial_the_model_reads(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run(
        "pai-reminders", "Remind Ann", actor=STARTER, deps={"log": str(tmp_path / "log")}
    )
    await Resumer(store, registry()).resume(run_id)
    (call,) = await store.calls.run_calls(run_id)
    assert call.expires_at is not None
    assert call.expires_at - call.created_at == dt.timedelta(seconds=0.2)  # the tool's own `approval_ttl`
    await store.calls.expire(now=call.expires_at + dt.timedelta(seconds=1))
    assert (await store.calls.get_call(call.id)).status == "expired"
    await Resumer(store, registry()).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error
    assert "send_reminder=denied:" in run.output
    assert logged(tmp_path) == []
    actions = [e.action for e in (await store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert actions[:3] == ["run.started", "run.resumed", "call.requested"]
    assert "call.expired" in actions and actions[-1] == "run.completed"
