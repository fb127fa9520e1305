"""Linking one's own Slack account: the page an unmapped Slack member is sent to from an ephemeral message.

The link carries a token (`slack.people.link_token`) naming the Slack member and workspace,
signed with the app's secret key and valid for an hour. Logged in to the inbox, the person
sees what will be linked (the member's name in Slack, and a warning: whoever sent them a link
would decide as them) and confirms with a POST (CSRF-protected like every form); their clicks
in Slack are theirs from then on. A bad or expired token gets a page saying so, and
nothing is linked.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from approvals.channels.slack_api import SlackApi, SlackCallFailed
from approvals.exceptions import Conflict, UserError

from ..auth import ContextDep, ViewerPage, verify_csrf
from ..context import AppContext
from ..templating import render
from .people import LinkRequest, read_link_token

__all__ = ("router",)

router = APIRouter(dependencies=[Depends(verify_csrf)], include_in_schema=False)

_BAD_LINK = (
    "This link is invalid or has expired (links work for an hour). Click the button in Slack again for a new one."
)


def _read(request: Request, secret_key: str, token: str) -> LinkRequest | Response:
    found = read_link_token(secret_key, token)
    if found is None:
        return render(request, "slack_link.html", {"problem": _BAD_LINK}, status=400)
    return found


@router.get("/account/slack")
async def link_page(request: Request, actor: ViewerPage, context: ContextDep, token: str = "") -> Response:
    found = _read(request, context.settings.secret_key, token)
    if isinstance(found, Response):
        return found
    user = await context.store.people.get_user(actor.id)
    return render(
        request,
        "slack_link.html",
        {
            "link": found,
            "token": token,
            "current": user.slack_user_id,
            "username": actor.id,
            "slack_name": await _slack_name(context, found.slack_user_id),
        },
    )


async def _slack_name(context: AppContext, slack_user_id: str) -> str | None:
    """The member's name in Slack, so the person sees whose account they link (None when Slack cannot say)."""
    slack = context.settings.outbound().slack
    if slack is None:
        return None
    try:
        info = await SlackApi(slack).user_info(slack_user_id)
    except SlackCallFailed:
        return None
    profile = info.get("profile") or {}
    name = profile.get("real_name") or info.get("real_name") or info.get("name")
    return str(name) if name else None


@router.post("/account/slack")
async def link_account(
    request: Request, actor: ViewerPage, context: ContextDep, token: Annotated[str, Form()] = ""
) -> Response:
    found = _read(request, context.settings.secret_key, token)
    if isinstance(found, Response):
        return found
    try:
        await context.service.set_user_contact(actor.id, actor=actor, slack_user_id=found.slack_user_id)
    except (Conflict, UserError) as exc:
        return render(request, "slack_link.html", {"problem": str(exc)}, status=409)
    return render(request, "slack_link.html", {"linked": found, "username": actor.id})
