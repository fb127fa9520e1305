"""pydantic-ai's conversation records and entries as the store's JSON data, and a linked run's news as a save.

`approvals.store.conversations` keeps conversations as plain JSON; this module is the
conversion both ways (messages in pydantic-ai's own JSON, `RunUsage` and
`DeferredToolRequests` through `TypeAdapter`s), and turns what an inbox run added into the
conversation's next state (`synced`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests
from pydantic_ai import messages as pai
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord
from pydantic_ai.usage import RunUsage

from ...calls import clock
from ...calls.states import RunStatus
from ...exceptions import UserError
from ...store.conversations import ConversationData, ConversationSync, EntryData, RunNews
from ..history import pending_tool_calls, since_last_response
from ._history import ANSWERED_MARK, PYDANTIC_AI_FORMAT, as_approvals_messages, dump_message, load_message
from .agent import _reason

__all__ = ("entry_data", "entry_from", "last_prompt", "record_data", "record_from", "synced")

_usage: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_requests: TypeAdapter[DeferredToolRequests] = TypeAdapter(DeferredToolRequests)
_QUESTION = _reason("question", None)
_EXTERNAL = _reason("external", None)
RECORD_FORMAT: Literal[1] = 1
"""pydantic-ai's `ConversationRecord.format_version` this store reads and writes."""


def record_data(record: ConversationRecord) -> ConversationData:
    requests = record.deferred_tool_requests
    return ConversationData(
        conversation_id=record.conversation_id,
        head_id=record.head_id,
        revision=record.revision,
        updated_at=record.updated_at,
        scope=record.scope,
        usage=_usage.dump_python(record.usage, mode="json"),
        deferred_tool_requests=None if requests is None else _requests.dump_python(requests, mode="json"),
        forked_from=record.forked_from,
        forked_at=record.forked_at,
        branches=list(record.branches),
        format_version=record.format_version,
    )


def record_from(data: ConversationData) -> ConversationRecord:
    if data.format_version != RECORD_FORMAT:
        raise UserError(
            f"Conversation {data.conversation_id!r} is stored in format {data.format_version}, unknown here"
        )
    requests = data.deferred_tool_requests
    return ConversationRecord(
        conversation_id=data.conversation_id,
        head_id=data.head_id,
        usage=_usage.validate_python(data.usage),
        deferred_tool_requests=None if requests is None else _requests.validate_python(requests),
        scope=data.scope,
        forked_from=data.forked_from,
        forked_at=data.forked_at,
        branches=list(data.branches),
        revision=data.revision,
        updated_at=data.updated_at,
        format_version=RECORD_FORMAT,
    )


def entry_data(entry: ConversationEntry) -> EntryData:
    return EntryData(id=entry.id, parent_id=entry.parent_id, message=dump_message(entry.message), kind=entry.kind)


def entry_from(data: EntryData) -> ConversationEntry:
    if data.kind != "message":
        raise UserError(f"Conversation entry {data.id!r} is a {data.kind!r}, not a message")
    return ConversationEntry(id=data.id, parent_id=data.parent_id, message=load_message(data.message))


def last_prompt(entries: Sequence[ConversationEntry]) -> str | None:
    """What the user last asked among `entries`: a run's prompt for lists and pages."""
    for entry in reversed(entries):
        if isinstance(entry.message, pai.ModelRequest):
            for part in reversed(entry.message.parts):
                if isinstance(part, pai.UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return None


def synced(stored: ConversationData, news: RunNews) -> ConversationSync:
    """The conversation after a linked run's news: its messages appended after the head, as a save would.

    An ended run leaves nothing to wait on (cancelled before it added anything, its calls
    still wait, now for the app); one that paused again waits on its new calls.
    """
    if any(version != PYDANTIC_AI_FORMAT for _, version in news.messages):
        raise UserError(f"Run {news.run.run_id!r} holds messages not in pydantic-ai's format")
    entries: list[EntryData] = []
    parent = stored.head_id
    for data, _ in news.messages:  # already pydantic-ai's JSON, as the entries keep it
        entries.append(EntryData(id=str(uuid.uuid4()), parent_id=parent, message=data))
        parent = entries[-1].id
    messages = [load_message(data) for data, _ in news.messages]
    record = dataclasses.replace(
        stored,
        head_id=parent,
        revision=str(uuid.uuid4()),
        updated_at=clock.now(),
        usage=_usage.dump_python(_usage_after(_usage.validate_python(stored.usage), messages), mode="json"),
        deferred_tool_requests=_waiting_after(stored, news, messages),
    )
    return ConversationSync(
        record=record,
        entries=entries,
        expected_revision=stored.revision,
        run_id=news.run.run_id,
        synced_messages=news.run.message_count,
        unlink=news.run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED),
    )


def _waiting_after(stored: ConversationData, news: RunNews, messages: list[pai.ModelMessage]) -> Any:
    status = news.run.status
    if status in (RunStatus.COMPLETED, RunStatus.FAILED):
        return None
    if not messages:
        return stored.deferred_tool_requests
    if status == RunStatus.AWAITING_APPROVAL:
        return _requests.dump_python(_waiting_on(messages, news.reasons), mode="json")
    return None  # cancelled partway: the messages say what it did


def _waiting_on(messages: list[pai.ModelMessage], reasons: dict[str, str | None]) -> DeferredToolRequests:
    """The calls of the last response without an outcome yet, as pydantic-ai's requests.

    The history does not say what each call waits for: a call the inbox described as a
    question or an external call is one of `calls`, the others `approvals`, with their reason.
    """
    tail = since_last_response(messages)
    pending = pending_tool_calls(as_approvals_messages(tail))
    calls: list[pai.ToolCallPart] = []
    approvals: list[pai.ToolCallPart] = []
    metadata: dict[str, dict[str, Any]] = {}
    questions: dict[str, Any] = {}
    for part in tail[0].parts if tail else []:
        if not isinstance(part, pai.ToolCallPart) or part.tool_call_id not in pending:
            continue
        reason = reasons.get(part.tool_call_id)
        if reason in (_QUESTION, _EXTERNAL):
            calls.append(part)
            if reason == _QUESTION:
                questions[part.tool_call_id] = "question"
        else:
            approvals.append(part)
            if reason:
                metadata[part.tool_call_id] = {"reason": reason}
    return DeferredToolRequests(calls=calls, approvals=approvals, metadata=metadata, _kinds=questions)


def _usage_after(usage: RunUsage, messages: list[pai.ModelMessage]) -> RunUsage:
    """`usage` with the run's new requests, tokens and the tools it ran (not calls people answered)."""
    total = dataclasses.replace(usage)
    for message in messages:
        if isinstance(message, pai.ModelResponse):
            total.requests += 1
            total.incr(message.usage)
        else:
            total.tool_calls += sum(1 for part in message.parts if _ran(part))
    return total


def _ran(part: Any) -> bool:
    if not isinstance(part, pai.ToolReturnPart) or part.outcome != "success":
        return False
    return not (isinstance(part.metadata, dict) and part.metadata.get(ANSWERED_MARK) is True)
