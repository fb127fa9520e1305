"""Events told for people: each with its sentence, its actor in words, its details whole, an edit's diff.

The page, the API, the exports and the CLI read events through `tell`, so they say the same
thing; a call's or a run's story (`story`) is its events told oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..store.audit_log import AuditLog, AuditQuery, SubjectFacts
from ..store.models import AuditEventRow
from .actors import ActorWords, actor_words
from .diff import FieldChange, field_changes
from .sentences import EventFacts, sentence

__all__ = ("STORY_MOST", "Told", "story", "tell", "tell_one")

STORY_MOST = 1_000
"""A story's most events: a run of a thousand calls shows its first thousand events."""


@dataclass(frozen=True, kw_only=True)
class Told:
    """One event as a reader gets it."""

    event: AuditEventRow
    sentence: str
    actor: ActorWords
    details_json: str
    """The details in full, indented: shown expandable, never cut."""
    changes: list[FieldChange] = field(default_factory=list)
    """An edit's field-by-field diff against the arguments the model asked with."""


def _facts(event: AuditEventRow, calls: Mapping[str, SubjectFacts], runs: Mapping[str, SubjectFacts]) -> EventFacts:
    found = calls.get(event.subject_id) if event.subject_type == "call" else None
    either = found or (runs.get(event.run_id) if event.run_id else None) or SubjectFacts()
    return EventFacts(args=either.args, session_id=either.session_id, engine=either.engine)


def tell_one(event: AuditEventRow, facts: EventFacts | None = None) -> Told:
    """One event told, with the facts the reader has."""
    facts = facts or EventFacts()
    edited = event.details.get("edited_args") if isinstance(event.details, dict) else None
    changes = field_changes(facts.args, edited) if isinstance(edited, dict) and facts.args is not None else []
    details = "" if event.details is None else json.dumps(event.details, ensure_ascii=False, sort_keys=True, indent=2)
    return Told(
        event=event,
        sentence=sentence(event, facts),
        actor=actor_words(event.actor),
        details_json=details,
        changes=changes,
    )


async def tell(audit: AuditLog, events: Sequence[AuditEventRow]) -> list[Told]:
    """`events` told, with their calls' arguments and their runs' sessions read in two queries."""
    call_ids = {e.subject_id for e in events if e.subject_type == "call"}
    run_ids = {e.run_id for e in events if e.run_id}
    calls, runs = await audit.subject_facts(call_ids, run_ids)
    return [tell_one(event, _facts(event, calls, runs)) for event in events]


async def story(audit: AuditLog, *, call_id: str | None = None, run_id: str | None = None) -> list[Told]:
    """A call's or a run's events told in order: asked, routed, reminded, decided, handed out, ran, outcome."""
    query = AuditQuery(subject_type="call", subject_id=call_id) if call_id else AuditQuery(run_id=run_id)
    page = await audit.audit_events(query=query, limit=STORY_MOST, newest_first=False)
    return await tell(audit, page.items)
