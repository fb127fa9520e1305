"""The few Slack Web API methods we call, one call at a time, off the event loop.

slack_sdk's synchronous `WebClient` (urllib, no extra dependency) runs in a worker thread
with a timeout and without its own retries: whoever calls decides what a failure means
(the deliverer retries with backoff; an interaction answers the person at once).

Every failure comes out as `SlackCallFailed`, sorted by what trying again can do:

- `transient`: the network, a timeout, HTTP 5xx, a rate limit (HTTP 429 or `ratelimited`,
  with Slack's `Retry-After`), and the token's problems (`invalid_auth`, `missing_scope`,
  `token_revoked`, ...). Retrying after the outage ends or the token is fixed loses nothing,
  so these are never a reason to drop a message.
- `destination`: this conversation or person cannot get messages from the app
  (`channel_not_found`, `not_in_channel`, `is_archived`, `user_not_found`, ...); others can.
- anything else: Slack refused the request itself for good (`invalid_blocks`, `msg_too_long`, ...).
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio.to_thread
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web import SlackResponse

from .settings import SlackSettings

__all__ = ("DEFAULT_TIMEOUT", "SlackApi", "SlackCallFailed")

logger = logging.getLogger("approvals.slack")

DEFAULT_TIMEOUT = 5.0
"""Seconds one Web API call may take: within the deliverer's attempt, and close to an interaction's 3 s budget."""
AUTH_ERRORS = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "no_permission",
        "not_allowed_token_type",
        "ekm_access_denied",
        "team_access_not_granted",
    }
)
"""The app's token or its scopes are wrong: every call fails until an admin fixes them, then every call works."""
SERVER_ERRORS = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
DESTINATION_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "user_not_found",
        "user_not_visible",
        "user_disabled",
        "cannot_dm_bot",
        "messages_tab_disabled",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
    }
)
"""This conversation or person cannot get the app's messages; other destinations may."""


class SlackCallFailed(Exception):
    """A Web API call Slack did not carry out; the message names the method and Slack's error, never the token."""

    def __init__(self, method: str, code: str, *, transient: bool, retry_after: float | None = None) -> None:
        self.method = method
        self.code = code
        """Slack's error (`channel_not_found`), or ours: `http_503`, `network: ...`."""
        self.transient = transient
        self.retry_after = retry_after
        """Seconds Slack asked us to wait (HTTP 429's Retry-After)."""
        super().__init__(f"{method}: {code}")

    @property
    def destination(self) -> bool:
        """The conversation or person is the problem, not the request or Slack."""
        return self.code in DESTINATION_ERRORS

    @property
    def auth(self) -> bool:
        return self.code in AUTH_ERRORS


class SlackApi:
    """The bot's Web API client; each method is one call, raising `SlackCallFailed`."""

    def __init__(self, settings: SlackSettings, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._client = WebClient(
            token=settings.bot_token,
            base_url=settings.api_url,
            timeout=max(1, round(timeout)),
            retry_handlers=[],  # the caller retries (the deliverer, with backoff), never a thread sleeping here
        )

    async def post_message(
        self,
        channel: str,
        text: str,
        blocks: Sequence[Mapping[str, Any]] | None = None,
        *,
        thread_ts: str | None = None,
    ) -> tuple[str, str]:
        """Post to a conversation or a member (a direct message); the conversation's id and the message's ts."""
        arguments: dict[str, Any] = {"channel": channel, "text": text, "unfurl_links": False, "unfurl_media": False}
        if blocks is not None:
            arguments["blocks"] = list(blocks)
        if thread_ts is not None:
            arguments["thread_ts"] = thread_ts
        data = await self._call("chat.postMessage", self._client.chat_postMessage, arguments)
        return str(data["channel"]), str(data["ts"])

    async def update_message(self, channel: str, ts: str, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Replace a message's text and blocks (an empty list removes them all)."""
        arguments = {"channel": channel, "ts": ts, "text": text, "blocks": list(blocks)}
        await self._call("chat.update", self._client.chat_update, arguments)

    async def post_ephemeral(
        self, channel: str, user: str, text: str, blocks: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        """A message only `user` sees, in `channel`."""
        arguments: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if blocks is not None:
            arguments["blocks"] = list(blocks)
        await self._call("chat.postEphemeral", self._client.chat_postEphemeral, arguments)

    async def open_view(self, trigger_id: str, view: Mapping[str, Any]) -> None:
        """Open a modal for the person whose click gave `trigger_id` (it works for 3 seconds)."""
        await self._call("views.open", self._client.views_open, {"trigger_id": trigger_id, "view": dict(view)})

    async def user_info(self, user: str) -> dict[str, Any]:
        """Slack's user object for a member id (the e-mail needs the users:read.email scope)."""
        data = await self._call("users.info", self._client.users_info, {"user": user})
        found: dict[str, Any] = data.get("user") or {}
        return found

    async def _call(self, method: str, call: Callable[..., SlackResponse], arguments: dict[str, Any]) -> dict[str, Any]:
        # abandon_on_cancel: a cancelled attempt returns at once; the thread ends within the client's timeout
        return await anyio.to_thread.run_sync(
            functools.partial(_call_sync, method, call, arguments), abandon_on_cancel=True
        )


def _call_sync(method: str, call: Callable[..., SlackResponse], arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        response = call(**arguments)
    except SlackApiError as exc:
        raise _failure(method, exc.response) from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError, json.JSONDecodeError) as exc:
        raise SlackCallFailed(method, f"network: {type(exc).__name__}: {exc}", transient=True) from None
    except SlackClientError as exc:
        raise SlackCallFailed(method, f"client: {type(exc).__name__}", transient=True) from None
    data = response.data
    return data if isinstance(data, dict) else {}


def _failure(method: str, response: SlackResponse) -> SlackCallFailed:
    status = response.status_code
    data = response.data if isinstance(response.data, dict) else {}
    code = str(data.get("error") or f"http_{status}")
    if status == 429 or code in ("ratelimited", "rate_limited"):
        return SlackCallFailed(method, code, transient=True, retry_after=_retry_after(response.headers))
    if status >= 500 or code in SERVER_ERRORS:
        return SlackCallFailed(method, f"http_{status}: {code}" if status >= 500 else code, transient=True)
    if code in AUTH_ERRORS:
        logger.error(
            "Slack refused the app's token (%s on %s): fix APPROVALS_SLACK_BOT_TOKEN or its scopes", code, method
        )
        return SlackCallFailed(method, code, transient=True)
    return SlackCallFailed(method, code, transient=False)


def _retry_after(headers: Mapping[str, Any]) -> float | None:
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return None
    return None
