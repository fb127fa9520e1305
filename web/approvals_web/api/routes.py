"""The JSON API under /api: runs, calls, decisions, approve-and-remember, resumes and the audit log.

Handlers parse, call the service or the store, and render a schema from `approvals_web.api.schemas`;
every error is an RFC 9457 problem (see `approvals_web.api.problems`). The actor comes from
authentication only (`approvals_web.auth`): state-changing requests without one are 401 before the
CSRF check, which then applies to cookie sessions (bearer tokens are exempt).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Annotated, Any, Literal, assert_never

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from approvals.audit.reading import tell
from approvals.audit.search import parse_query
from approvals.audit_csv import CSV_COLUMNS, csv_row
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.policy import Remember
from approvals.service import AuditEvent
from approvals.store import Store
from approvals.store.queries import decode_cursor

from ..auth import (
    SAFE_METHODS,
    AuditReadAPI,
    CallsDecideAPI,
    CallsReadAPI,
    ContextDep,
    RunsAdminAPI,
    RunsReadAPI,
    RunsWriteAPI,
    ViewerAPI,
    current_actor,
    verify_csrf,
)
from .problems import PROBLEM_JSON
from .schemas import (
    ActorOut,
    AnswerVerdict,
    ApproveAndRemember,
    ApproveVerdict,
    AuditEventOut,
    AuditPage,
    AuditVerificationOut,
    CallDetail,
    CallList,
    CallOut,
    CallPage,
    Cancel,
    Decision,
    DenyVerdict,
    EditVerdict,
    Name,
    Problem,
    Remembered,
    RememberedRuleOut,
    Resume,
    RunMessages,
    RunOut,
    RunPage,
    StartRun,
    UtcDatetime,
    check_text,
)


async def authenticate_writes(request: Request) -> None:
    """A state-changing request from nobody is a 401 (the CSRF check is for logged-in browsers)."""
    if request.method not in SAFE_METHODS and await current_actor(request) is None:
        raise HTTPException(401, "Authentication required", headers={"WWW-Authenticate": "Bearer"})


_ERRORS = {
    400: "Malformed request, such as an invalid page cursor.",
    401: "Not authenticated, or the API token is invalid or revoked.",
    403: "The actor's role does not allow this, or a cookie request lacks its CSRF token.",
    404: "No such run, call or agent.",
    409: "The state changed: the call was already decided (`decided_by` says by whom) or the run is not in a state "
    "that allows this (`status_now`).",
    422: "The request is not valid; `errors` lists each invalid field with its location.",
    413: "The request body is larger than the server accepts (`APPROVALS_MAX_REQUEST_BYTES`).",
    503: "The database cannot be reached right now; nothing was changed. `Retry-After` says when to try again.",
}
EVERY_ROUTE = (400, 401, 403, 413, 422, 503)
"""Answers any API route can give: auth, scopes, size, validation, a database outage."""


def errors(*codes: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the problem responses a route can give."""
    return {
        code: {
            "model": Problem,
            "description": descriptions.get(f"e{code}", _ERRORS[code]),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for code in codes
    }


router = APIRouter(
    prefix="/api",
    tags=["api"],
    dependencies=[Depends(authenticate_writes), Depends(verify_csrf)],
    responses=errors(*EVERY_ROUTE),
)


RunId = Annotated[Name, Path(description="The run's id.")]
CallId = Annotated[Name, Path(description="The call's id.")]
Cursor = Annotated[str, Field(max_length=2_000, description="`next_cursor` of the previous page.")]


def checked_cursor(after: str | None, *kinds: type) -> str | None:
    """A page cursor the store can use, by the store's one check (`decode_cursor`); a bad one is a 400 problem.

    Checked before the store is asked because the store reads an empty `after` as no cursor,
    which the API answers with 400.
    """
    if after is not None:
        decode_cursor(after, kinds)
    return after


class RunFilters(BaseModel):
    status: RunStatus | None = None
    agent: Name | None = None
    after: Cursor | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50


class CallFilters(BaseModel):
    status: CallStatus | Literal["all"] = Field(CallStatus.PENDING, description="A call status, or `all`.")
    agent: Name | None = None
    tool: Name | None = None
    q: (
        Annotated[
            str,
            StringConstraints(max_length=200),
            AfterValidator(check_text),
            Field(description="Text to find in the model's arguments."),
        ]
        | None
    ) = None
    for_me: bool = Field(
        False,
        description="Only the calls you may approve now: open, routed to no group or to one of yours, "
        "not of a run you started, not already approved by you.",
    )
    after: Cursor | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50


class AuditFilters(BaseModel):
    since: UtcDatetime | None = Field(None, description="Events at or after this time (UTC unless it says).")
    until: UtcDatetime | None = Field(None, description="Events before this time.")
    actor: Name | None = None
    action: Name | None = Field(None, description="E.g. `call.approved`, `run.completed`.")
    agent: Name | None = None
    tool: Name | None = None
    run: Name | None = Field(None, description="A run id.")
    by: Literal["person", "service", "rule", "system"] | None = Field(
        None, description="Who acted: a person, a service (an API token), a rule, or the system (a worker)."
    )
    verdict: Literal["approved", "edited", "denied", "answered", "expired"] | None = Field(
        None, description="Decisions of this verdict (`approved` includes edits)."
    )
    engine: Name | None = Field(None, description="Events of runs of this engine.")
    rule: Name | None = Field(None, description="Events a rule made, about it, or naming it.")
    channel: Name | None = Field(None, description="Decisions made on this channel: `web`, `api`, `slack`, `email`.")
    text: Name | None = Field(None, description="Text in the event's details or its call's arguments.")

    def store_filters(self) -> dict[str, Any]:
        """The filters as the store takes them; the newer ones through the audit search's one parser."""
        named = {"by": self.by, "verdict": self.verdict, "engine": self.engine, "rule": self.rule}
        return {
            "since": self.since,
            "until": self.until,
            "actor": self.actor,
            "action": self.action,
            "agent_name": self.agent,
            "tool_name": self.tool,
            "run_id": self.run,
            "query": parse_query({**named, "channel": self.channel, "text": self.text}),
        }


class AuditListFilters(AuditFilters):
    after: Cursor | None = None
    limit: Annotated[int, Field(ge=1, le=1_000)] = 100


# Who am I


@router.get("/me", summary="The authenticated actor", responses=errors(401))
async def me(actor: ViewerAPI) -> ActorOut:
    return ActorOut(id=actor.id, role=actor.role, groups=sorted(actor.groups))


# Runs


@router.post(
    "/runs",
    status_code=201,
    summary="Start a run of a registered agent",
    description="Queues the run for a worker; the response has a `Location` header naming the new run.",
    responses=errors(401, 403, 404, 422, e404="No agent with that name is registered."),
)
async def start_run(body: StartRun, actor: RunsWriteAPI, context: ContextDep, response: Response) -> RunOut:
    run_id = await context.service.start_run(body.agent, body.prompt, actor=actor, deps=body.deps)
    response.headers["Location"] = f"/api/runs/{run_id}"
    return RunOut.model_validate(await context.store.runs.get_run(run_id))


@router.get("/runs", summary="List runs, newest first", responses=errors(400, 401, 422))
async def list_runs(actor: RunsReadAPI, context: ContextDep, filters: Annotated[RunFilters, Query()]) -> RunPage:
    page = await context.store.runs.list_runs(
        status=filters.status,
        agent_name=filters.agent,
        after=checked_cursor(filters.after, dt.datetime, str),
        limit=filters.limit,
    )
    return RunPage(items=[RunOut.model_validate(r) for r in page.items], next_cursor=page.next_cursor)


@router.get("/runs/{run_id}", summary="A run's status, output and error", responses=errors(401, 404, 422))
async def get_run(run_id: RunId, actor: RunsReadAPI, context: ContextDep) -> RunOut:
    return RunOut.model_validate(await context.store.runs.get_run(run_id))


@router.get("/runs/{run_id}/messages", summary="A run's stored message history", responses=errors(401, 404, 422))
async def run_messages(run_id: RunId, actor: RunsReadAPI, context: ContextDep) -> RunMessages:
    await context.store.runs.get_run(run_id)  # 404 for an unknown run rather than an empty history
    return RunMessages(run_id=run_id, messages=await context.service.history(run_id))


@router.get("/runs/{run_id}/calls", summary="The calls of a run that needed a person", responses=errors(401, 404, 422))
async def run_calls(run_id: RunId, actor: CallsReadAPI, context: ContextDep) -> CallList:
    await context.store.runs.get_run(run_id)
    return CallList(items=[CallOut.model_validate(c) for c in await context.store.calls.run_calls(run_id)])


@router.post(
    "/runs/{run_id}/cancel",
    summary="Stop a run that has not ended (admin)",
    description=(
        "Also a run a worker is resuming right now: calls that never ran are cancelled, one the worker was executing "
        "becomes `outcome_unknown` for a person to settle, and the worker's next write is refused. A run that "
        "already ended is a 409."
    ),
    responses=errors(401, 403, 404, 409, 422),
)
async def cancel_run(
    run_id: RunId, actor: RunsAdminAPI, context: ContextDep, body: Annotated[Cancel | None, Body()] = None
) -> RunOut:
    return RunOut.model_validate(
        await context.service.cancel_run(run_id, actor=actor, reason=body.reason if body else None)
    )


@router.post(
    "/runs/{run_id}/retry",
    status_code=202,
    summary="Send a failed run back to the workers (admin)",
    description="The run continues from its stored history; only failed runs can be retried.",
    responses=errors(401, 403, 404, 409, 422),
)
async def retry_run(run_id: RunId, actor: RunsAdminAPI, context: ContextDep) -> RunOut:
    return RunOut.model_validate(await context.service.retry_run(run_id, actor=actor))


@router.post(
    "/runs/{run_id}/resume",
    summary="Resume a ready run now, or leave it to the workers",
    description=(
        'With `{"wait": seconds}` the run is resumed in this process and the answer (200) is its state once it '
        "settles or the time is up. With `null` the run is left to the workers (a ready run is already queued) and "
        "the answer is 202 with its status. A run that is not ready (still awaiting approval, or ended) is a 409."
    ),
    responses={
        202: {"model": RunOut, "description": "The run is queued for the workers."},
        **errors(401, 403, 404, 409, 422),
    },
)
async def resume_run(
    run_id: RunId,
    actor: RunsWriteAPI,
    context: ContextDep,
    response: Response,
    body: Annotated[Resume | None, Body()] = None,
) -> RunOut:
    run = await context.service.resumable_run(run_id)
    wait = body.wait if body else None
    if wait is None:
        response.status_code = 202
        return RunOut.model_validate(run)
    return RunOut.model_validate(await context.service.resume_now(run_id, wait=wait))


# Calls


@router.get("/calls", summary="The inbox: calls waiting for a person, oldest first", responses=errors(400, 401, 422))
async def list_calls(actor: CallsReadAPI, context: ContextDep, filters: Annotated[CallFilters, Query()]) -> CallPage:
    mine = actor if filters.for_me else None
    page = await context.store.calls.list_calls(
        status=None if filters.status == "all" else filters.status,
        agent_name=filters.agent,
        tool_name=filters.tool,
        search=filters.q,
        approvable_by=mine,
        after=checked_cursor(filters.after, dt.datetime, str),
        limit=filters.limit,
    )
    counts = await context.store.calls.count_calls_by_status(
        agent_name=filters.agent, tool_name=filters.tool, approvable_by=mine
    )
    return CallPage(items=[CallOut.model_validate(c) for c in page.items], next_cursor=page.next_cursor, counts=counts)


@router.get(
    "/calls/{call_id}",
    summary="A call with its validated arguments, tool definition and decisions",
    responses=errors(401, 404, 422),
)
async def get_call(call_id: CallId, actor: CallsReadAPI, context: ContextDep) -> CallDetail:
    call = await context.store.calls.get_call(call_id)
    definition = await context.store.calls.tool_definition(call.tool_version)
    return CallDetail.build(call, definition, await context.store.calls.decisions_for(call_id))


@router.post(
    "/calls/{call_id}/decision",
    summary="Approve, deny, edit and approve, or answer a pending call",
    description=(
        "The body's `verdict` picks the kind. Edited arguments are validated by the tool's own validator (422 with "
        "field `errors`, nothing saved). Send the call's `current_args_digest` as `args_digest` to refuse the "
        "approval if the arguments changed since you showed them. Reviewers may not approve calls of runs they "
        "started, nor calls a rule routed to groups they are not in (403); anyone who decides may deny them."
    ),
    responses=errors(401, 403, 404, 409, 422),
)
async def decide(
    call_id: CallId, body: Annotated[Decision, Body()], actor: CallsDecideAPI, context: ContextDep
) -> CallOut:
    return CallOut.model_validate(await context.service.decide(call_id, to_verdict(body), actor=actor))


@router.post(
    "/calls/{call_id}/approve-and-remember",
    summary="Approve a call and allow calls like it for a while",
    description=(
        "Approves the call as `decision` does, then makes a narrow rule (`remembered-...`): the same agent and tool, "
        "this session or any (`scope`), the `pinned` arguments' values or a `condition`, until `duration` ends. You "
        "may remember only what you may approve: a call you may not approve is a 403 (outside its groups, asked for by "
        "you, your own run), one that needs several approvals a 400. The rule's author (or an admin) may remove it."
    ),
    responses=errors(400, 401, 403, 404, 409, 422),
)
async def approve_and_remember(
    call_id: CallId, body: Annotated[ApproveAndRemember, Body()], actor: CallsDecideAPI, context: ContextDep
) -> Remembered:
    remember = Remember(body.scope, dt.timedelta(seconds=body.duration), pinned=body.pinned, condition=body.condition)
    call, rule = await context.service.approve_and_remember(
        call_id, remember, actor=actor, args_digest=body.args_digest
    )
    return Remembered(
        call=CallOut.model_validate(call),
        rule=RememberedRuleOut(
            name=rule.name,
            version=rule.version,
            author=rule.author,
            created_at=rule.created_at,
            expires_at=rule.spec.expires_at,
            definition=rule.spec.definition(),
        ),
    )


def to_verdict(body: ApproveVerdict | DenyVerdict | EditVerdict | AnswerVerdict) -> Verdict:
    match body:
        case ApproveVerdict():
            return Approve(args_digest=body.args_digest)
        case DenyVerdict():
            return Deny(reason=body.reason)
        case EditVerdict():
            return EditAndApprove(args=body.args, args_digest=body.args_digest)
        case AnswerVerdict():
            return Answer(content=body.content)
        case _:
            assert_never(body)


# Audit log


@router.get("/audit", summary="Audit events, newest first", responses=errors(400, 401, 422))
async def list_audit(
    actor: AuditReadAPI, context: ContextDep, filters: Annotated[AuditListFilters, Query()]
) -> AuditPage:
    page = await context.store.audit.audit_events(
        **filters.store_filters(), after=checked_cursor(filters.after, int), limit=filters.limit
    )
    return AuditPage(items=await _told(context.store, page.items), next_cursor=page.next_cursor)


@router.get(
    "/audit/export",
    summary="Download every matching audit event, oldest first",
    description=(
        "Streams CSV or JSON Lines (one event per line, exactly as stored). The export stops at the event that was "
        "newest when it began. In CSV, cells a spreadsheet would run as a formula are prefixed with `'`."
    ),
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The events.",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            },
        },
        **errors(400, 401, 422),
    },
)
async def export_audit(
    actor: AuditReadAPI,
    context: ContextDep,
    filters: Annotated[AuditFilters, Query()],
    format: Literal["csv", "jsonl"] = "jsonl",
) -> StreamingResponse:
    media_type = "text/csv; charset=utf-8" if format == "csv" else "application/x-ndjson"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    asked = filters.store_filters()  # bad filters are a 400 now, not a stream cut off once it began
    return StreamingResponse(
        _export(context.store, asked, format),
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="audit-{stamp}.{format}"'},
    )


@router.get("/audit/verify", summary="Check the audit log's hash chain end to end", responses=errors(401))
async def verify_audit(actor: AuditReadAPI, context: ContextDep) -> AuditVerificationOut:
    return AuditVerificationOut.model_validate(await context.store.audit.verify_audit())


async def _export(store: Store, filters: dict[str, Any], format: Literal["csv", "jsonl"]) -> AsyncIterator[str]:
    head = await store.audit.last_audit_event_id()
    after: str | None = None
    if format == "csv":
        yield _csv_lines([CSV_COLUMNS])
    while True:
        page = await store.audit.audit_events(**filters, after=after, limit=1_000, newest_first=False)
        rows = [row for row in page.items if row.id <= head]
        if rows:
            told = await _told(store, rows)
            pairs = zip(rows, told, strict=True)
            yield _csv_lines(csv_row(r, e.summary or "") for r, e in pairs) if format == "csv" else _jsonl(told)
        if page.next_cursor is None or len(rows) < len(page.items):
            return
        after = page.next_cursor


async def _told(store: Store, rows: Sequence[AuditEvent]) -> list[AuditEventOut]:
    """Events as the API gives them, each with its sentence (`approvals.audit.sentences`)."""
    return [
        AuditEventOut.model_validate(told.event).model_copy(update={"summary": told.sentence})
        for told in await tell(store.audit, rows)
    ]


def _jsonl(events: list[AuditEventOut]) -> str:
    return "".join(event.model_dump_json() + "\n" for event in events)


def _csv_lines(rows: Iterable[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()
