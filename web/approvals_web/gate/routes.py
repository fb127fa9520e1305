"""The gate: agents that run elsewhere ask for decisions over HTTP, in any language or through a coding CLI's hook.

- `POST /api/gate/calls`: ask about one call, waiting up to `wait` seconds for its decision;
  `GET /api/gate/calls/{id}?wait=`: wait again; `POST /api/gate/calls/{id}/outcome`: say
  how the approved call went. Errors are RFC 9457 problems, as in the rest of the API.
- `POST /api/hooks/{cli}`: a coding CLI's pre-tool hook (Claude Code's HTTP hook, or our
  command client `approvals hook` for the others). It always answers 200 with a decision in
  the CLI's format: most CLIs run the tool when a hook fails, so every failure is a denial.

Both take API tokens only (a bearer header, no cookie session), with the `calls:ask` scope.
The logic is the core's (`approvals.engines.gate.asking`); this module reads HTTP.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, StrictBool

from approvals.calls.actors import Actor
from approvals.calls.requests import MAX_APPROVAL_TTL, CallRequest
from approvals.calls.states import CallStatus
from approvals.engines.gate.answers import GateAnswer
from approvals.engines.gate.asking import (
    MAX_WAIT_SECONDS,
    Asked,
    HookAsked,
    answer_later,
    ask,
    hook_answer,
    hook_asked,
    look,
)
from approvals.engines.gate.hooks import FORMATS, Fallback, HookFormat

from ..api.routes import EVERY_ROUTE, errors
from ..api.schemas import CallOut, Name
from ..auth import ContextDep, app_context
from ..context import AppContext
from ..parking import Gone, park

__all__ = ("hooks_router", "router")

logger = logging.getLogger("approvals.web.gate")
router = APIRouter(prefix="/api", tags=["gate"], responses=errors(*EVERY_ROUTE))
hooks_router = APIRouter(prefix="/api", tags=["gate"])
"""The hooks: no error statuses to document, as they answer every request with a decision."""

ASK_SCOPE = "calls:ask"
Wait = Annotated[
    float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for a decision before answering (0: at once).")
]


async def asking_actor(request: Request) -> Actor:
    """The token's actor, who may ask: a bearer token only (a browser's cookie session asks nothing)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(
            401, "The gate takes an API token (Authorization: Bearer ...)", {"WWW-Authenticate": "Bearer"}
        )
    actor = await app_context(request).store.people.token_actor(token.strip())
    if actor is None:
        raise HTTPException(401, "Invalid or revoked API token", headers={"WWW-Authenticate": "Bearer"})
    if not actor.can("reviewer") or not actor.may(ASK_SCOPE):
        raise HTTPException(
            403, f"Asking needs the reviewer role and a token with the {ASK_SCOPE!r} scope; {actor.id}'s has not both"
        )
    return actor


AskingActor = Annotated[Actor, Depends(asking_actor)]


class GateRequest(BaseModel):
    """One tool call to ask a person about."""

    source: Name = Field(description="Who asks: the agent or application; its sessions are runs under this name.")
    session_id: Name = Field(description="The caller's session; its calls gather in one run.")
    tool_name: str = Field(min_length=1, max_length=64)
    args: dict[str, Any] = Field(description="The tool's arguments, a JSON object.")
    idempotency_key: Name | None = Field(
        default=None,
        description="The same key in the same session gets the same call and its decision, never a second approval.",
    )
    json_schema: dict[str, Any] | None = Field(
        default=None, description="The arguments' JSON Schema; without one, a registered tool's, else any object."
    )
    description: str = Field(default="", max_length=10_000, description="What the tool does, for reviewers.")
    context: dict[str, Any] | None = Field(default=None, description="Working directory, requester, ...: shown.")
    reason: str | None = Field(default=None, max_length=2_000)
    approvals_required: int = Field(default=1, ge=1, le=10)
    approval_ttl: float | None = Field(
        default=None, gt=0, le=MAX_APPROVAL_TTL, description="Seconds people have to decide."
    )
    engine: Literal["gate", "mcp"] = Field(
        default="gate", description="The gate that asks: `gate` (any program) or `mcp` (the MCP gateway)."
    )
    same_arguments_same_call: StrictBool = Field(
        default=False,
        description=(
            "Asking again with the same tool and arguments in the session, under another key, finds the call while it "
            "waits or is approved and not yet handed out: for callers whose retries carry no key of their own."
        ),
    )

    def to_request(self) -> CallRequest:
        request = CallRequest(
            engine=self.engine,
            same_arguments_same_call=self.same_arguments_same_call,
            source=self.source,
            session_id=self.session_id,
            tool_name=self.tool_name,
            args=self.args,
            json_schema=self.json_schema,
            description=self.description,
            context=self.context,
            reason=self.reason,
            approvals_required=self.approvals_required,
            approval_ttl=self.approval_ttl,
        )
        return replace(request, tool_call_id=self.idempotency_key) if self.idempotency_key else request


class GateAnswerOut(BaseModel):
    """Where a call stands, as its caller acts on it."""

    call_id: str
    idempotency_key: str
    decision: str = Field(description="pending, approved, denied, answered or expired.")
    status: str = Field(description="The call's status (approved, executing, succeeded, ...).")
    args: Any = Field(description="The arguments to run the tool with: a reviewer's edit, or the call's own.")
    edited: bool
    reason: str | None = Field(description="Why it was denied (the model may read it), or why it expired.")
    answer: Any = Field(description="What a reviewer answered in the tool's place.")
    decided_by: str | None
    handed_out: bool = Field(
        description="True on the one answer that hands the approved call to you to run now (it is executing "
        "from then on). An approval already handed out, to an earlier or concurrent request of yours, says "
        "false: do not run it again."
    )
    url: str = Field(description="The call's page in the inbox.")

    @classmethod
    def build(cls, answer: GateAnswer, url: str) -> GateAnswerOut:
        return cls(
            call_id=answer.call_id,
            idempotency_key=answer.tool_call_id,
            decision=answer.decision.value,
            status=answer.status.value,
            args=answer.args,
            edited=answer.edited,
            reason=answer.reason,
            answer=answer.answer,
            decided_by=answer.decided_by,
            handed_out=answer.handed_out,
            url=url,
        )


class Outcome(BaseModel):
    """How an approved call went, once the caller ran it."""

    outcome: CallStatus = Field(description="succeeded, failed, or outcome_unknown when the caller cannot tell.")
    result: Any = None


def call_url(request: Request, call_id: str) -> str:
    """The call's page, at the address reviewers use (`APPROVALS_PUBLIC_URL`), else the one this request came to."""
    base = app_context(request).settings.public_url or str(request.base_url)
    return f"{base.rstrip('/')}/calls/{call_id}"


@router.post(
    "/gate/calls",
    summary="Ask a person about one tool call, and wait a while for the decision",
    description=(
        "Validates the arguments against `json_schema` (422 with field `errors`, nothing stored), stores the call "
        "in the session's run and waits up to `wait` seconds. 201 for a new call, 200 for one asked before under "
        "the same `idempotency_key` (409 if that key was used with other arguments). Poll "
        "`GET /api/gate/calls/{call_id}?wait=` while the decision is `pending`; run the tool only once it is "
        "`approved`, with the returned `args`, then report the outcome."
    ),
    status_code=201,
    response_model=GateAnswerOut,
    responses={200: {"model": GateAnswerOut, "description": "Asked before: the same call."}, **errors(404, 409)},
)
async def ask_call(
    body: Annotated[GateRequest, Body()], actor: AskingActor, context: ContextDep, request: Request, wait: Wait = 0
) -> Response:
    asked = await ask(context.service, body.to_request(), actor=actor, gone=request.is_disconnected)
    return await _answered(request, context, asked, actor, wait, status=201 if asked.created else 200)


@router.get(
    "/gate/calls/{call_id}",
    summary="A gate call's decision, waiting up to `wait` seconds for it",
    response_model=GateAnswerOut,
    responses=errors(404),
)
async def wait_for_call(
    call_id: Name, actor: AskingActor, context: ContextDep, request: Request, wait: Wait = 0
) -> Response:
    asked = await look(context.service, call_id, actor=actor, gone=request.is_disconnected)
    return await _answered(request, context, asked, actor, wait)


async def _answered(
    request: Request, context: AppContext, asked: Asked, actor: Actor, wait: float, *, status: int = 200
) -> Response:
    """The gate's answer now, or once a person decided or `wait` seconds passed (the request parked meanwhile)."""
    pages = call_url(request, "")
    pending, wait = asked.pending, _bounded(context, wait)
    if pending is None or wait <= 0:
        return _answer_json(asked.answer, pages, status)
    service = context.service

    async def later(gone: Gone) -> Response:
        return _answer_json(await answer_later(service, pending, actor=actor, wait=wait, gone=gone), pages, status)

    return await park(request, later)


def _answer_json(answer: GateAnswer, pages: str, status: int) -> JSONResponse:
    """`GateAnswerOut` as the response (`pages`: the call pages' address, which the call's id ends)."""
    out = GateAnswerOut.build(answer, f"{pages}{answer.call_id}")
    return JSONResponse(out.model_dump(mode="json"), status_code=status)


def _bounded(context: AppContext, wait: float) -> float:
    """`wait`, cut to what this server holds a request open for (`APPROVALS_GATE_MAX_WAIT`)."""
    return min(wait, context.settings.gate_max_wait)


@router.post(
    "/gate/calls/{call_id}/outcome", summary="Report how an approved gate call went", responses=errors(404, 409)
)
async def settle_call(
    call_id: Name, body: Annotated[Outcome, Body()], actor: AskingActor, context: ContextDep
) -> CallOut:
    return CallOut.model_validate(await context.service.settle_call(call_id, body.outcome, body.result, actor=actor))


@hooks_router.post(
    "/hooks/{cli}",
    summary="A coding CLI's pre-tool hook: always 200, with a decision in the CLI's own format",
    description=(
        "For Claude Code's HTTP `PreToolUse` hook, and for `approvals hook <cli>` (Codex, Gemini CLI, Cursor, and "
        "Claude Code's fail-closed command hook). The body is the CLI's hook input; the token a bearer header with "
        "the `calls:ask` scope. Waits up to `wait` seconds (default 55) for a person, then answers `fallback` "
        "(Claude Code: `deny`, `ask` or `defer`; Cursor: `ask` or `deny`; the others: `deny`); `ttl` gives people "
        "that many seconds from the first ask. Bad input, bad parameters, a bad token and our own failures are "
        "denials with the reason, never an error status: most CLIs run the tool when a hook fails."
    ),
    response_model=dict[str, Any],
)
async def hook(
    cli: str,
    request: Request,
    wait: Annotated[str | None, Query(description="Seconds to wait for a person (0 to 3600).")] = None,
    fallback: Annotated[str | None, Query(description="What to answer when nobody decided in time.")] = None,
    ttl: Annotated[str | None, Query(description="Seconds people have to decide, from the first ask.")] = None,
) -> Response:
    hook_format = FORMATS.get(cli) or FORMATS["claude-code"]
    if cli not in FORMATS:
        return _denied(hook_format, f"No hook format {cli!r}; known: {', '.join(FORMATS)}")
    try:
        options = _hook_options(hook_format, wait, fallback, ttl)
    except ValueError as exc:
        return _denied(hook_format, f"The hook is set up wrong: {exc}")
    options["wait"] = _bounded(app_context(request), options["wait"])
    try:
        actor = await asking_actor(request)
    except HTTPException as exc:
        logger.warning("%s hook refused: %s", cli, exc.detail)
        return _denied(hook_format, f"approvals did not accept the hook's token: {exc.detail}")
    limit = app_context(request).settings.max_request_bytes
    body = await _read_limited(request, limit)
    if body is None:
        return _denied(hook_format, f"The hook input is larger than {limit} bytes")
    try:
        parsed = json.loads(body)
    except ValueError:
        return _denied(hook_format, "The hook input is not JSON")
    service, failed = app_context(request).service, _failed(hook_format, cli, actor)
    try:
        asked = await hook_asked(service, hook_format, parsed, actor=actor, approval_ttl=options["approval_ttl"])
    except Exception:  # our failure (the database is down, say): the tool must not run unasked
        return failed()
    if not isinstance(asked, HookAsked):
        return JSONResponse(asked)
    pages = call_url(request, "")

    async def answered(_gone: Gone | None = None) -> Response:
        try:
            answer = await hook_answer(
                service,
                hook_format,
                asked,
                actor=actor,
                wait=options["wait"],
                fallback=options["fallback"],
                call_url=lambda call_id: f"{pages}{call_id}",
            )
        except Exception:  # as above: a denial, never an error the CLI would take for "go ahead"
            return failed()
        return JSONResponse(answer)

    if asked.answer.decided or options["wait"] <= 0:
        return await answered()
    return await park(request, answered)


def _failed(hook_format: HookFormat, cli: str, actor: Actor) -> Callable[[], JSONResponse]:
    def failed() -> JSONResponse:
        logger.exception("%s hook from %s failed", cli, actor.id)
        return _denied(hook_format, "approvals could not record this call right now, so it was not run; try again")

    return failed


def _hook_options(hook_format: HookFormat, wait: str | None, fallback: str | None, ttl: str | None) -> dict[str, Any]:
    """The hook's query parameters, checked here: a refusal must be a denial, not a 422."""
    seconds = 55.0 if wait is None else float(wait)
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise ValueError(f"wait must be 0 to {MAX_WAIT_SECONDS:g} seconds, not {wait}")
    chosen = Fallback(fallback) if fallback is not None else hook_format.fallbacks[0]
    if chosen not in hook_format.fallbacks:
        allowed = ", ".join(hook_format.fallbacks)
        raise ValueError(f"{hook_format.cli} hooks fall back to {allowed}, not {chosen}")
    approval_ttl = None if ttl is None else float(ttl)
    if approval_ttl is not None and not 0 < approval_ttl <= MAX_APPROVAL_TTL:
        raise ValueError(f"ttl must be a positive number of seconds up to {MAX_APPROVAL_TTL:g}, not {ttl}")
    return {"wait": seconds, "fallback": chosen, "approval_ttl": approval_ttl}


def _denied(hook_format: HookFormat, reason: str) -> JSONResponse:
    return JSONResponse(hook_format.denial(reason))


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes `limit` bytes (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
