"""Slack: a message per pending call, kept up to date until someone decides it, on the durable deliverer.

One channel ("slack") follows the audit log (`approvals.channels.base`):

- `call.requested`: the call, read as it is now (skipped if no longer open), is posted to the
  destination of each of its groups with a route (`SlackSettings.routes`), or to the default
  channel. Each post is recorded (`channel_messages`) right after Slack accepts it, and a
  retried event skips the destinations recorded, so nobody gets the message twice.
- `call.approved` / `call.edited` / `call.denied` / `call.answered` / `call.expired`, and
  `run.cancelled` (which cancels the run's open calls): every recorded message about the call
  is updated (`chat.update`) to its current state: who decided and how, without buttons; or,
  for a quorum still short, how many approvals it has and from whom, buttons kept.
- `call.reminded`: a reply in each message's thread. `call.escalated`: the message, marked as
  an escalation, to the routes of the escalation groups not yet posted to.

Failures (`approvals.channels.slack_api` sorts them): an outage, a rate limit (after waiting
out Slack's Retry-After, up to a few seconds) or a token Slack refuses raise
`DeliveryFailed`, so the deliverer tries the event again later and nothing is lost: a fixed
token picks up where delivery stopped. A destination Slack says cannot get messages
(`channel_not_found`, `not_in_channel`, ...) is logged and passed over while the others get
theirs; when every destination refuses, or Slack refuses the message itself (`invalid_blocks`),
the event is refused (`DeliveryRefused`: logged and audited as `slack.refused`), since
sending it again would fail the same way and hold up every later message. A message that
can no longer be updated (deleted in Slack) is logged and left.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio

from ..calls.states import OPEN_CALL_STATUSES
from ..exceptions import NotFound
from .base import DeliveryFailed, DeliveryRefused
from .call_summary import decided_sentence, quorum_sentence
from .settings import SlackSettings
from .slack_api import SlackApi, SlackCallFailed
from .slack_blocks import Message, call_message, reminder_text

if TYPE_CHECKING:
    from ..store import Store
    from ..store.models import AuditEventRow, ChannelMessageRow, ToolCallRow

__all__ = ("ACTIONS", "SlackChannel", "message_ref", "open_slack_channel", "parse_ref")

logger = logging.getLogger("approvals.slack")

CHANNEL = "slack"
"""The channel's name in `channel_messages` and its destination id on the deliverer."""
DECIDED = frozenset({"call.approved", "call.edited", "call.denied", "call.answered", "call.expired"})
ACTIONS = frozenset({"call.requested", "call.reminded", "call.escalated", "run.cancelled", *DECIDED})
MAX_RATE_LIMIT_WAIT = 5.0
"""The longest an attempt waits out Slack's Retry-After before failing (the deliverer then backs off too)."""


def message_ref(channel: str, ts: str) -> str:
    """What a sent message is recorded as: its conversation (a `D…` id for a direct message) and its ts."""
    return f"{channel} {ts}"


def parse_ref(ref: str | None) -> tuple[str, str] | None:
    channel, _, ts = (ref or "").partition(" ")
    return (channel, ts) if channel and ts else None


class SlackChannel:
    """Slack as a channel of the durable deliverer (`approvals.channels.base.Channel`)."""

    kind = CHANNEL
    destination_id = CHANNEL
    actions: Collection[str] | None = ACTIONS

    def __init__(self, store: Store, settings: SlackSettings, api: SlackApi, *, public_url: str | None) -> None:
        self.store = store
        self.settings = settings
        self.api = api
        self.public_url = public_url
        parts = urlsplit(settings.api_url)
        self.site = f"{parts.scheme}://{parts.hostname or ''}"

    def wants(self, event: AuditEventRow) -> bool:
        return event.action in ACTIONS

    def event_name(self, event: AuditEventRow) -> str:
        return "call.pending" if event.action == "call.requested" else event.action

    async def deliver(self, event: AuditEventRow) -> None:
        try:
            if event.action == "run.cancelled":
                for call in await self.store.calls.run_calls(event.subject_id):
                    await self._refresh(call)
                return
            call = await self.store.calls.get_call(event.subject_id)
        except NotFound:  # the run was deleted since: nothing left to tell
            return
        if event.action == "call.requested":
            if call.status in OPEN_CALL_STATUSES:
                await self._post(call, self._destinations(call.approver_groups), purpose="pending")
        elif event.action == "call.reminded":
            if call.status in OPEN_CALL_STATUSES:
                await self._remind(call)
        elif event.action == "call.escalated":
            if call.status in OPEN_CALL_STATUSES:
                groups = (event.details or {}).get("groups") or []
                await self._post(call, self._routes(groups), purpose="escalation", note="Escalated: nobody decided yet")
        else:
            await self._refresh(call)

    def _routes(self, groups: Iterable[str]) -> list[str]:
        """The destinations of the groups that have a route, each once."""
        return list(dict.fromkeys(self.settings.routes[g] for g in groups if g in self.settings.routes))

    def _destinations(self, groups: Iterable[str] | None) -> list[str]:
        """Where a call routed to `groups` goes: their routes, else the default channel."""
        routed = self._routes(groups or ())
        if routed:
            return routed
        return [self.settings.channel] if self.settings.channel else []

    async def _post(self, call: ToolCallRow, destinations: list[str], *, purpose: str, note: str | None = None) -> None:
        sent = {row.destination for row in await self.store.outbound.sent_messages(call.id, CHANNEL)}
        todo = [destination for destination in destinations if destination not in sent]
        if not todo:
            return
        message = await self._message(call, note=note)
        refused: list[str] = []
        for destination in todo:
            try:
                channel, ts = await self.api.post_message(destination, message.text, message.blocks)
            except SlackCallFailed as exc:
                await self._fail_or_continue(exc)
                logger.warning("slack: %s refused the message about call %s: %s", destination, call.id, exc.code)
                refused.append(f"{destination}: {exc.code}")
                continue
            await self.store.outbound.record_message(call.id, CHANNEL, destination, purpose, message_ref(channel, ts))
        if len(refused) == len(todo) and not (sent & set(destinations)):
            raise DeliveryRefused("no destination took the message: " + "; ".join(refused))

    async def _fail_or_continue(self, exc: SlackCallFailed) -> None:
        """Raise what the deliverer should do about a failed post, unless only its destination is at fault."""
        if exc.transient:
            if exc.retry_after:
                await anyio.sleep(min(exc.retry_after, MAX_RATE_LIMIT_WAIT))
            raise DeliveryFailed(str(exc))
        if not exc.destination:
            raise DeliveryRefused(str(exc))

    async def _remind(self, call: ToolCallRow) -> None:
        reminded = {
            row.destination for row in await self.store.outbound.sent_messages(call.id, CHANNEL, purpose="reminder")
        }
        text = reminder_text(call)
        for row in await self._announcements(call):
            where = parse_ref(row.ref)
            if where is None or row.destination in reminded:
                continue
            channel, ts = where
            try:
                _, reply = await self.api.post_message(channel, text, thread_ts=ts)
            except SlackCallFailed as exc:
                await self._fail_or_continue(exc)
                logger.warning("slack: no reminder in %s for call %s: %s", row.destination, call.id, exc.code)
                continue
            await self.store.outbound.record_message(
                call.id, CHANNEL, row.destination, "reminder", message_ref(channel, reply)
            )

    async def _refresh(self, call: ToolCallRow) -> None:
        """Bring every message about `call` to its current state."""
        rows = await self._announcements(call)
        if not rows:
            return
        message = await self._message(call)
        for row in rows:
            where = parse_ref(row.ref)
            if where is None:
                continue
            try:
                await self.api.update_message(*where, message.text, message.blocks)
            except SlackCallFailed as exc:
                if exc.transient:
                    await self._fail_or_continue(exc)
                logger.warning("slack: message %s about call %s not updated: %s", row.ref, call.id, exc.code)

    async def _announcements(self, call: ToolCallRow) -> list[ChannelMessageRow]:
        """The messages showing the call (not the reminders in their threads)."""
        rows = await self.store.outbound.sent_messages(call.id, CHANNEL)
        return [row for row in rows if row.purpose != "reminder"]

    async def _message(self, call: ToolCallRow, *, note: str | None = None) -> Message:
        """The call as it is now: waiting (with its quorum so far), or what became of it."""
        if call.status not in OPEN_CALL_STATUSES:
            return call_message(call, public_url=self.public_url, open_=False, status_line=decided_sentence(call))
        status_line = None
        if call.approvals_required > 1:
            facts = (await self.store.calls.review_facts([call.id])).get(call.id)
            approvers = sorted(facts.standing.get(call.current_digest, frozenset())) if facts else []
            if approvers:
                status_line = quorum_sentence(len(approvers), call.approvals_required, approvers)
        return call_message(call, public_url=self.public_url, open_=True, status_line=status_line, note=note)


@asynccontextmanager
async def open_slack_channel(
    store: Store, slack: SlackSettings, *, public_url: str | None
) -> AsyncIterator[SlackChannel]:
    """The Slack channel for the deliverer; it holds no connection (each call opens its own)."""
    if not (slack.channel or slack.routes):
        logger.warning("slack: no channel and no routes are set: no Slack messages will be sent")
    yield SlackChannel(store, slack, SlackApi(slack), public_url=public_url)
