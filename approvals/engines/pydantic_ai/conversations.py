"""pydantic-ai's `ConversationStore` on our database, with the calls a conversation waits on in our inbox.

A pydantic-ai chat app keeps its conversations with `SQLConversationStore` (a UI adapter's
`conversation_store`, or `load` and `save` around each run). When a run pauses on deferred
tool calls, its save puts those calls in our inbox as a run of the app's agent; people decide
them there, our worker continues the run as any pydantic-ai run (approved calls run at most
once, audited), and the conversation shows the outcome the next time it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pydantic_ai
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from ...exceptions import UserError
from ...store import SYSTEM, Actor, Store
from ...store.conversations import ConversationChanged, ConversationWrite, RunToOpen, StoredConversation
from ._conversation_data import entry_data, entry_from, last_prompt, record_data, record_from, synced
from ._history import PYDANTIC_AI_FORMAT
from .agent import PydanticAIAgent

__all__ = ("SQLConversationStore",)

SYNC_ATTEMPTS = 3
"""Tries to bring a linked run's news into a conversation other writers keep changing; then it is read as stored."""
RunDeps = Callable[[ConversationRecord], Any]


class SQLConversationStore(ConversationStore):
    """A `ConversationStore` in our database (SQLite or PostgreSQL) whose pending approvals wait in our inbox.

    `write_record` stores the new entries and the record in one transaction, checked against
    the stored revision; `read_history` is one recursive query. `delete_record` deletes the
    entries no other conversation (a fork, say) still reaches.

    A save that leaves the conversation waiting on deferred tool calls opens a run of `agent`
    in our inbox, holding the conversation's history and those calls, and links it. Register
    the same agent with the worker (`AgentRegistry`, under the same name). Once people
    decided and the worker continued the run, reading the conversation appends the run's new
    messages, takes its usage, and drops the deferred requests (or shows the run's new ones
    if it paused again); the save this makes is checked against the revision like any other.

    When the app resolves the calls itself (runs the conversation with its own
    `deferred_tool_results`, branches away, or clears the requests) while the run still waits
    for people, its save cancels that run, audited as `actor`: the inbox's decision no longer
    applies, and a reviewer approving later would run the call for a conversation that went
    on without it, perhaps a second time. The cancel happens in the save's own transaction
    rather than through `store.runs.cancel_run` afterwards, so no decision can slip in between.
    Once people decided (the run is queued, running or has news), the inbox's outcome stands
    and such a save raises `ConversationConflict`: read the conversation again once the run
    stopped. Deleting a conversation cancels a run that still waits for people too.

    Every conversation waiting on calls holds its own run: a fork of one that waits opens
    another, and its calls are decided apart.
    """

    def __init__(
        self,
        store: Store,
        agent: pydantic_ai.Agent[Any, Any] | PydanticAIAgent,
        *,
        deps: RunDeps | None = None,
        actor: Actor = SYSTEM,
    ) -> None:
        """Keep conversations in `store`; their pending calls become runs of `agent`.

        `deps` makes a run's deps (JSON, for the agent's `deps_factory` in the worker) from the
        record being saved, e.g. from its scope. `actor` starts those runs and cancels the ones
        a conversation left behind.
        """
        if not actor.can("reviewer"):
            raise UserError(f"{actor.id!r} ({actor.role}) may not start runs; give a reviewer or admin actor")
        self.store = store
        self.agent = agent if isinstance(agent, PydanticAIAgent) else PydanticAIAgent(agent)
        self.deps = deps
        self.actor = actor

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        stored = None
        for _ in range(SYNC_ATTEMPTS):
            stored = await self.store.conversations.read_conversation(conversation_id)
            if stored is None or stored.run is None or not stored.run.has_news:
                break
            record = await self._sync(stored)
            if record is not None:
                return record
        return None if stored is None else record_from(stored.record)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        records: list[ConversationRecord] = []
        for stored in await self.store.conversations.list_conversations(scope=scope, limit=limit):
            if stored.run is None or not stored.run.has_news:
                records.append(record_from(stored.record))
            elif (record := await self.read_record(stored.record.conversation_id)) is not None:
                records.append(record)
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        write = ConversationWrite(
            record=record_data(record),
            entries=[entry_data(entry) for entry in new_entries],
            expected_revision=expected_revision,
            open_run=self._run_to_open(record, new_entries),
            cancelled_by=self.actor.id,
        )
        try:
            await self.store.conversations.write_conversation(write)
        except ConversationChanged as exc:
            raise ConversationConflict(record.conversation_id) from exc

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        try:
            await self.store.conversations.delete_conversation(
                conversation_id, expected_revision=expected_revision, cancelled_by=self.actor.id
            )
        except ConversationChanged as exc:
            raise ConversationConflict(conversation_id) from exc

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return entry_from(await self.store.conversations.conversation_entry(entry_id))

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return [
            entry_from(entry) for entry in await self.store.conversations.conversation_history(head_id, limit=limit)
        ]

    async def inbox_run(self, conversation_id: str) -> str | None:
        """The run in our inbox that holds the calls the conversation waits on, if any."""
        stored = await self.store.conversations.read_conversation(conversation_id)
        return None if stored is None or stored.run is None else stored.run.run_id

    async def _sync(self, stored: StoredConversation) -> ConversationRecord | None:
        """The record after the linked run's news, saved; None when another writer changed it first."""
        assert stored.run is not None
        news = await self.store.conversations.linked_run_news(stored.run.run_id, after=stored.run.synced_messages)
        if not news.run.has_news:  # moved on between the two reads (a retried run, say): as stored
            return record_from(stored.record)
        sync = synced(stored.record, news)
        if not await self.store.conversations.sync_conversation(sync):
            return None
        return record_from(sync.record)

    def _run_to_open(self, record: ConversationRecord, new_entries: Sequence[ConversationEntry]) -> RunToOpen | None:
        """The inbox run for the calls `record` waits on (validated by the agent's tools); None if it waits on none."""
        requests = record.deferred_tool_requests
        if requests is None or not (requests.approvals or requests.calls):
            return None
        return RunToOpen(
            agent_name=self.agent.name,
            requests=self.agent.pending_calls(requests),
            message_format=PYDANTIC_AI_FORMAT,
            engine="pydantic_ai",
            prompt=last_prompt(new_entries),
            deps=self.deps(record) if self.deps is not None else None,
            actor_id=self.actor.id,
        )
