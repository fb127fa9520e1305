"""Chat conversations in our database, linked to the inbox runs that hold the calls they wait on.

The storage behind `approvals.engines.pydantic_ai.SQLConversationStore`, on JSON-compatible data
(this module never imports pydantic-ai). A conversation is a record (where its history ends,
its revision, what it carries) and a log of entries, each pointing at the one before it, so
forks and branches share what they have in common. Every write is one transaction checked
against the record's revision.

A save that leaves a conversation waiting on tool calls opens a paused run holding its
history and those calls (`ConversationWrite.open_run`), so people decide them in the inbox
and a worker continues the run. What the run adds comes back into the conversation when it
stops (`sync_conversation`), guarded by the revision like any save. A save that moves the
conversation on without the inbox cancels the run while it still waits for people, in the
same transaction, so no decision can slip in between; once people decided, the inbox run
wins and such a save is refused until its outcome is back.

`Conversations` is the aggregate (`Store.conversations`): it writes conversation records and
entries, and opens, syncs or cancels the linked run through the run's own statements.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Insert,
    Integer,
    Row,
    Select,
    bindparam,
    delete,
    insert,
    literal_column,
    select,
    text,
    true,
    union,
    update,
)

from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.states import FINAL_RUN_STATUSES, RunStatus
from ..calls.tools import DeferredToolRequests
from ..exceptions import Conflict
from ..policy.evaluation import Outcome
from ._base import StoreBase
from .backend import Backend
from .backends.database import Database
from .backends.notify import Notifier
from .models import ConversationEntryRow, ConversationRecordRow, MessageRow, RunRow, ToolCallRow
from .paused_runs import PausedRun, insert_paused_run
from .policy_evaluation import PolicyEvaluation
from .run_cancel import cancel_in
from .run_plan import utcnow
from .run_sql import Tx

__all__ = (
    "ConversationChanged",
    "ConversationData",
    "ConversationSync",
    "ConversationWrite",
    "Conversations",
    "EntryData",
    "LinkedRun",
    "RunNews",
    "RunToOpen",
    "StoredConversation",
)

R = ConversationRecordRow
E = ConversationEntryRow


class ConversationChanged(Conflict):
    """The stored conversation is not the one the write expected: saved, deleted, or acted on in the inbox."""


@dataclass(frozen=True, kw_only=True)
class ConversationData:
    """A conversation record's own fields as JSON-compatible data (pydantic-ai's `ConversationRecord`)."""

    conversation_id: str
    head_id: str | None
    revision: str
    updated_at: dt.datetime
    scope: str | None = None
    usage: Any = field(default_factory=dict)
    deferred_tool_requests: Any = None
    forked_from: str | None = None
    forked_at: str | None = None
    branches: list[str] = field(default_factory=list)
    format_version: int = 1


@dataclass(frozen=True, kw_only=True)
class EntryData:
    """One entry of a conversation's log: its message as stored JSON, and the entry before it."""

    id: str
    parent_id: str | None
    message: Any
    kind: str = "message"


@dataclass(frozen=True, kw_only=True)
class LinkedRun:
    """The inbox run a conversation links, as far as the conversation follows it."""

    run_id: str
    status: RunStatus
    message_count: int
    synced_messages: int
    """How many of the run's messages the conversation holds."""

    @property
    def has_news(self) -> bool:
        """The run stopped (paused again or ended) with something the conversation does not show yet."""
        paused_again = self.status == RunStatus.AWAITING_APPROVAL and self.message_count > self.synced_messages
        return paused_again or self.status in FINAL_RUN_STATUSES


@dataclass(frozen=True)
class StoredConversation:
    """A stored record, with the run it links (if any)."""

    record: ConversationData
    run: LinkedRun | None


@dataclass(frozen=True, kw_only=True)
class RunNews:
    """What a linked run added after the messages a conversation holds, read in one transaction."""

    run: LinkedRun
    """The run as it stood when read; `synced_messages` is where `messages` start."""
    messages: list[tuple[Any, int]]
    """The run's messages from `run.synced_messages` up to `run.message_count`: `(JSON, format version)`."""
    reasons: dict[str, str | None]
    """Why each of the run's calls waited for people, by tool call id."""


@dataclass(frozen=True, kw_only=True)
class RunToOpen:
    """The inbox run a save opens for the calls the conversation waits on: its history is the conversation's."""

    agent_name: str
    requests: DeferredToolRequests
    message_format: int
    prompt: str | None = None
    deps: Any = None
    actor_id: str = SYSTEM_ACTOR_ID
    """Who starts the run (and is audited as pausing it)."""
    engine: str = "native"
    """The engine whose worker continues the run."""
    outcomes: Sequence[Outcome] | None = None
    """What the rules decided for each call (`write_conversation` asks them)."""


@dataclass(frozen=True, kw_only=True)
class ConversationWrite:
    """A save: the new record, the entries it adds, the revision it replaces."""

    record: ConversationData
    entries: Sequence[EntryData] = ()
    expected_revision: str | None
    """The stored record's revision, or None for a conversation not stored yet."""
    open_run: RunToOpen | None = None
    """The run to open when the save leaves the conversation waiting on calls; None when it waits on none."""
    cancelled_by: str = SYSTEM_ACTOR_ID
    """Who is audited as cancelling a linked run this save leaves behind."""


@dataclass(frozen=True, kw_only=True)
class ConversationSync:
    """What a linked run added, as a save of the conversation: new entries after its head, and the new record."""

    record: ConversationData
    entries: Sequence[EntryData]
    expected_revision: str
    run_id: str
    synced_messages: int
    """How many of the run's messages the conversation holds after this."""
    unlink: bool
    """The run ended: the conversation no longer follows it."""


class Conversations(StoreBase):
    """Conversations: records, their entries, and the runs they link.

    Given the store's one `PolicyEvaluation`: the rules decide the calls of a run a save opens.
    """

    def __init__(self, db: Database, notifier: Notifier | None = None, *, policy: PolicyEvaluation) -> None:
        super().__init__(db, notifier)
        self.policy = policy

    async def read_conversation(self, conversation_id: str) -> StoredConversation | None:
        async with self.db.read() as session:
            row = (await session.execute(READ_ONE, {"conversation_id": conversation_id})).one_or_none()
        return None if row is None else _stored(row)

    async def list_conversations(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> list[StoredConversation]:
        """Records, newest `updated_at` first; only those of `scope` when given."""
        if limit == 0:
            return []
        query = _STORED.order_by(R.updated_at.desc(), R.conversation_id.desc()).limit(limit)
        if scope is not None:
            query = query.where(R.scope == scope)
        async with self.db.read() as session:
            rows = (await session.execute(query)).all()
        return [_stored(row) for row in rows]

    async def conversation_history(self, head_id: str | None, *, limit: int | None = None) -> list[EntryData]:
        """The entries up to `head_id`, oldest first (the last `limit` of them), in one query.

        `KeyError` when the chain is broken: an entry a concurrent delete released.
        """
        if head_id is None or limit == 0:
            return []
        params: dict[str, Any] = {"head_id": head_id} if limit is None else {"head_id": head_id, "limit": limit}
        async with self.db.read() as session:
            rows = (await session.execute(_history(limit is not None), params)).all()
        return _whole(rows, head_id, limit)

    async def conversation_entry(self, entry_id: str) -> EntryData:
        async with self.db.read() as session:
            row = (await session.execute(READ_ENTRY, {"entry_id": entry_id})).one_or_none()
        if row is None:
            raise KeyError(entry_id)
        return EntryData(id=row.id, parent_id=row.parent_id, message=row.message, kind=row.kind)

    async def write_conversation(self, write: ConversationWrite) -> str | None:
        """Store the entries and the record in one transaction; returns the id of a run it opened.

        `ConversationChanged` when the stored revision is not `expected_revision`, the head is
        an entry neither stored nor new, or the save would leave behind a linked run people
        already acted on.
        """
        opening = write.open_run
        if opening is not None:
            outcomes = await self.policy.new_run_outcomes(
                opening.agent_name,
                opening.requests,
                engine=opening.engine,
                session=write.record.conversation_id,
                requester=opening.actor_id,
            )
            write = replace(write, open_run=replace(opening, outcomes=outcomes))
        return await self.run_statements(lambda tx: _write(tx, write))

    async def linked_run_news(self, run_id: str, *, after: int) -> RunNews:
        """The run's state, its messages from `after` on, and its calls' reasons."""
        async with self.db.read() as session:
            run = (await session.execute(RUN_STATE, {"run_id": run_id})).one()
            upto = {"run_id": run_id, "after": after, "upto": run.message_count}
            messages = (await session.execute(RUN_MESSAGES, upto)).all()
            reasons = (await session.execute(CALL_REASONS, {"run_id": run_id})).all()
        linked = LinkedRun(run_id=run_id, status=run.status, message_count=run.message_count, synced_messages=after)
        return RunNews(
            run=linked,
            messages=[(data, version) for data, version in messages],
            reasons={tool_call_id: reason for tool_call_id, reason in reasons},
        )

    async def sync_conversation(self, sync: ConversationSync) -> bool:
        """Bring a linked run's messages into the conversation; False when it changed meanwhile (nothing written)."""
        return await self.run_statements(lambda tx: _sync(tx, sync))

    async def delete_conversation(
        self, conversation_id: str, *, expected_revision: str, cancelled_by: str = SYSTEM_ACTOR_ID
    ) -> None:
        """Delete the record, and the entries no other conversation reaches.

        A linked run still waiting for people is cancelled with it; one people already sent
        on is left to finish in the inbox. `ConversationChanged` unless the stored revision
        is `expected_revision`.
        """
        await self.run_statements(lambda tx: _delete(tx, conversation_id, expected_revision, cancelled_by))


# Statements built once: the SQLite writer compiles each statement object once.
_RECORD_COLUMNS = (
    R.conversation_id,
    R.head_id,
    R.revision,
    R.updated_at,
    R.scope,
    R.usage,
    R.deferred_tool_requests,
    R.forked_from,
    R.forked_at,
    R.branches,
    R.format_version,
)
_STORED = select(
    *_RECORD_COLUMNS,
    R.run_id,
    R.synced_messages,
    RunRow.status.label("run_status"),
    RunRow.message_count.label("run_messages"),
).outerjoin(RunRow, RunRow.id == R.run_id)
READ_ONE = _STORED.where(R.conversation_id == bindparam("conversation_id"))
READ_ENTRY = select(E.id, E.parent_id, E.kind, E.message).where(E.id == bindparam("entry_id"))
LOCK_RECORD = (
    select(R.revision, R.head_id, R.branches, R.run_id, R.synced_messages)
    .where(R.conversation_id == bindparam("conversation_id"))
    .with_for_update()
)
LOCK_LINKED_RUN = (
    select(RunRow.id, RunRow.agent_name, RunRow.status, RunRow.message_count)
    .where(RunRow.id == bindparam("run_id"))
    .with_for_update()
)
ENTRY_EXISTS = select(E.id).where(E.id == bindparam("entry_id"))
INSERT_ENTRIES = insert(E)
_SET: dict[str, Any] = {
    column.key: bindparam(f"new_{column.key}") for column in (*_RECORD_COLUMNS[1:], R.run_id, R.synced_messages)
}
UPDATE_RECORD = update(R).where(R.conversation_id == bindparam("key")).values(_SET)
DELETE_RECORD = delete(R).where(R.conversation_id == bindparam("key"))
RUN_STATE = select(RunRow.status, RunRow.message_count).where(RunRow.id == bindparam("run_id"))
RUN_MESSAGES = (
    select(MessageRow.data, MessageRow.format_version)
    .where(
        MessageRow.run_id == bindparam("run_id"),
        MessageRow.seq >= bindparam("after"),
        MessageRow.seq < bindparam("upto"),
    )
    .order_by(MessageRow.seq)
)
CALL_REASONS = select(ToolCallRow.tool_call_id, ToolCallRow.reason).where(ToolCallRow.run_id == bindparam("run_id"))
WRITES_WAIT_FOR_DELETES = text("LOCK TABLE conversation_records IN ROW EXCLUSIVE MODE")
DELETES_WAIT_FOR_WRITES = text("LOCK TABLE conversation_records IN SHARE ROW EXCLUSIVE MODE")
"""PostgreSQL: a delete collects unreachable entries while no save is in flight, and saves wait for it.

Saves do not wait for each other (ROW EXCLUSIVE does not conflict with itself); SQLite
serializes all writes anyway.
"""
_ONE = literal_column("1", Integer)
_LEFT_BEHIND = "the conversation went on without the inbox: its calls no longer apply"
_DELETED = "the conversation was deleted"
_WAITING = (RunStatus.AWAITING_APPROVAL,)
"""The only run a conversation cancels: one that waits for people, so none of its calls runs."""


@cache
def _history(limited: bool) -> Select[Any]:
    """The entries from `:head_id` back to the first (or `:limit` of them), oldest first: a recursive CTE."""
    chain = (
        select(E.id, E.parent_id, _ONE.label("depth")).where(E.id == bindparam("head_id")).cte("chain", recursive=True)
    )
    step = select(E.id, E.parent_id, (chain.c.depth + _ONE).label("depth")).join(chain, E.id == chain.c.parent_id)
    if limited:
        step = step.where(chain.c.depth < bindparam("limit"))
    chain = chain.union_all(step)
    return select(E.id, E.parent_id, E.kind, E.message).join(chain, E.id == chain.c.id).order_by(chain.c.depth.desc())


@cache
def _insert_record(backend: Backend) -> Insert:
    return backend.insert(R).on_conflict_do_nothing(index_elements=[R.conversation_id]).returning(R.conversation_id)


def _stored(row: Row[Any]) -> StoredConversation:
    fields = row._mapping
    record = ConversationData(**{column.key: fields[column.key] for column in _RECORD_COLUMNS})
    run = None
    if row.run_id is not None and row.run_status is not None:
        run = LinkedRun(
            run_id=row.run_id,
            status=row.run_status,
            message_count=row.run_messages,
            synced_messages=row.synced_messages,
        )
    return StoredConversation(record=record, run=run)


def _whole(rows: Sequence[Row[Any]], head_id: str, limit: int | None) -> list[EntryData]:
    """The history's entries; `KeyError` unless the chain reaches its first entry (or `limit`)."""
    entries = [EntryData(id=r.id, parent_id=r.parent_id, message=r.message, kind=r.kind) for r in rows]
    reached_start = bool(entries) and (entries[0].parent_id is None or len(entries) == limit)
    if not reached_start:
        missing = entries[0].parent_id if entries else head_id
        raise KeyError(f"conversation entry {missing!r} is not stored")
    return entries


def _changed(conversation_id: str, why: str = "it was saved or deleted since it was read") -> ConversationChanged:
    return ConversationChanged(f"Conversation {conversation_id!r} changed: {why}")


def _hold_records(tx: Tx, *, deleting: bool = False) -> None:
    tx.backend.hold(tx.session, DELETES_WAIT_FOR_WRITES if deleting else WRITES_WAIT_FOR_DELETES)


def _write(tx: Tx, write: ConversationWrite) -> str | None:
    record = write.record
    _hold_records(tx)
    stored = tx.session.execute(LOCK_RECORD, {"conversation_id": record.conversation_id}).one_or_none()
    if (stored.revision if stored is not None else None) != write.expected_revision:
        raise _changed(record.conversation_id)
    if not _head_known(tx, record.head_id, write.entries):
        raise _changed(record.conversation_id, f"its entry {record.head_id!r} is no longer stored")
    now = utcnow()
    if write.entries:
        tx.session.execute(INSERT_ENTRIES, [_entry_row(entry, now) for entry in write.entries])
    run_id, synced, opened = _relink(tx, stored, write)
    values = {**_record_values(record), "run_id": run_id, "synced_messages": synced}
    if stored is None:
        inserted = tx.session.execute(_insert_record(tx.backend), values).one_or_none()
        if inserted is None:
            raise _changed(record.conversation_id, "another save created it first")
    else:
        tx.session.execute(UPDATE_RECORD, _set_values(record.conversation_id, values))
    return opened


def _head_known(tx: Tx, head_id: str | None, entries: Sequence[EntryData]) -> bool:
    if head_id is None or any(entry.id == head_id for entry in entries):
        return True
    return tx.session.execute(ENTRY_EXISTS, {"entry_id": head_id}).one_or_none() is not None


def _relink(tx: Tx, stored: Row[Any] | None, write: ConversationWrite) -> tuple[str | None, int, str | None]:
    """The run the record follows after this save, how many of its messages it holds, and the run it opened.

    A linked run goes on holding the conversation's calls while the save leaves the
    conversation where it was (same head, still waiting); otherwise the conversation moved
    on and leaves the run behind. A conversation newly waiting on calls opens a run.
    """
    head_id = write.record.head_id
    waiting = write.open_run is not None
    same_place = stored is not None and stored.head_id == head_id
    run_id, synced = (stored.run_id, stored.synced_messages) if stored is not None else (None, 0)
    if run_id is not None and not (same_place and waiting):
        _leave_behind(tx, run_id, synced, write)
        run_id, synced = None, 0
    if write.open_run is None or run_id is not None or same_place or head_id is None:
        return run_id, synced, None
    history = [row.message for row in tx.session.execute(_history(False), {"head_id": head_id})]
    paused = _paused(write.open_run, history, write.record.conversation_id)
    opened = insert_paused_run(tx, paused, write.open_run.actor_id)
    return opened, len(history), opened


def _leave_behind(tx: Tx, run_id: str, synced: int, write: ConversationWrite) -> None:
    """Cancel the linked run the conversation moves on from, while it only waits for people.

    Once people decided its calls (it is ready, resuming, or stopped with news the
    conversation lacks), the inbox's outcome stands: `ConversationChanged`, so the app reads
    that outcome before it carries on. A run cancelled in the inbox is simply let go.
    """
    run = tx.session.execute(LOCK_LINKED_RUN, {"run_id": run_id}).one_or_none()
    if run is None:
        return
    news = run.message_count > synced
    if run.status == RunStatus.CANCELLED and not news:
        return
    if run.status != RunStatus.AWAITING_APPROVAL or news:
        why = f"people already acted on its calls in run {run_id} ({run.status}); read it again"
        raise _changed(write.record.conversation_id, why)
    cancel_in(tx, run.id, run.agent_name, write.cancelled_by, _LEFT_BEHIND, now=utcnow(), only_if=_WAITING)


def _paused(run: RunToOpen, history: list[Any], conversation_id: str) -> PausedRun:
    return PausedRun(
        session_id=conversation_id,
        agent_name=run.agent_name,
        history=history,
        message_format=run.message_format,
        requests=run.requests,
        prompt=run.prompt,
        deps=run.deps,
        engine=run.engine,
        outcomes=run.outcomes,
    )


def _sync(tx: Tx, sync: ConversationSync) -> bool:
    _hold_records(tx)
    stored = tx.session.execute(LOCK_RECORD, {"conversation_id": sync.record.conversation_id}).one_or_none()
    if stored is None or stored.revision != sync.expected_revision or stored.run_id != sync.run_id:
        return False
    now = utcnow()
    if sync.entries:
        tx.session.execute(INSERT_ENTRIES, [_entry_row(entry, now) for entry in sync.entries])
    values = {
        **_record_values(sync.record),
        "run_id": None if sync.unlink else sync.run_id,
        "synced_messages": 0 if sync.unlink else sync.synced_messages,
    }
    tx.session.execute(UPDATE_RECORD, _set_values(sync.record.conversation_id, values))
    return True


def _delete(tx: Tx, conversation_id: str, expected_revision: str, actor_id: str) -> None:
    _hold_records(tx, deleting=True)
    stored = tx.session.execute(LOCK_RECORD, {"conversation_id": conversation_id}).one_or_none()
    if stored is None or stored.revision != expected_revision:
        raise _changed(conversation_id)
    tx.session.execute(DELETE_RECORD, {"key": conversation_id})
    if stored.run_id is not None:
        run = tx.session.execute(LOCK_LINKED_RUN, {"run_id": stored.run_id}).one_or_none()
        if run is not None and run.status == RunStatus.AWAITING_APPROVAL:
            cancel_in(tx, run.id, run.agent_name, actor_id, _DELETED, now=utcnow(), only_if=_WAITING)
    _collect_entries(tx, [stored.head_id, *(stored.branches or [])])


def _collect_entries(tx: Tx, tips: Iterable[str | None]) -> None:
    """Delete the entries of these histories (a deleted record's) that no remaining record reaches.

    The other records that reach one of them enter it from an entry outside it (a fork or a
    branch that went on from it), or end in it (their head or a branch's last entry): what
    lies before those is kept, the rest goes. Costs the deleted histories' length, not the table's.
    """
    seeds = [tip for tip in tips if tip is not None]
    if not seeds:
        return
    gone = _ancestors("gone", E.id.in_(seeds))
    gone_ids = select(gone.c.id)
    branch_tip = tx.backend.json_items(R.branches)
    entered_from = union(
        select(E.parent_id).where(E.parent_id.in_(gone_ids), E.id.not_in(gone_ids)),
        select(R.head_id).where(R.head_id.in_(gone_ids)),
        select(branch_tip.c.value).select_from(R).join(branch_tip, true()).where(branch_tip.c.value.in_(gone_ids)),
    )
    kept = _ancestors("kept", E.id.in_(entered_from))
    tx.session.execute(delete(E).where(E.id.in_(gone_ids), E.id.not_in(select(kept.c.id))))


def _ancestors(name: str, start: ColumnElement[bool]) -> CTE:
    """The entries matching `start` and every entry before them."""
    found = select(E.id, E.parent_id).where(start).cte(name, recursive=True)
    return found.union(select(E.id, E.parent_id).join(found, E.id == found.c.parent_id))


def _entry_row(entry: EntryData, now: dt.datetime) -> dict[str, Any]:
    return {**asdict(entry), "created_at": now}


def _record_values(record: ConversationData) -> dict[str, Any]:
    return {column.key: getattr(record, column.key) for column in _RECORD_COLUMNS}


def _set_values(conversation_id: str, values: dict[str, Any]) -> dict[str, Any]:
    return {"key": conversation_id, **{f"new_{column}": value for column, value in values.items() if column in _SET}}
