"""The reviewer's HTML pages: inbox, call detail with its decisions and runs (the audit log is `pages.audit`).

Handlers parse the request, call the service or the store, and render. A request from
htmx (`HX-Request`) gets the fragment of the widget it changed, rendered from the same
named block as the full page; any other form post is answered 303 back to the page
(post-redirect-get), so every action works without JavaScript. Errors a reviewer can fix
(a field the tool's validator refused, a call someone else decided first) come back in
the widget itself with 422 or 409; `static/approvals.js` lets htmx swap those.

Which buttons and forms a viewer gets comes from `approvals.calls.options` (`call_options`,
`run_options`), the rules `store.calls.decide` itself refuses by; the pages restate none of them.
The inbox's "For me" view asks the store for the same rules as SQL (`approvable_by`). A
call names the rule that decided it or routed it to groups (`views.RuleMention`); approve
and remember (`store.rules.approve_and_remember`) makes a narrow rule the card lists, revocable.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from approvals.calls.actors import Actor
from approvals.calls.engines import EngineKind, get_engine
from approvals.calls.options import CallOptions, CallRefusal, refusal_sentence, reviewer_refusal, run_options
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.tools import ToolDefinition
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.exceptions import Conflict, Forbidden, InvalidEdit, NotFound, UserError
from approvals.policy import Kind, StoredRule
from approvals.service import Call, Decision, Run
from approvals.store.queries import COUNT_CAP

from .. import sse
from ..auth import AdminPage, ContextDep, ReviewerPage, ViewerPage, verify_csrf
from ..context import AppContext
from . import forms, views
from .htmx import is_htmx, render_page, see_other
from .timeline import follow_up_words, timeline

router = APIRouter(dependencies=[Depends(verify_csrf)], include_in_schema=False)  # pages, not the API
router.include_router(sse.router)

PAGE_SIZE = 50
View = Literal["card", "row"]
"""Which widget a decision form belongs to: the call page's card or an inbox row."""


def _set_filters(filters: dict[str, str]) -> dict[str, str]:
    """The filters a reviewer set, for links: empty ones stay out of the URL."""
    return {k: v for k, v in filters.items() if v}


def _paging(path: str, shown: dict[str, str], after: str | None, next_cursor: str | None) -> dict[str, str | None]:
    """A list's links to its next page and back to its first, keeping the filters."""
    return {
        "next_url": f"{path}?" + urlencode({**shown, "after": next_cursor}) if next_cursor else None,
        "first_url": f"{path}?" + urlencode(shown) if after else None,
    }


# --- inbox ---------------------------------------------------------------------------------


@dataclass
class InboxRow:
    """A call as one line of the inbox."""

    call: Call
    summary: str
    full_args: str
    digest: str
    expiring_soon: bool
    options: CallOptions
    """What the viewer may do with the call, and why not (`approvals.calls.options`)."""
    routing: views.Routing | None = None
    rule: views.RuleMention | None = None
    """The rule that decided the call, when no person did."""
    message: str | None = None


_DEFINITIONS: dict[str, ToolDefinition] = {}


async def _definition(context: AppContext, version: str) -> ToolDefinition:
    """A stored tool definition; its version is a hash of its content, so each is read once per process."""
    definition = _DEFINITIONS.get(version)
    if definition is None:
        definition = await context.store.calls.tool_definition(version)
        if len(_DEFINITIONS) > 1_000:
            _DEFINITIONS.clear()
        _DEFINITIONS[version] = definition
    return definition


async def _row(
    context: AppContext,
    actor: Actor,
    call: Call,
    options: CallOptions,
    remembered: frozenset[tuple[str, int]] | None = None,
) -> InboxRow:
    args = call.current_args
    schema = (await _definition(context, call.tool_version)).parameters_json_schema
    if remembered is None:
        remembered = await context.service.remembered_among([call])
    return InboxRow(
        call=call,
        summary=views.summarize(args, schema=schema),
        full_args=json.dumps(args, ensure_ascii=False, sort_keys=True),
        digest=call.current_digest,
        expiring_soon=views.expiring_soon(call, context.settings.expiring_soon_seconds),
        options=options,
        routing=views.routing(call),
        rule=views.decided_by_rule(call, remembered),
    )


def _shown(count: int) -> str:
    """A count as the inbox shows it: past `COUNT_CAP` the store stopped counting, so "10,000+"."""
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else str(count)


def _shown_sum(counts: dict[str, int]) -> str:
    """Calls of any status: "at least" the capped sum when a status was past the cap."""
    total = sum(min(count, COUNT_CAP) for count in counts.values())
    return f"{total:,}+" if any(count > COUNT_CAP for count in counts.values()) else str(total)


def _tool_names(context: AppContext) -> list[str]:
    names = {name for agent in context.registry.names for name in context.registry.get(agent).agent.tools}
    return sorted(names)


@router.get("/")
async def inbox(
    request: Request,
    actor: ViewerPage,
    context: ContextDep,
    status: str = "pending",
    agent: str = "",
    tool: str = "",
    q: str = "",
    for_me: bool = False,
    after: str | None = None,
) -> Response:
    filters = {"status": status, "agent": agent, "tool": tool, "q": q, "for_me": "1" if for_me else ""}
    mine = actor if for_me else None
    page = await context.store.calls.list_calls(
        status=None if status == "all" else status or None,
        agent_name=agent or None,
        tool_name=tool or None,
        search=q or None,
        approvable_by=mine,
        after=after,
        limit=PAGE_SIZE,
    )
    every_count = await context.store.calls.count_calls_by_status(agent_name=agent or None, tool_name=tool or None)
    mine_count = await context.store.calls.count_calls_by_status(
        agent_name=agent or None, tool_name=tool or None, approvable_by=actor
    )
    counts = mine_count if for_me else every_count
    options = await context.service.options_for(actor, page.items)
    remembered = await context.service.remembered_among(page.items)
    shown = _set_filters(filters)
    for_all = {k: v for k, v in shown.items() if k != "for_me"}
    return render_page(
        request,
        "inbox.html",
        {
            "filters": filters,
            "rows": [await _row(context, actor, call, options[call.id], remembered) for call in page.items],
            "may_decide": reviewer_refusal(actor, approving=False) is None,
            "counts": [
                (s, _shown(counts.get(s, 0))) for s in views.CALL_STATUSES if counts.get(s) or s == CallStatus.PENDING
            ],
            "total": _shown_sum(counts),
            "for_me_count": _shown_sum(mine_count),
            "for_me_url": "/?" + urlencode({**for_all, "for_me": "1"}),
            "everyone_url": "/?" + urlencode(for_all),
            "statuses": views.CALL_STATUSES,
            "agents": context.registry.names,
            "tools": _tool_names(context),
            "query": urlencode({**shown, **({"after": after} if after else {})}),
            "status_links": {s: "/?" + urlencode({**shown, "status": s}) for s in (*views.CALL_STATUSES, "all")},
            **_paging("/", shown, after, page.next_cursor),
        },
        block="inbox",
    )


# --- a call and its decisions --------------------------------------------------------------


@dataclass(frozen=True)
class RememberedRule:
    """A remembered rule that allows calls like the one shown, and whether the viewer may revoke it."""

    rule: StoredRule
    may_revoke: bool
    """Its author, or an admin: whom `store.rules.delete_rule` lets remove it."""


@dataclass
class Card:
    """One call as a stateful widget: what it asks for, who decided what, and what the viewer may do."""

    call: Call
    description: str
    fields: list[forms.ArgField]
    raw_json: str
    digest: str
    decisions: list[Decision]
    options: CallOptions
    """What the viewer may do with the call, and why not (`approvals.calls.options`)."""
    can_edit: bool
    """The viewer may edit, and the tool is known here, so the edit form can be built and checked."""
    edit_note: str | None
    """Why no edit is offered when the run's framework cannot run one (the rest of the options still are)."""
    expiring_soon: bool
    outcome_unknown: bool
    waiting_for_run: bool
    """Approved: the run has yet to act on it."""
    model_args_json: str | None = None
    """The model's own arguments, shown when a reviewer's edit replaced them."""
    routing: views.Routing | None = None
    """Whom a rule routed the call to, and which rule."""
    rule: views.RuleMention | None = None
    """The rule that decided the call, when no person did."""
    remember: forms.RememberForm | None = None
    """Approve and remember: offered when the viewer may approve and one approval decides the call."""
    remembered: list[RememberedRule] = field(default_factory=list)
    """Remembered rules in force for calls like this one."""
    follow_ups: list[str] = field(default_factory=list)
    """Reminders and escalations made for the call, in words (a gate session's page has no timeline to tell them)."""
    session_label: str = "this run"
    form_errors: list[str] = field(default_factory=list)
    message: str | None = None
    message_tone: str = "bad"
    open_form: Literal["edit", "deny", "answer"] | None = None
    reason: str = ""
    reason_error: str | None = None
    answer: str = ""
    answer_format: str = "text"
    answer_error: str | None = None


async def _card(
    context: AppContext,
    actor: Actor,
    call: Call,
    *,
    errors: list[tuple[str, str]] | None = None,
    submitted: dict[str, str] | None = None,
    remember: forms.RememberForm | None = None,
    **state: Any,
) -> Card:
    """Everything a card shows; `errors` and `submitted` put a refused edit back in its form, `remember`
    a refused approve-and-remember."""
    definition = await _definition(context, call.tool_version)
    decisions = await context.store.calls.decisions_for(call.id)
    options = (await context.service.options_for(actor, [call]))[call.id]
    run = await context.store.runs.get_run(call.run_id)
    args = call.current_args
    fields, form_errors = forms.arg_fields(
        definition.parameters_json_schema, args, submitted=submitted, errors=errors or []
    )
    try:
        tool_known = call.tool_name in context.registry.get(call.agent_name).agent.tools
    except NotFound:  # an agent that runs elsewhere: its calls' edits are checked by the schema stored with them
        tool_known = get_engine(run.engine).kind is EngineKind.GATE
    may_remember = options.may_approve and call.approvals_required == 1
    remembered = await context.service.remembered_among([call])
    return Card(
        call=call,
        description=definition.description,
        fields=fields,
        raw_json=json.dumps(args, indent=2, ensure_ascii=False, sort_keys=True),
        digest=call.current_digest,
        decisions=decisions,
        options=options,
        can_edit=options.may_edit and tool_known,
        edit_note=refusal_sentence(options.edit_refusal)
        if options.edit_refusal is CallRefusal.ENGINE_CANNOT_EDIT
        else None,
        expiring_soon=views.expiring_soon(call, context.settings.expiring_soon_seconds),
        outcome_unknown=call.status == CallStatus.OUTCOME_UNKNOWN,
        waiting_for_run=call.status == CallStatus.APPROVED,
        model_args_json=json.dumps(call.args, indent=2, ensure_ascii=False, sort_keys=True)
        if call.override_args is not None
        else None,
        routing=views.routing(call),
        rule=views.decided_by_rule(call, remembered),
        remember=(remember or forms.RememberForm.for_call(args)) if may_remember else None,
        remembered=await _remembered_rules(context, actor, call, run),
        session_label="this session" if run.session_id is not None else "this run",
        form_errors=form_errors,
        open_form="edit" if errors or submitted else state.pop("open_form", None),
        **state,
    )


async def _remembered_rules(context: AppContext, actor: Actor, call: Call, run: Run) -> list[RememberedRule]:
    """The remembered rules in force whose names take calls like `call` (their conditions aside)."""
    now = dt.datetime.now(dt.UTC)
    found = []
    for rule in await context.store.rules.list_rules(kind=Kind.REMEMBERED):
        takes = rule.spec.matches_names(
            engine=run.engine, agent=call.agent_name, tool=call.tool_name, session=run.session_id or run.id
        )
        if rule.in_force(now) and takes:
            found.append(RememberedRule(rule, may_revoke=context.service.may_remove_rule(rule, actor)))
    return found


async def _call_page(
    request: Request, context: AppContext, actor: Actor, call: Call, focus: Card | None = None, status: int = 200
) -> Response:
    """The call page: this step's calls as cards (this one first), and the run's conversation."""
    story = await context.service.run_story(call.run_id)
    run, calls, remembered, follow_ups = story.run, story.calls, story.remembered, story.follow_ups
    step = [c for c in calls if c.created_at == call.created_at and c.id != call.id]
    cards = [focus or await _card(context, actor, call)] + [await _card(context, actor, c) for c in step]
    entries = timeline(
        story.history, calls, story.decisions, current=[call.id], remembered=remembered, follow_ups=follow_ups
    )
    session = [] if run.session_id is None else [c for c in reversed(calls) if c.id != call.id]
    if run.session_id is not None:  # no conversation on the page: the cards tell their own follow-ups
        for card in cards:
            card.follow_ups = [
                words
                for event in follow_ups
                if event.subject_id == card.call.id and (words := follow_up_words(event)) is not None
            ]
    return render_page(
        request,
        "call.html",
        {
            "call": call,
            "run": run,
            "cards": cards,
            "entries": entries,
            "session_calls": session,
            "session_rules": {c.id: views.decided_by_rule(c, remembered) for c in session},
        },
        status=status,
    )


@router.get("/calls/{call_id}")
async def call_detail(request: Request, call_id: str, actor: ViewerPage, context: ContextDep) -> Response:
    call = await context.store.calls.get_call(call_id)
    return await _call_page(request, context, actor, call)


async def _widget(
    request: Request, context: AppContext, actor: Actor, call_id: str, view: View, *, status: int = 200, **state: Any
) -> Response:
    """The card (or inbox row) after a decision or a refused one; a whole page without htmx."""
    call = await context.store.calls.get_call(call_id)
    if view == "row" and is_htmx(request):
        row = await _row(context, actor, call, (await context.service.options_for(actor, [call]))[call.id])
        row.message = state.get("message")
        return render_page(request, "inbox.html", {"row": row}, block="row", status=status)
    card = await _card(context, actor, call, **state)
    if not is_htmx(request):
        return await _call_page(request, context, actor, call, focus=card, status=status)
    return render_page(request, "call.html", {"card": card}, block="card", status=status)


def _conflict_message(exc: Conflict, actor: Actor) -> str:
    if exc.decided_by and exc.decided_by == actor.id:
        return f"You already decided this call ({exc.status})."
    if exc.decided_by:
        return f"{exc.decided_by} decided this call first ({exc.status}); your decision was not applied."
    return str(exc)


async def _decide(
    request: Request,
    context: AppContext,
    actor: Actor,
    call_id: str,
    verdict: Verdict,
    view: View,
    **state: Any,
) -> Response:
    """Apply a verdict, then answer with the changed widget (htmx) or a redirect back to the page."""
    try:
        await context.service.decide(call_id, verdict, actor=actor)
    except Conflict as exc:
        return await _widget(request, context, actor, call_id, view, status=409, message=_conflict_message(exc, actor))
    except InvalidEdit as exc:
        return await _widget(request, context, actor, call_id, view, status=422, errors=exc.errors, **state)
    except Forbidden as exc:
        return await _widget(request, context, actor, call_id, view, status=403, message=str(exc), **state)
    except UserError as exc:  # the verdict itself is refused: a denial without a reason
        hint = {"reason_error": "Write why you deny this call."} if isinstance(verdict, Deny) else {}
        return await _widget(request, context, actor, call_id, view, status=422, message=f"{exc}.", **state, **hint)
    if not is_htmx(request):
        return see_other("/" if view == "row" else f"/calls/{call_id}")
    return await _widget(request, context, actor, call_id, view, message=None)


@router.post("/calls/{call_id}/approve")
async def approve(
    request: Request,
    call_id: str,
    actor: ReviewerPage,
    context: ContextDep,
    args_digest: Annotated[str, Form(min_length=1)],
    view: Annotated[View, Form()] = "card",
) -> Response:
    return await _decide(request, context, actor, call_id, Approve(args_digest=args_digest), view)


@router.post("/calls/{call_id}/approve-and-remember")
async def approve_and_remember(
    request: Request,
    call_id: str,
    actor: ReviewerPage,
    context: ContextDep,
    args_digest: Annotated[str, Form(min_length=1)],
    scope: Annotated[str, Form()] = "session",
    period: Annotated[str, Form()] = "1h",
    pinning: Annotated[forms.Pinning, Form()] = "args",
    pin: Annotated[list[str] | None, Form()] = None,
    condition: Annotated[str, Form()] = "",
) -> Response:
    """Approve, and allow calls like this one for a while: a narrow rule (`store.rules.approve_and_remember`)."""
    call = await context.store.calls.get_call(call_id)
    form = forms.RememberForm.submitted(
        call.current_args, scope=scope, period=period, pinning=pinning, pinned=pin or [], condition=condition
    )
    try:
        remember = form.remember()
        _, rule = await context.service.approve_and_remember(call_id, remember, actor=actor, args_digest=args_digest)
    except Conflict as exc:
        return await _widget(
            request, context, actor, call_id, "card", status=409, message=_conflict_message(exc, actor)
        )
    except Forbidden as exc:
        return await _widget(request, context, actor, call_id, "card", status=403, message=str(exc), remember=form)
    except (UserError, ValueError) as exc:  # a condition that does not compile, a period not offered
        form.error = str(exc)
        return await _widget(request, context, actor, call_id, "card", status=422, remember=form)
    if not is_htmx(request):
        return see_other(f"/calls/{call_id}")
    until = f" until {rule.spec.expires_at:%Y-%m-%d %H:%M} UTC" if rule.spec.expires_at else ""
    message = f"Approved, and calls like this are allowed by rule {rule.name}{until}."
    return await _widget(request, context, actor, call_id, "card", message=message, message_tone="ok")


@router.post("/calls/{call_id}/remembered/{name}/revoke")
async def revoke_remembered(
    request: Request, call_id: str, name: str, actor: ReviewerPage, context: ContextDep
) -> Response:
    """Remove a remembered rule shown on a call's card: its author's or an admin's (`store.rules.delete_rule`)."""
    try:
        await context.service.delete_rule(name, actor=actor)
    except Forbidden as exc:
        return await _widget(request, context, actor, call_id, "card", status=403, message=str(exc))
    except NotFound:
        return await _widget(
            request, context, actor, call_id, "card", status=404, message=f"No rule {name!r} to revoke."
        )
    if not is_htmx(request):
        return see_other(f"/calls/{call_id}")
    message = f"Rule {name} revoked: calls like this ask a person again."
    return await _widget(request, context, actor, call_id, "card", message=message, message_tone="ok")


@router.post("/calls/{call_id}/deny")
async def deny(
    request: Request,
    call_id: str,
    actor: ReviewerPage,
    context: ContextDep,
    reason: Annotated[str, Form()] = "",
    view: Annotated[View, Form()] = "card",
) -> Response:
    return await _decide(
        request, context, actor, call_id, Deny(reason=reason.strip()), view, open_form="deny", reason=reason
    )


@router.post("/calls/{call_id}/edit")
async def edit(
    request: Request,
    call_id: str,
    actor: ReviewerPage,
    context: ContextDep,
    args_digest: Annotated[str, Form(min_length=1)],
) -> Response:
    submitted = forms.form_values((await request.form()).multi_items())
    call = await context.store.calls.get_call(call_id)
    schema = (await _definition(context, call.tool_version)).parameters_json_schema
    args, problems = forms.args_from_form(schema, submitted)
    if problems:  # unreadable input: show it with whatever else the validator finds; nothing is saved
        try:
            await context.service.validate_edit(call, args)
        except InvalidEdit as exc:
            problems += [e for e in exc.errors if e[0] not in {loc for loc, _ in problems}]
        return await _widget(request, context, actor, call_id, "card", status=422, errors=problems, submitted=submitted)
    verdict = EditAndApprove(args=args, args_digest=args_digest)
    return await _decide(request, context, actor, call_id, verdict, "card", submitted=submitted)


@router.post("/calls/{call_id}/answer")
async def answer(
    request: Request,
    call_id: str,
    actor: ReviewerPage,
    context: ContextDep,
    content: Annotated[str, Form()] = "",
    format: Annotated[Literal["text", "json"], Form()] = "text",
) -> Response:
    state: dict[str, Any] = {"open_form": "answer", "answer": content, "answer_format": format}
    value: Any = content
    problem = None if content.strip() else "Write the result the model should receive."
    if problem is None and format == "json":
        try:
            value = json.loads(content)
        except ValueError as exc:
            problem = f"Not valid JSON: {exc}"
    if problem is not None:
        return await _widget(request, context, actor, call_id, "card", status=422, answer_error=problem, **state)
    return await _decide(request, context, actor, call_id, Answer(content=value), "card", **state)


# --- runs ----------------------------------------------------------------------------------


@router.get("/runs")
async def runs(
    request: Request,
    actor: ViewerPage,
    context: ContextDep,
    status: str = "",
    agent: str = "",
    after: str | None = None,
) -> Response:
    page = await context.store.runs.list_runs(
        status=status or None, agent_name=agent or None, after=after, limit=PAGE_SIZE
    )
    filters = {"status": status, "agent": agent}
    return render_page(
        request,
        "runs.html",
        {
            "runs": page.items,
            "filters": filters,
            "statuses": views.RUN_STATUSES,
            "agents": context.registry.names,
            **_paging("/runs", _set_filters(filters), after, page.next_cursor),
        },
        block="runs",
    )


async def _run_page(
    request: Request,
    context: AppContext,
    actor: Actor,
    run_id: str,
    *,
    message: str | None = None,
    status: int = 200,
) -> Response:
    story = await context.service.run_story(run_id)
    run, calls = story.run, story.calls
    return render_page(
        request,
        "run.html",
        {
            "run": run,
            "entries": timeline(
                story.history, calls, story.decisions, remembered=story.remembered, follow_ups=story.follow_ups
            ),
            "waiting": [c for c in calls if c.is_open],
            "output": views.as_text(run.output) if run.output is not None else None,
            "asked_nobody": run.status == RunStatus.COMPLETED and not calls,
            "options": run_options(run.status, actor),
            "cancelled": run.status == RunStatus.CANCELLED,
            "message": message,
        },
        block="run",
        status=status,
    )


@router.get("/runs/{run_id}")
async def run_detail(request: Request, run_id: str, actor: ViewerPage, context: ContextDep) -> Response:
    return await _run_page(request, context, actor, run_id)


@router.post("/runs/{run_id}/cancel")
async def cancel_run(
    request: Request,
    run_id: str,
    actor: AdminPage,
    context: ContextDep,
    reason: Annotated[str, Form()] = "",
) -> Response:
    try:
        await context.service.cancel_run(run_id, actor=actor, reason=reason.strip() or None)
    except Conflict as exc:
        return await _run_page(request, context, actor, run_id, message=str(exc), status=409)
    if not is_htmx(request):
        return see_other(f"/runs/{run_id}")
    return await _run_page(request, context, actor, run_id)
