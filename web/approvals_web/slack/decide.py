"""Clicks and forms from Slack, decided through the same `decide` as the web.

Approve decides at once with the digest of the arguments the message showed; Deny opens a
modal (with the click's trigger_id, which Slack honours for 3 seconds) whose submission
denies with the reason given. Role, groups, quorum and self-approval are the store's rules,
checked at the click. Slack must get an answer within 3 seconds: deciding takes
milliseconds, messages are updated later by the deliverer (the decision's audit event), and
what the clicker is told privately (an ephemeral message: not linked, lost a race, not
allowed) is posted after the answer. A modal's refusals are shown on its reason field.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from approvals.calls.actors import Actor
from approvals.calls.states import OPEN_CALL_STATUSES
from approvals.calls.verdicts import Approve, Deny, Verdict
from approvals.channels.call_summary import call_url
from approvals.channels.settings import SlackSettings
from approvals.channels.slack_api import SlackApi, SlackCallFailed
from approvals.channels.slack_blocks import (
    ACTION_APPROVE,
    ACTION_DENY,
    DENY_CALLBACK,
    REASON_ACTION,
    REASON_BLOCK,
    ShownCall,
    deny_modal,
    escape,
)
from approvals.exceptions import Conflict, Forbidden, NotFound, UserError

from ..context import AppContext
from .people import Reviewer, link_token, link_url, reviewer_for

__all__ = ("Later", "SlackAnswer", "on_block_actions", "on_view_submission")

logger = logging.getLogger("approvals.slack")

Later = Callable[[Callable[[], Awaitable[None]]], None]
"""Runs a coroutine function after Slack got its answer."""


@dataclass(frozen=True)
class SlackAnswer:
    """The body of the answer to Slack (None: an empty 200)."""

    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Click:
    user_id: str
    team_id: str
    channel: str | None
    trigger_id: str | None


async def on_block_actions(
    context: AppContext, slack: SlackSettings, payload: dict[str, Any], later: Later
) -> SlackAnswer:
    """A button in one of our messages: Approve decides, Deny opens the reason modal, the inbox link needs nothing."""
    user = payload.get("user") or {}
    channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
    click = _Click(str(user.get("id") or ""), _team(payload), channel, payload.get("trigger_id"))
    api = SlackApi(slack)
    for action in payload.get("actions") or []:
        action_id = action.get("action_id")
        shown = ShownCall.decode(action.get("value"))
        if action_id not in (ACTION_APPROVE, ACTION_DENY):
            continue  # "Open in the inbox" is a link: Slack still tells us of the click
        if shown is None or not click.user_id:
            logger.warning("slack: a %s click without a call in its value was ignored", action_id)
            continue
        reviewer = await reviewer_for(context.store, api, click.user_id)
        if reviewer.actor is None:
            _tell(later, api, click, _unmapped(context, click, reviewer), markup=True)
        elif action_id == ACTION_APPROVE:
            problem = await _decide(context, shown.call_id, Approve(args_digest=shown.digest), reviewer.actor)
            if problem:
                _tell(later, api, click, problem)
        else:
            await _open_deny_modal(context, api, click, shown, later)
    return SlackAnswer()


async def on_view_submission(context: AppContext, slack: SlackSettings, payload: dict[str, Any]) -> SlackAnswer:
    """The deny modal sent: deny with the reason, or show why not on the reason field (the modal stays open)."""
    view = payload.get("view") or {}
    if view.get("callback_id") != DENY_CALLBACK:
        return SlackAnswer()
    shown = ShownCall.decode(view.get("private_metadata"))
    user_id = str((payload.get("user") or {}).get("id") or "")
    if shown is None or not user_id:
        return _field_error("This form is damaged: deny the call in the inbox.")
    values = ((view.get("state") or {}).get("values") or {}).get(REASON_BLOCK) or {}
    reason = str((values.get(REASON_ACTION) or {}).get("value") or "").strip()
    if not reason:
        return _field_error("Write why you deny this call: the model reads it.")
    reviewer = await reviewer_for(context.store, SlackApi(slack), user_id)
    if reviewer.actor is None:
        return _field_error(f"Nothing was decided: {reviewer.problem}.")
    try:
        call = await context.store.calls.get_call(shown.call_id)
    except NotFound:
        return _field_error("This call no longer exists.")
    if call.status in OPEN_CALL_STATUSES and call.current_digest != shown.digest:
        return _field_error("The arguments changed since this message was posted: review them in the inbox.")
    problem = await _decide(context, shown.call_id, Deny(reason=reason), reviewer.actor)
    return _field_error(problem) if problem else SlackAnswer()


async def _decide(context: AppContext, call_id: str, verdict: Verdict, actor: Actor) -> str | None:
    """Apply the verdict; what to tell the person when it was not applied."""
    try:
        await context.service.decide(call_id, verdict, actor=actor)
    except Conflict as exc:
        return _conflict_sentence(exc, actor)
    except Forbidden as exc:
        return f"Nothing was decided: {exc}"
    except NotFound:
        return "This call no longer exists."
    except UserError as exc:
        return f"Nothing was decided: {exc}."
    return None


def _conflict_sentence(exc: Conflict, actor: Actor) -> str:
    """The web's words for a lost race (`pages.inbox._conflict_message`), so every channel says it alike."""
    if exc.decided_by and exc.decided_by == actor.id:
        return f"You already decided this call ({exc.status})."
    if exc.decided_by:
        return f"{exc.decided_by} decided this call first ({exc.status}); your decision was not applied."
    return f"Your decision was not applied: {exc}"


async def _open_deny_modal(context: AppContext, api: SlackApi, click: _Click, shown: ShownCall, later: Later) -> None:
    """The reason modal, at once (the trigger works for 3 s); a call already decided gets a sentence instead."""
    try:
        call = await context.store.calls.get_call(shown.call_id)
    except NotFound:
        _tell(later, api, click, "This call no longer exists.")
        return
    if call.status not in OPEN_CALL_STATUSES:
        who = f" by {call.decided_by}" if call.decided_by else ""
        _tell(later, api, click, f"This call was already decided{who} ({call.status}); nothing was changed.")
        return
    if not click.trigger_id:
        return
    try:
        await api.open_view(click.trigger_id, deny_modal(ShownCall(call.id, shown.digest, click.channel), call))
    except SlackCallFailed as exc:
        logger.warning("slack: the deny form for call %s did not open: %s", call.id, exc.code)
        url = call_url(context.settings.public_url, call.id)
        _tell(
            later,
            api,
            click,
            "The deny form did not open; nothing was decided." + (f" Deny it in the inbox: {url}" if url else ""),
        )


def _unmapped(context: AppContext, click: _Click, reviewer: Reviewer) -> str:
    """Why nothing was decided, as Slack markup: with a link to link one's account when that would help."""
    text = escape(f"Nothing was decided: {reviewer.problem}.")
    if reviewer.linkable and context.settings.public_url:
        url = link_url(
            context.settings.public_url, link_token(context.settings.secret_key, click.user_id, click.team_id)
        )
        text += f" <{escape(url)}|Link your Slack account> (the link works for an hour), then click again."
    return text


def _tell(later: Later, api: SlackApi, click: _Click, text: str, *, markup: bool = False) -> None:
    """An ephemeral message to the clicker, after Slack got its answer; `text` is escaped unless it is `markup`."""
    if not markup:
        text = escape(text)
    if not click.channel:
        logger.info("slack: nowhere to tell %s: %s", click.user_id, text)
        return
    channel = click.channel

    async def post() -> None:
        try:
            await api.post_ephemeral(channel, click.user_id, text)
        except SlackCallFailed as exc:
            logger.warning("slack: could not tell %s privately (%s): %s", click.user_id, exc.code, text)

    later(post)


def _field_error(text: str) -> SlackAnswer:
    return SlackAnswer({"response_action": "errors", "errors": {REASON_BLOCK: text}})


def _team(payload: dict[str, Any]) -> str:
    return str((payload.get("team") or {}).get("id") or (payload.get("user") or {}).get("team_id") or "")
