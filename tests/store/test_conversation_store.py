"""pydantic-ai's `ConversationStore` on our database, and a conversation's pending approvals in our inbox.

Every test runs on SQLite and PostgreSQL. The conversations are real pydantic-ai runs with
`FunctionModel`s, saved and loaded through pydantic-ai's own `ConversationStore` methods;
`SQLConversationStore` supplies only the storage primitives and the inbox link.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent, AgentRunResult, DeferredToolRequests
from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import func, select

from approvals.calls.verdicts import Approve
from approvals.engines.pydantic_ai import PydanticAIAgent, SQLConversationStore
from approvals.engines.pydantic_ai._conversation_data import synced
from approvals.engines.pydantic_ai.engine import PYDANTIC_AI_FORMAT
from approvals.exceptions import Forbidden
from approvals.store import SYSTEM, Actor, PausedRun, Store
from approvals.store.models import ConversationEntryRow, ConversationRecordRow, MessageRow
from approvals.worker.resumer import AgentRegistry, Resumer

from ..pydanticai import agents
from .conftest import execute

pytestmark = pytest.mark.anyio

ALICE = Actor("alice", "reviewer")
PAUSING = [str, DeferredToolRequests]


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = next(p.content for p in reversed(messages[-1].parts) if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[TextPart(f"echo: {prompt}")])


echo = Agent(FunctionModel(_echo, model_name="echo"), name="pai-echo")


def _two_refunds(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Refund A-1; once that has an outcome, refund A-2; then report."""
    done = sum(1 for m in messages if isinstance(m, ModelRequest) for p in m.parts if p.part_kind == "tool-return")
    if done < 2:
        order = f"A-{done + 1}"
        call = ToolCallPart("refund", {"order_id": order, "amount_cents": 100}, tool_call_id=f"refund-{order}")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(agents.outcomes_text(messages))])


two_refunds = Agent(FunctionModel(_two_refunds, model_name="two-refunds"), name="pai-two-refunds", deps_type=dict)
two_refunds.tool(requires_approval=True)(agents.refund)


def shop_store(store: Store, tmp_path: Path) -> SQLConversationStore:
    return SQLConversationStore(store, agents.shop, deps=lambda record: {"log": str(tmp_path / "log")})


def logged(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def turn(conversations: SQLConversationStore, conversation_id: str, prompt: str, **save: Any) -> Conversation:
    """One turn of the echo chat: load (or start) the conversation, run, save; the saved conversation."""
    conversation = await conversations.load(conversation_id) or Conversation(conversation_id=conversation_id)
    result = await echo.run(prompt, conversation=conversation)
    await conversations.save(result, **save)
    return result.conversation


def final_text(conversation: Conversation) -> str:
    """What the model said last."""
    last = conversation.messages[-1]
    assert isinstance(last, ModelResponse) and isinstance(last.parts[0], TextPart)
    return last.parts[0].content


async def stored_history(store: Store, run_id: str) -> list[Any]:
    """A pydantic-ai run's history as stored: pydantic-ai's own messages."""
    return list(await store.runs.load_history(run_id))


async def count(store: Store, column: Any) -> int:
    async with store.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(column.table)) or 0)


async def paused_shop_chat(store: Store, tmp_path: Path) -> tuple[SQLConversationStore, str]:
    """A shop conversation whose refund waits in the inbox; the conversations and the inbox run's id."""
    conversations = SQLConversationStore(store, PydanticAIAgent(agents.shop), deps=lambda record: {})
    result: AgentRunResult[Any] = await agents.shop.run(
        "Refund A-1", conversation=Conversation(conversation_id="c1"), deps={}, output_type=PAUSING
    )
    assert isinstance(result.output, DeferredToolRequests)
    await conversations.save(result)
    run_id = await conversations.inbox_run("c1")
    assert run_id is not None
    return conversations, run_id


async def test_a_conversation_round_trips_through_save_and_load(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    result = await echo.run("Hello", conversation=Conversation(conversation_id="c1"))
    entries = await conversations.save(result)
    assert [entry.message for entry in entries] == result.all_messages()

    loaded = await conversations.load("c1")
    assert loaded is not None
    assert loaded.messages == result.all_messages()
    assert loaded.usage == result.usage
    assert loaded.revision == result.conversation.revision is not None
    assert loaded.deferred_tool_requests is None
    assert await conversations.load_entries("c1") == entries
    assert await conversations.load("nobody") is None


async def test_a_save_appends_only_the_messages_the_store_lacks(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    second = await turn(conversations, "c1", "two")
    assert await count(store, ConversationEntryRow.id) == 4

    # a conversation that went through JSON is compared with the stored history, message by message
    revived = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(second))
    result = await echo.run("three", conversation=revived)
    entries = await conversations.save(result)
    assert [type(entry.message) for entry in entries] == [ModelRequest, ModelResponse]
    assert await count(store, ConversationEntryRow.id) == 6
    record = await conversations.read_record("c1")
    assert record is not None and record.branches == []
    loaded = await conversations.load("c1")
    assert loaded is not None and loaded.messages == result.all_messages()


async def test_a_save_over_a_stale_revision_conflicts(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    first, second = await conversations.load("c1"), await conversations.load("c1")
    assert first is not None and second is not None
    await conversations.save(await echo.run("from the first tab", conversation=first))
    with pytest.raises(ConversationConflict):
        await conversations.save(await echo.run("from the second tab", conversation=second))
    assert await count(store, ConversationEntryRow.id) == 4  # the refused save left no entries behind
    with pytest.raises(ConversationConflict):  # a new conversation under a stored one's id
        await conversations.save(Conversation(conversation_id="c1", messages=second.messages))
    loaded = await conversations.load("c1")
    assert loaded is not None
    assert [m.parts[0].content for m in loaded.messages if isinstance(m, ModelResponse)] == [  # type: ignore[union-attr]
        "echo: one",
        "echo: from the first tab",
    ]


async def test_a_record_whose_head_is_no_stored_entry_is_refused(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    conversation = await turn(conversations, "c1", "one")
    record = await conversations.read_record("c1")
    assert record is not None
    ghost = dataclasses.replace(record, head_id="no-such-entry")
    with pytest.raises(ConversationConflict):
        await conversations.write_record(ghost, expected_revision=record.revision)
    entry = ConversationEntry(parent_id=record.head_id, message=ModelRequest.user_text_prompt("more"))
    moved = dataclasses.replace(record, head_id=entry.id, revision="r2")
    await conversations.write_record(moved, new_entries=[entry], expected_revision=record.revision)
    loaded = await conversations.load("c1")
    assert loaded is not None and len(loaded.messages) == len(conversation.messages) + 1


async def test_of_two_concurrent_saves_of_one_revision_one_wins(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    tabs = [await conversations.load("c1") for _ in range(2)]
    results = [await echo.run(f"tab {i}", conversation=tab) for i, tab in enumerate(tabs) if tab is not None]
    outcomes: list[BaseException | None] = []

    async def save(result: Any) -> None:
        try:
            await conversations.save(result)
            outcomes.append(None)
        except ConversationConflict as conflict:
            outcomes.append(conflict)

    async with anyio.create_task_group() as group:
        for result in results:
            group.start_soon(save, result)
    assert sorted(outcome is None for outcome in outcomes) == [False, True]
    assert await count(store, ConversationEntryRow.id) == 4


async def test_a_broken_history_is_a_lookup_error(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    entries = await conversations.load_entries("c1")
    assert entries is not None
    await execute(store, "DELETE FROM conversation_entries WHERE id = :id", id=entries[0].id)
    with pytest.raises(LookupError):
        await conversations.read_history(entries[-1].id)
    assert await conversations.read_history(entries[-1].id, limit=1) == entries[-1:]
    with pytest.raises(LookupError):
        await conversations.read_entry(entries[0].id)


async def test_scopes_keep_conversations_apart(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one", scope="ann")
    assert await conversations.load("c1", scope="bob") is None
    assert await conversations.load("c1", scope="ann") is not None
    assert await conversations.list_conversations(scope="bob") == []
    assert [r.conversation_id for r in await conversations.list_conversations(scope="ann")] == ["c1"]
    loaded = await conversations.load("c1")
    assert loaded is not None
    with pytest.raises(ConversationConflict):
        await conversations.save(await echo.run("two", conversation=loaded), scope="bob")
    await conversations.delete("c1", scope="bob")
    assert await conversations.load("c1") is not None


async def test_conversations_list_newest_first_and_up_to_a_limit(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    for conversation_id, scope in [("c1", "ann"), ("c2", "bob"), ("c3", "ann")]:
        await turn(conversations, conversation_id, "hi", scope=scope)
    await turn(conversations, "c1", "again")

    assert [r.conversation_id for r in await conversations.list_conversations()] == ["c1", "c3", "c2"]
    assert [r.conversation_id for r in await conversations.list_conversations(limit=2)] == ["c1", "c3"]
    assert [r.conversation_id for r in await conversations.list_conversations(scope="ann")] == ["c1", "c3"]
    assert await conversations.list_conversations(limit=0) == []


async def test_load_reads_the_last_messages_in_order(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    whole = await turn(conversations, "c1", "two")
    window = await conversations.load("c1", limit=3)
    assert window is not None and window.messages == whole.messages[-3:]
    entries = await conversations.load_entries("c1")
    assert entries is not None
    assert [entry.parent_id for entry in entries] == [None, *(entry.id for entry in entries[:-1])]
    assert await conversations.read_history(entries[1].id) == entries[:2]


async def test_branch_and_fork_share_stored_entries(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    whole = await turn(conversations, "c1", "two")
    entries = await conversations.load_entries("c1")
    assert entries is not None and len(entries) == 4

    branched = await conversations.branch("c1", at=2, expected_revision=whole.revision)
    assert branched.messages == whole.messages[:2]
    record = await conversations.read_record("c1")
    assert record is not None and record.branches == [entries[-1].id]
    redone = await echo.run("two, again", conversation=branched)
    await conversations.save(redone)
    loaded = await conversations.load("c1")
    assert loaded is not None and loaded.messages == redone.all_messages()

    back = await conversations.branch("c1", from_entry=entries[-1].id, expected_revision=loaded.revision)
    assert back.messages == whole.messages
    stored = await count(store, ConversationEntryRow.id)
    fork = await conversations.fork("c1", at=2, new_conversation_id="f1", scope="ann")
    assert fork.messages == whole.messages[:2]
    assert await count(store, ConversationEntryRow.id) == stored  # the fork points at the entries it shares
    fork_record = await conversations.read_record("f1")
    assert fork_record is not None
    assert (fork_record.forked_from, fork_record.forked_at, fork_record.scope) == ("c1", entries[1].id, "ann")


async def test_delete_removes_the_conversation_and_the_entries_only_it_reaches(store: Store) -> None:
    conversations = SQLConversationStore(store, echo)
    await turn(conversations, "c1", "one")
    whole = await turn(conversations, "c1", "two")
    await conversations.fork("c1", at=2, new_conversation_id="f1")
    await turn(conversations, "f1", "elsewhere")
    assert await count(store, ConversationEntryRow.id) == 6

    with pytest.raises(ConversationConflict):
        await conversations.delete_record("c1", expected_revision="stale")
    await conversations.delete("c1")
    assert await conversations.load("c1") is None
    assert [r.conversation_id for r in await conversations.list_conversations()] == ["f1"]
    assert await count(store, ConversationEntryRow.id) == 4  # the two the fork shares stay
    fork = await conversations.load("f1")
    assert fork is not None and fork.messages[:2] == whole.messages[:2]

    await conversations.delete("f1")
    assert await count(store, ConversationEntryRow.id) == 0
    assert await count(store, ConversationRecordRow.conversation_id) == 0


async def test_a_paused_conversation_is_decided_in_the_inbox_and_continued_by_the_worker(
    store: Store, tmp_path: Path
) -> None:
    conversations = shop_store(store, tmp_path)
    result: AgentRunResult[Any] = await agents.shop.run(
        "Refund A-1",
        conversation=Conversation(conversation_id="c1"),
        deps={"log": str(tmp_path / "log")},
        output_type=PAUSING,
    )
    await conversations.save(result)
    assert logged(tmp_path) == ["lookup A-1"]  # the app's run ran the safe tool; the refund waits

    run_id = await conversations.inbox_run("c1")
    assert run_id is not None
    run = await store.runs.get_run(run_id)
    assert (run.agent_name, run.status, run.prompt, run.started_by) == (
        "pai-shop",
        "awaiting_approval",
        "Refund A-1",
        "system",
    )
    assert await stored_history(store, run_id) == result.all_messages()  # the conversation's history, as stored
    (call,) = await store.calls.run_calls(run_id)
    assert (call.tool_name, call.args, call.status) == ("refund", {"order_id": "A-1", "amount_cents": 450}, "pending")
    events = (await store.audit.audit_events(run_id=run_id, newest_first=False)).items
    assert [(e.action, e.actor) for e in events] == [
        ("run.started", "system"),
        ("call.requested", "system"),
        ("run.paused", "system"),
    ]

    waiting = await conversations.load("c1")
    assert waiting is not None and waiting.deferred_tool_requests == result.output  # still waiting for people

    await store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=ALICE)
    assert await Resumer(store, AgentRegistry([agents.shop])).resume() == run_id
    assert logged(tmp_path) == ["lookup A-1", "refund A-1 450"]

    (listed,) = await conversations.list_conversations()  # listing brings the run's outcome in too
    assert listed.deferred_tool_requests is None and listed.usage.requests == 2
    loaded = await conversations.load("c1")
    assert loaded is not None and loaded.revision == listed.revision
    assert loaded.deferred_tool_requests is None
    assert loaded.messages[: len(result.all_messages())] == result.all_messages()
    assert loaded.messages == await stored_history(store, run_id)
    assert "refund=success:refunded 450 on A-1" in final_text(loaded)
    assert (loaded.usage.requests, loaded.usage.tool_calls) == (2, 2)
    assert await conversations.inbox_run("c1") is None  # the run ended: the conversation no longer follows it
    again = await conversations.load("c1")
    assert again is not None and again.revision == loaded.revision  # nothing more to bring in

    follow_up: AgentRunResult[Any] = await agents.shop.run("Thanks!", conversation=loaded, deps={}, output_type=PAUSING)
    assert follow_up.output == "You are welcome."
    assert len(await conversations.save(follow_up)) == 2
    runs = (await store.runs.list_runs()).items
    assert [r.status for r in runs] == ["completed"]  # no run for a turn that waits on nothing
    assert (await store.audit.verify_audit()).ok


async def test_the_app_deciding_itself_cancels_the_run_still_waiting_in_the_inbox(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    loaded = await conversations.load("c1")
    assert loaded is not None and loaded.deferred_tool_requests is not None
    decided = loaded.deferred_tool_requests.build_results(approvals={"call-1": False})
    result: AgentRunResult[Any] = await agents.shop.run(
        conversation=loaded, deferred_tool_results=decided, deps={}, output_type=PAUSING
    )
    await conversations.save(result)

    run = await store.runs.get_run(run_id)
    assert (run.status, run.error) == (
        "cancelled",
        "the conversation went on without the inbox: its calls no longer apply",
    )
    assert [c.status for c in await store.calls.run_calls(run_id)] == ["cancelled"]
    assert (await store.audit.audit_events(run_id=run_id)).items[0].action == "run.cancelled"
    assert await conversations.inbox_run("c1") is None
    assert (await store.calls.list_calls()).items == []  # nothing left for reviewers
    assert await Resumer(store, AgentRegistry([agents.shop])).resume() is None


async def test_once_people_decided_the_apps_own_decision_conflicts(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    loaded = await conversations.load("c1")
    assert loaded is not None and loaded.deferred_tool_requests is not None
    (call,) = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Approve(), actor=ALICE)

    decided = loaded.deferred_tool_requests.build_results(approvals={"call-1": False})
    result: AgentRunResult[Any] = await agents.shop.run(
        conversation=loaded, deferred_tool_results=decided, deps={}, output_type=PAUSING
    )
    with pytest.raises(ConversationConflict):
        await conversations.save(result)
    assert (await store.runs.get_run(run_id)).status == "ready"  # the inbox's decision stands

    await Resumer(store, AgentRegistry([agents.shop])).resume(run_id)
    outcome = await conversations.load("c1")
    assert outcome is not None and outcome.deferred_tool_requests is None
    assert "refund=success:refunded 450 on A-1" in final_text(outcome)


async def test_a_run_that_pauses_again_shows_its_new_calls_in_the_conversation(store: Store, tmp_path: Path) -> None:
    conversations = SQLConversationStore(store, two_refunds, deps=lambda record: {"log": str(tmp_path / "log")})
    registry = AgentRegistry([two_refunds])
    result: AgentRunResult[Any] = await two_refunds.run(
        "Refund both", conversation=Conversation(conversation_id="c1"), deps={}, output_type=PAUSING
    )
    await conversations.save(result)
    run_id = await conversations.inbox_run("c1")
    assert run_id is not None

    (first,) = await store.calls.run_calls(run_id)
    await store.calls.decide(first.id, Approve(), actor=ALICE)
    await registry_resume(store, registry, run_id)
    paused = await conversations.load("c1")
    assert paused is not None
    requests = paused.deferred_tool_requests
    assert requests is not None
    assert [(c.tool_call_id, c.args) for c in requests.approvals] == [
        ("refund-A-2", {"order_id": "A-2", "amount_cents": 100})
    ]
    assert requests.calls == []
    assert await conversations.inbox_run("c1") == run_id  # the same run waits again

    second = next(c for c in await store.calls.run_calls(run_id) if c.status == "pending")
    await store.calls.decide(second.id, Approve(), actor=ALICE)
    await registry_resume(store, registry, run_id)
    done = await conversations.load("c1")
    assert done is not None and done.deferred_tool_requests is None
    assert done.messages == await stored_history(store, run_id)
    assert logged(tmp_path) == ["refund A-1 100", "refund A-2 100"]


async def test_bringing_in_the_runs_outcome_loses_to_a_concurrent_save(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    (call,) = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Approve(), actor=ALICE)
    await Resumer(store, AgentRegistry([agents.shop])).resume(run_id)

    stored = await store.conversations.read_conversation("c1")
    assert stored is not None and stored.run is not None and stored.run.has_news
    news = await store.conversations.linked_run_news(run_id, after=stored.run.synced_messages)
    record = await conversations.read_record("c1")  # another reader brings the outcome in first
    assert record is not None and record.deferred_tool_requests is None
    assert not await store.conversations.sync_conversation(synced(stored.record, news))
    entries = await conversations.load_entries("c1")
    assert entries is not None and len(entries) == 5  # brought in once


async def registry_resume(store: Store, registry: AgentRegistry, run_id: str) -> None:
    assert await Resumer(store, registry).resume(run_id) == run_id


async def test_deleting_a_waiting_conversation_cancels_its_run(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    await conversations.delete("c1")
    assert (await store.runs.get_run(run_id)).status == "cancelled"
    assert await count(store, ConversationEntryRow.id) == 0
    async with store.db.read() as session:  # the run keeps its own copy of the history
        assert await session.scalar(select(func.count()).where(MessageRow.run_id == run_id)) == 3


async def test_a_fork_of_a_waiting_conversation_waits_in_its_own_run(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    fork = await conversations.fork("c1", new_conversation_id="f1")
    assert fork.deferred_tool_requests is not None
    fork_run = await conversations.inbox_run("f1")
    assert fork_run is not None and fork_run != run_id
    assert [c.tool_call_id for c in await store.calls.run_calls(fork_run)] == ["call-1"]
    resaved = await conversations.load("c1")
    assert resaved is not None
    await conversations.save(resaved)  # nothing new: the run goes on holding its calls
    assert await conversations.inbox_run("c1") == run_id
    assert (await store.runs.get_run(run_id)).status == "awaiting_approval"


async def test_a_paused_run_can_be_started_directly_by_a_reviewer_only(store: Store, tmp_path: Path) -> None:
    conversations, run_id = await paused_shop_chat(store, tmp_path)
    refund = ToolCallPart("refund", {"order_id": "B-2", "amount_cents": 5}, tool_call_id="x")
    requests = conversations.agent.pending_calls(DeferredToolRequests(approvals=[refund]))
    history = await _stored_messages(store, run_id)
    paused = PausedRun(agent_name="pai-shop", history=history, message_format=PYDANTIC_AI_FORMAT, requests=requests)
    with pytest.raises(Forbidden):
        await store.runs.start_paused_run(paused, actor=Actor("viewer", "viewer"))
    new_run = await store.runs.start_paused_run(paused, actor=SYSTEM)
    assert (await store.runs.get_run(new_run)).message_count == 3
    assert [c.args for c in await store.calls.run_calls(new_run)] == [{"order_id": "B-2", "amount_cents": 5}]


async def _stored_messages(store: Store, run_id: str) -> list[dict[str, Any]]:
    async with store.db.read() as session:
        rows = await session.scalars(
            select(MessageRow.data).where(MessageRow.run_id == run_id).order_by(MessageRow.seq)
        )
        return list(rows)
