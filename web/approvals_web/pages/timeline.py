"""A run's message history as a timeline a reviewer can read.

The stored history is what the model saw; the timeline joins each tool call in it to the
approval-gated call it became and that call's decisions, so the page tells one story. A
gate's session stores no history: its calls are the story, in the order they were asked.
A call a rule decided says so ("approved by rule small-refunds, version 3"); a call reminded or
escalated while it waited says that too (`follow_up_words`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from approvals.engines.view import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
)
from approvals.service import AuditEvent, Call, Decision

from .views import RuleMention, as_text, decided_by_rule

EntryKind = Literal["system", "user", "text", "thinking", "call", "result", "answered", "skipped", "denied", "retry"]


@dataclass
class TimelineEntry:
    """One thing that happened in a run, in order: a prompt, the model's text, a call, a result."""

    kind: EntryKind
    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None
    call: Call | None = None
    """The approval-gated call this tool call became, when it needed a person."""
    decisions: list[Decision] = field(default_factory=list)
    current: bool = False
    """This is the call the page is about."""
    note: str | None = None
    at: dt.datetime | None = None
    rule: RuleMention | None = None
    """The rule that approved or denied the call, when no person did."""
    asked_from_elsewhere: bool = False
    """A call the history does not hold: a gate's caller asked it, no model here made it."""
    follow_ups: list[str] = field(default_factory=list)
    """The call's reminders and escalations while it waited, in words, oldest first."""


def timeline(
    history: Sequence[ModelRequest | ModelResponse],
    calls: Sequence[Call] = (),
    decisions: Sequence[Decision] = (),
    *,
    current: Sequence[str] = (),
    remembered: Collection[tuple[str, int]] = (),
    follow_ups: Sequence[AuditEvent] = (),
) -> list[TimelineEntry]:
    """The history as entries; tool calls are joined to their gated calls and decisions.

    Calls the history does not hold (a gate's, asked from elsewhere) follow it, oldest first.
    `remembered`: the (rule, version) pairs that approve-and-remember made, so their decisions say so.
    `follow_ups`: the run's `call.reminded`, `call.escalated` and `call.fallback` events, told with their calls.
    """
    by_tool_call = {call.tool_call_id: call for call in calls}
    by_call: dict[str, list[Decision]] = {}
    for decision in decisions:
        by_call.setdefault(decision.call_id, []).append(decision)
    entries: list[TimelineEntry] = []
    joined: set[str] = set()
    for message in history:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart):
                    if part.content.strip():
                        entries.append(TimelineEntry(kind="text", content=part.content, at=message.timestamp))
                elif isinstance(part, ThinkingPart):
                    shown = "(redacted by the provider)" if part.redacted else part.content
                    entries.append(TimelineEntry(kind="thinking", content=shown, at=message.timestamp))
                elif isinstance(part, ToolCallPart):
                    call = by_tool_call.get(part.tool_call_id)
                    if call is not None:
                        joined.add(call.id)
                    entries.append(
                        TimelineEntry(
                            kind="call",
                            content=_pretty_args(part),
                            tool_name=part.tool_name,
                            tool_call_id=part.tool_call_id,
                            call=call,
                            decisions=by_call.get(call.id, []) if call else [],
                            current=call is not None and call.id in current,
                            at=message.timestamp,
                            rule=decided_by_rule(call, remembered) if call else None,
                        )
                    )
            continue
        for request_part in message.parts:
            entries.append(_request_entry(request_part))
    for call in sorted((c for c in calls if c.id not in joined), key=lambda c: (c.created_at, c.id)):
        entries.append(
            TimelineEntry(
                kind="call",
                content=json.dumps(call.current_args, indent=2, ensure_ascii=False),
                tool_name=call.tool_name,
                tool_call_id=call.tool_call_id,
                call=call,
                decisions=by_call.get(call.id, []),
                current=call.id in current,
                at=call.created_at,
                rule=decided_by_rule(call, remembered),
                asked_from_elsewhere=True,
            )
        )
    told: dict[str, list[str]] = {}
    for event in follow_ups:
        if (words := follow_up_words(event)) is not None:
            told.setdefault(event.subject_id, []).append(words)
    for entry in entries:
        if entry.call is not None:
            entry.follow_ups = told.get(entry.call.id, [])
    return entries


def follow_up_words(event: AuditEvent) -> str | None:
    """A `call.reminded`, `call.escalated` or `call.fallback` event as a sentence; None for any other event."""
    details = event.details if isinstance(event.details, dict) else {}
    groups = [str(group) for group in details.get("groups") or ()]
    at = _clock(event.at)
    if event.action == "call.reminded":
        who = f"its reviewers in {', '.join(groups)}" if groups else "its reviewers"
        expires = details.get("expires_at")
        when = f": it expires at {_clock(dt.datetime.fromisoformat(expires))}" if isinstance(expires, str) else ""
        return f"Nobody had decided it, so {who} were reminded at {at}{when}."
    if event.action == "call.escalated":
        told = ", ".join(groups) or "nobody"
        widened = " who may now approve it too" if details.get("approver_groups") else ""
        return f"Nobody had decided it, so it was escalated at {at} to {told}{widened}."
    if event.action == "call.fallback":
        waited = details.get("waited_seconds")
        within = f" within the hook's wait ({waited:.0f} s)" if isinstance(waited, int | float) else ""
        answer = str(details.get("fallback") or "its fallback")
        return f"Nobody had decided it{within}, so at {at} the hook answered {answer}: the call still waits."
    return None


def _clock(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _request_entry(
    part: SystemPromptPart | UserPromptPart | ToolReturnPart | RetryPromptPart | ToolDeniedPart,
) -> TimelineEntry:
    if isinstance(part, SystemPromptPart):
        return TimelineEntry(kind="system", content=part.content, at=part.timestamp)
    if isinstance(part, UserPromptPart):
        return TimelineEntry(kind="user", content=part.content, at=part.timestamp)
    if isinstance(part, ToolDeniedPart):
        return _tool_entry("denied", part.reason, part)
    if isinstance(part, RetryPromptPart):
        return _tool_entry("retry", part.content, part)
    kinds: dict[str, EntryKind] = {"tool": "result", "reviewer": "answered", "not-run": "skipped"}
    note = None
    if part.args_override is not None:
        note = "ran with arguments a reviewer edited: " + json.dumps(part.args_override, ensure_ascii=False)
    return _tool_entry(kinds[part.source], as_text(part.content), part, note)


def _tool_entry(
    kind: EntryKind,
    content: str,
    part: ToolReturnPart | RetryPromptPart | ToolDeniedPart,
    note: str | None = None,
) -> TimelineEntry:
    """What became of one tool call (its result, a denial, a retry prompt), tied to the call it answers."""
    return TimelineEntry(
        kind=kind,
        content=content,
        tool_name=part.tool_name,
        tool_call_id=part.tool_call_id,
        note=note,
        at=part.timestamp,
    )


def _pretty_args(part: ToolCallPart) -> str:
    if isinstance(part.args, str):
        try:
            return json.dumps(json.loads(part.args), indent=2, ensure_ascii=False)
        except ValueError:
            return part.args
    return json.dumps(part.args or {}, indent=2, ensure_ascii=False)
