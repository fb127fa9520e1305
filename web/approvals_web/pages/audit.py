"""The audit log as a person reads it: sentences, questions, one event with its hashes, a call's or a run's story.

Every line is a sentence from `approvals.audit.sentences` (the exports and the API say the
same); details open in full on demand, never cut. The filters are the query string
(`approvals.audit.search`), so a question is a link; `questions_for` lists the usual ones.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from approvals.audit.reading import story, tell, tell_one
from approvals.audit.search import FILTERS, parse_query, questions_for
from approvals.exceptions import NotFound
from approvals.store.audit_log import ACTOR_KINDS, VERDICT_ACTIONS

from ..auth import ContextDep, ViewerPage, verify_csrf
from ..templating import TEMPLATES
from .htmx import render_page
from .views import audit_rule

router = APIRouter(dependencies=[Depends(verify_csrf)], include_in_schema=False)
TEMPLATES.env.globals["audit_rule"] = audit_rule  # the rule an event names, linked where it is told (`_audit.html`)

PAGE_SIZE = 50


@router.get("/audit")
async def audit(request: Request, actor: ViewerPage, context: ContextDep, after: str | None = None) -> Response:
    """The log, newest first, answering the question in the query string."""
    filters = {name: request.query_params.get(name, "") for name in FILTERS}
    query = parse_query(filters)
    page = await context.store.audit.audit_events(query=query, after=after, limit=PAGE_SIZE)
    shown = {k: v.strip() for k, v in filters.items() if v.strip()}
    return render_page(
        request,
        "audit.html",
        {
            "events": await tell(context.store.audit, page.items),
            "filters": filters,
            "asked": bool(shown),
            "questions": questions_for(person=filters["actor"] or actor.id, tool=filters["tool"] or None),
            "verdicts": list(VERDICT_ACTIONS),
            "actor_kinds": ACTOR_KINDS,
            "next_url": "/audit?" + urlencode({**shown, "after": page.next_cursor}) if page.next_cursor else None,
            "first_url": "/audit?" + urlencode(shown) if after else None,
            "csv_url": "/api/audit/export?" + urlencode({**shown, "format": "csv"}),
            "jsonl_url": "/api/audit/export?" + urlencode({**shown, "format": "jsonl"}),
        },
    )


@router.get("/audit/events/{event_id}")
async def audit_event(request: Request, actor: ViewerPage, context: ContextDep, event_id: int) -> Response:
    """One event: its sentence, its details in full, its hash and the hash of the event before it."""
    event = await context.store.audit.audit_event(event_id)
    if event is None:
        raise NotFound(f"No audit event {event_id}")
    (told,) = await tell(context.store.audit, [event])
    return render_page(request, "audit_event.html", {"told": told})


@router.get("/calls/{call_id}/story")
async def call_story(request: Request, actor: ViewerPage, context: ContextDep, call_id: str) -> Response:
    """A call's story from the log: asked, routed, reminded, escalated, decided, handed out, ran, outcome."""
    told = await story(context.store.audit, call_id=call_id)
    if not told:
        raise NotFound(f"No call {call_id!r} in the audit log")
    subject = {"kind": "call", "id": call_id, "name": told[0].event.tool_name or "call"}
    return render_page(request, "audit_story.html", {"story": told, "subject": subject}, block="story")


@router.get("/runs/{run_id}/story")
async def run_story(request: Request, actor: ViewerPage, context: ContextDep, run_id: str) -> Response:
    """A run's story from the log, every call's events among the run's own, in order."""
    told = await story(context.store.audit, run_id=run_id)
    if not told:
        raise NotFound(f"No run {run_id!r} in the audit log")
    subject = {"kind": "run", "id": run_id, "name": told[0].event.agent_name or "run"}
    return render_page(request, "audit_story.html", {"story": told, "subject": subject}, block="story")


@router.get("/audit/verify")
async def audit_verify(request: Request, actor: ViewerPage, context: ContextDep) -> Response:
    """The hash chain's state; the audit page loads it after rendering, since it reads every event."""
    verification = await context.store.audit.verify_audit()
    return render_page(request, "audit_verify.html", {"verification": verification}, block="verify")


__all__ = ("router", "tell_one")
