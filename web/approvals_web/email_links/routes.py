"""The pages behind the Approve and Deny links in reviewers' mail (`approvals.channels.email`).

`GET /email/{token}` shows the call and what the link will do, and changes nothing: mail
scanners and link previews open every link in a mail, so a GET must never decide. The
page's form POSTs to the same address, and only that decides, as the link's recipient,
through the same `ApprovalService.decide` as the inbox: role, groups, quorum, self-approval
and the digest of the arguments the mail showed are all checked at the click.

The token in the URL is the credential: unguessable (256 random bits), single-use, bound to
one call, one recipient, one verdict and the mailed arguments, expiring. So the form carries
no session CSRF token, and this router has none of the pages' `verify_csrf`: a cross-site
page cannot forge the POST without knowing the token, and knowing it is exactly what
entitles the POST. (No global dependency or the `SecurityMiddleware` asks for a CSRF token;
the CSP's `form-action 'self'` allows this page's own form.)

Every answer sends `Referrer-Policy: no-referrer` (the page's URL holds the token, and its
links must not hand it to another site) and `Cache-Control: no-store`. Before a link is
used (`store.outbound.claim_email_link`, one atomic UPDATE) everything that would refuse the
decision is checked, so a refused attempt (a denial without a reason, a disabled user, a
call decided elsewhere or changed since the mail, a reviewer outside the call's groups)
leaves the link as it was.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from approvals.calls.actors import Actor
from approvals.calls.options import CallOptions
from approvals.calls.verdicts import Approve, Deny, Verdict
from approvals.channels.call_summary import call_url, decided_sentence, quorum_sentence
from approvals.exceptions import Conflict, Forbidden, UserError
from approvals.service import Call, EmailLink, EmailLinkUse, LinkRefusal, LinkUsed
from approvals.store.email_links import LinkProblem

from ..auth import ContextDep
from ..context import AppContext
from ..templating import render

router = APIRouter(include_in_schema=False)

HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Robots-Tag": "noindex, nofollow"}
_LINK_PROBLEMS = {
    LinkProblem.UNKNOWN: (
        404,
        "Link not found",
        "This link is not one we sent, or it was cut short (some mail programs break long links). "
        "Open the call from the inbox instead.",
    ),
    LinkProblem.USED: (
        410,
        "Link already used",
        "Each link in our mails works once, and this one has been used. "
        "Open the call in the inbox to see what became of it.",
    ),
    LinkProblem.EXPIRED: (
        410,
        "Link expired",
        "This link has expired. If the call still waits for a decision, decide it in the inbox.",
    ),
}


class Refusal(Exception):
    """The link decides nothing now: a page saying why, with its status."""

    def __init__(self, status: int, title: str, detail: str, call: Call | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.call = status, title, detail, call


def _page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    response = render(request, template, context, status=status)
    response.headers.update(HEADERS)
    return response


def _outcome(
    request: Request, context: AppContext, status: int, title: str, detail: str, call: Call | None
) -> Response:
    """A page saying what came of the link: done, or why not (with the call, when there is one)."""
    inbox = call_url(context.settings.public_url or "/", call.id) if call is not None else "/"
    tone = "ok" if status < 400 else "bad"
    values = {"status": status, "title": title, "detail": detail, "call": call, "inbox": inbox, "tone": tone}
    return _page(request, "email_outcome.html", values, status=status)


async def _checked(context: AppContext, token: str) -> tuple[EmailLink, Actor, Call, CallOptions]:
    """The link, its recipient as an actor, its call and what they may do: or the `Refusal` to show instead."""
    found = await context.service.check_email_link(token)
    if isinstance(found, EmailLinkUse):
        return found.link, found.actor, found.call, found.options
    call, problem = found.call, found.problem
    match problem:
        case LinkProblem():
            raise Refusal(*_LINK_PROBLEMS[problem], call)
        case LinkRefusal.RECIPIENT_GONE:
            username = found.link.username if found.link is not None else ""
            detail = f"The account {username!r} this link was sent to is disabled or gone, so it decides nothing."
            raise Refusal(403, "Not allowed", detail, call)
        case LinkRefusal.DECIDED if call is not None:
            raise Refusal(409, "Already decided", f"{decided_sentence(call)}. Nothing was changed.", call)
        case LinkRefusal.ARGS_CHANGED if call is not None:
            raise _changed(call)
        case LinkRefusal.ALREADY_APPROVED:
            raise Refusal(409, "Already approved", found.why_not or "", call)
        case _:  # NOT_ALLOWED
            raise Refusal(403, "Not allowed", found.why_not or "", call)


def _changed(call: Call) -> Refusal:
    return Refusal(
        409,
        "The arguments changed",
        "The call's arguments were edited after this mail was sent, so its links no longer apply. "
        "Nothing was decided: review the call as it stands now in the inbox.",
        call,
    )


def _confirm(
    request: Request,
    link: EmailLink,
    call: Call,
    options: CallOptions,
    *,
    reason: str = "",
    error: str | None = None,
    context: AppContext,
) -> Response:
    values = {
        "link": link,
        "call": call,
        "args_json": json.dumps(call.current_args, indent=2, ensure_ascii=False, sort_keys=True),
        "routed_to": ", ".join(call.approver_groups or ()) or "any reviewer",
        "options": options,
        "quorum": quorum_sentence(options.approvals, options.approvals_required, [])
        if options.counts_approvals
        else None,
        "reason": reason,
        "error": error,
        "inbox": call_url(context.settings.public_url or "/", call.id),
    }
    return _page(request, "email_confirm.html", values, status=422 if error else 200)


@router.get("/email/{token}")
async def email_link_page(request: Request, token: str, context: ContextDep) -> Response:
    """What the link would do, and a button to do it; changes nothing."""
    try:
        link, _, call, options = await _checked(context, token)
    except Refusal as refusal:
        return _outcome(request, context, refusal.status, refusal.title, refusal.detail, refusal.call)
    return _confirm(request, link, call, options, context=context)


@router.post("/email/{token}")
async def email_link_decide(
    request: Request, token: str, context: ContextDep, reason: Annotated[str, Form()] = ""
) -> Response:
    """Use the link: decide the call as its recipient, once."""
    try:
        link, actor, call, options = await _checked(context, token)
        if link.action == "deny" and not reason.strip():
            error = "Write why you deny this call: the agent reads it."
            return _confirm(request, link, call, options, reason=reason, error=error, context=context)
        verdict: Verdict = Approve(args_digest=link.args_digest) if link.action == "approve" else Deny(reason.strip())
        decided = await _decide(context, token, call, verdict, actor)
    except Refusal as refusal:
        return _outcome(request, context, refusal.status, refusal.title, refusal.detail, refusal.call)
    return _outcome(request, context, 200, *await _done(context, decided, verdict), decided)


async def _decide(context: AppContext, token: str, call: Call, verdict: Verdict, actor: Actor) -> Call:
    """Use the link to decide, with what refused it as a `Refusal` (a lost race says who won)."""
    try:
        return await context.service.decide_by_email_link(token, verdict, actor=actor, call_id=call.id)
    except LinkUsed as exc:
        raise Refusal(*_LINK_PROBLEMS[exc.problem], call) from None
    except Conflict as exc:
        now = await context.store.calls.get_call(call.id)
        if not now.is_open:
            who = f"{exc.decided_by} decided this call first" if exc.decided_by else "This call was decided first"
            detail = f"{who}: {decided_sentence(now)}. Your decision was not applied."
            raise Refusal(409, "Already decided", detail, now) from None
        if now.current_digest != call.current_digest:
            raise _changed(now) from None
        raise Refusal(409, "Not applied", f"{exc}.", now) from None
    except Forbidden as exc:
        raise Refusal(403, "Not allowed", f"{exc}.", call) from None
    except UserError as exc:
        raise Refusal(422, "Not applied", f"{exc}.", call) from None


async def _done(context: AppContext, call: Call, verdict: Verdict) -> tuple[str, str]:
    """The result page's title and sentence."""
    if isinstance(verdict, Deny):
        return "Denied", f"You denied {call.tool_name}. The agent is told why: {verdict.reason}"
    if not call.is_open:
        return "Approved", f"You approved {call.tool_name}; the agent goes on with it."
    facts = (await context.store.calls.review_facts([call.id])).get(call.id)
    approvers = sorted(facts.standing.get(call.current_digest, ())) if facts is not None else []
    progress = quorum_sentence(len(approvers), call.approvals_required, approvers)
    return "Approval recorded", f"Your approval counts: {progress}."
