"""Standing rules for pydantic-ai agents as they are, on SQLite and PostgreSQL: on our worker and in a chat app.

The rules are evaluated where the call is requested, so a pydantic-ai run paused by our worker
and a chat app's conversation saved with `SQLConversationStore` are decided alike: a call the
rules allow runs without anyone being asked, a denied one comes back to the model as denied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import AgentRunResult, DeferredToolRequests
from pydantic_ai.conversation import Conversation

from approvals.calls.states import CallStatus, RunStatus
from approvals.engines.pydantic_ai import PydanticAIAgent, SQLConversationStore
from approvals.policy import parse_rule
from approvals.service import ApprovalService
from approvals.store import Actor, Store
from approvals.worker.resumer import AgentRegistry, Resumer

from ..pydanticai import agents

pytestmark = pytest.mark.anyio

ADMIN = Actor("ada", "admin")
STARTER = Actor("svc", "reviewer")
PAUSING = [str, DeferredToolRequests]


def logged(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def rule(store: Store, **definition: Any) -> None:
    await store.rules.save_rule(parse_rule(definition), actor=ADMIN)


async def test_a_pydantic_ai_run_on_our_worker_runs_a_call_a_rule_allows_without_asking(
    store: Store, tmp_path: Path
) -> None:
    await rule(store, name="small-refunds", agent="pai-*", tool="refund", when="args.amount_cents < 1000",
               effect="allow")  # fmt: skip
    run_id = await store.runs.start_run("pai-shop", "Refund A-1", actor=STARTER, deps={"log": str(tmp_path / "log")})
    resumer = Resumer(store, AgentRegistry([agents.shop]))
    await resumer.resume(run_id)
    (call,) = await store.calls.run_calls(run_id)
    assert (call.status, call.decided_by, call.rule_version) == (CallStatus.APPROVED, "rule:small-refunds", 1)
    assert (await store.runs.get_run(run_id)).status == RunStatus.READY
    await resumer.resume(run_id)
    assert (await store.runs.get_run(run_id)).status == RunStatus.COMPLETED
    assert logged(tmp_path) == ["lookup A-1", "refund A-1 450"]


async def test_a_pydantic_ai_run_hears_a_rules_denial_and_its_reason(store: Store, tmp_path: Path) -> None:
    await rule(store, name="no-refunds", tool="refund", effect="deny", reason="Refunds are paused this week.")
    run_id = await store.runs.start_run("pai-shop", "Refund A-1", actor=STARTER, deps={"log": str(tmp_path / "log")})
    resumer = Resumer(store, AgentRegistry([agents.shop]))
    await resumer.resume(run_id)
    await resumer.resume(run_id)
    assert (await store.runs.get_run(run_id)).status == RunStatus.COMPLETED
    assert logged(tmp_path) == ["lookup A-1"]  # the refund never ran
    history = await store.runs.load_history(run_id)
    assert "Refunds are paused this week." in str(history)  # the model read the reason


async def test_a_chat_apps_saved_conversation_is_decided_by_the_rules_and_continued_by_the_worker(
    store: Store, tmp_path: Path
) -> None:
    await rule(store, name="chat-refunds", engine="pydantic_ai", tool="refund", when="args.order_id == 'A-1'",
               effect="allow")  # fmt: skip
    conversations = SQLConversationStore(
        store, PydanticAIAgent(agents.shop), deps=lambda record: {"log": str(tmp_path / "log")}
    )
    result: AgentRunResult[Any] = await agents.shop.run(
        "Refund A-1", conversation=Conversation(conversation_id="c1"), deps={"log": str(tmp_path / "log")},
        output_type=PAUSING,
    )  # fmt: skip
    await conversations.save(result)
    run_id = await conversations.inbox_run("c1")
    assert run_id is not None
    (call,) = await store.calls.run_calls(run_id)
    assert (call.status, call.decided_by) == (CallStatus.APPROVED, "rule:chat-refunds")
    run = await store.runs.get_run(run_id)
    assert (run.engine, run.status, run.session_id) == ("pydantic_ai", RunStatus.READY, "c1")  # rules' `session`
    assert await Resumer(store, AgentRegistry([agents.shop])).resume() == run_id
    assert logged(tmp_path) == ["lookup A-1", "refund A-1 450"]


async def test_a_run_started_through_the_service_is_of_its_agents_engine_and_rules_on_it_match(
    store: Store, tmp_path: Path
) -> None:
    await rule(store, name="pai-refunds", engine="pydantic_ai", tool="refund", effect="allow")
    service = ApprovalService(store, AgentRegistry([agents.shop]))
    run_id = await service.start_run("pai-shop", "Refund A-1", actor=STARTER, deps={"log": str(tmp_path / "log")})
    assert (await store.runs.get_run(run_id)).engine == "pydantic_ai"
    await service.resumer.resume(run_id)
    (call,) = await store.calls.run_calls(run_id)
    assert (call.status, call.decided_by) == (CallStatus.APPROVED, "rule:pai-refunds")
