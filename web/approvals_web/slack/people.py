"""Who clicked in Slack: the member mapped to an inbox user, and signed links for members to link themselves.

A member is an inbox user when an admin or the user linked their member id
(`UserRow.slack_user_id`), or else when Slack vouches for their e-mail address
(`users.info` says `is_email_confirmed`) and an inbox user has that address. An unconfirmed
address maps nobody: anyone can type any address into a Slack profile. A disabled user
decides nothing. A member nobody maps to gets a link (`link_token`) to a page where, logged
in to the inbox, they link their member id to themselves; the token is signed with the
app's secret key and bound to the member and their workspace, and expires in an hour.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from approvals.calls.actors import Actor
from approvals.channels.slack_api import SlackApi, SlackCallFailed
from approvals.store import Store

__all__ = (
    "LINK_SALT",
    "LINK_TTL",
    "LinkRequest",
    "Reviewer",
    "link_token",
    "link_url",
    "read_link_token",
    "reviewer_for",
)

logger = logging.getLogger("approvals.slack")

LINK_TTL = 3600
"""Seconds a link to link one's Slack account works."""
LINK_SALT = "approvals.slack-account-link"


@dataclass(frozen=True)
class Reviewer:
    """The inbox user a Slack member acts as, or why there is none."""

    actor: Actor | None
    problem: str | None = None
    """Why nothing can be decided as this member (unmapped, disabled)."""
    linkable: bool = False
    """The member may link their account themselves (they map to nobody yet)."""


async def reviewer_for(store: Store, api: SlackApi, slack_user_id: str) -> Reviewer:
    """The inbox user `slack_user_id` acts as: by an explicit link, else by Slack's confirmed e-mail."""
    user = await store.people.user_by_slack_id(slack_user_id)
    if user is None:
        try:
            info = await api.user_info(slack_user_id)
        except SlackCallFailed as exc:
            logger.warning("slack: users.info for %s failed (%s): mapping by e-mail skipped", slack_user_id, exc.code)
            info = {}
        email = (info.get("profile") or {}).get("email")
        if email and info.get("is_email_confirmed") is True and not info.get("deleted"):
            user = await store.people.user_by_email(str(email))
    if user is None:
        problem = "your Slack account is not linked to a user of the approvals inbox"
        return Reviewer(None, problem, linkable=True)
    actor = await store.people.reviewer_actor(user)
    if actor is None:
        return Reviewer(None, f"the inbox user {user.username} your Slack account is linked to is disabled")
    return Reviewer(replace(actor, channel="slack"))


@dataclass(frozen=True)
class LinkRequest:
    """What a link token asks to link: a Slack member of a workspace."""

    slack_user_id: str
    team_id: str


def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key, salt=LINK_SALT)


def link_token(secret_key: str, slack_user_id: str, team_id: str) -> str:
    return _serializer(secret_key).dumps({"user": slack_user_id, "team": team_id})


def link_url(public_url: str | None, token: str) -> str:
    return f"{(public_url or '').rstrip('/')}/account/slack?" + urlencode({"token": token})


def read_link_token(secret_key: str, token: str) -> LinkRequest | None:
    """The request a token carries; None when it is forged, damaged or older than `LINK_TTL`."""
    try:
        data = _serializer(secret_key).loads(token, max_age=LINK_TTL)
    except (SignatureExpired, BadSignature):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("user"), str) or not isinstance(data.get("team"), str):
        return None
    return LinkRequest(data["user"], data["team"])
