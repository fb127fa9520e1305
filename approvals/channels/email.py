"""E-mail: a mail to each reviewer a pending call is routed to, with single-use Approve and Deny links.

The durable deliverer (`approvals.channels.deliverer`) follows the audit log for this channel
(destination "email"): `call.requested` mails the reviewers the call is routed to
(`store.people.reviewers_in(call.approver_groups)`, those with an address), `call.reminded` mails
them again, `call.escalated` mails the members of the groups escalated to who got no mail
about the call yet. The call is read when the event is delivered: a call no longer pending
gets no mail. Each recipient's mail is recorded (`store.outbound.record_message`) right after the
server took it, and a delivery tried again skips recipients already recorded for that call
and purpose, so an outage halfway through the list mails nobody twice (barring a crash
between sending and recording: then at least once).

Each mail carries the recipient's own links (`store.outbound.create_email_links`: approve and deny,
bound to the arguments' digest, expiring after `SmtpSettings.link_ttl` or with the call);
opening one shows a confirmation page and the page's POST decides
(`approvals_web.email_links.routes`).

What an SMTP answer does, and why:

- Accepted: recorded; the next recipient.
- A recipient refused for good (5xx to RCPT TO, or 5xx to the message's DATA): that
  recipient is skipped with a log line and nothing recorded; the others still get theirs.
  Trying again would be refused again, and holding every later mail behind one dead
  mailbox would stop the channel.
- A recipient refused for now (4xx: greylisting, a full mailbox, a busy server): the other
  recipients go on, then the event fails (`DeliveryFailed`) and is tried again with backoff
  for the ones still missing.
- Connection refused, a timeout, a dropped connection, TLS or STARTTLS problems, our sender
  address or our credentials refused (any code): `DeliveryFailed` at once. These are an
  outage or our own configuration, true of every mail alike, so the event waits (nothing
  lost) until the server is back or the settings are fixed and the process restarted.

No event is ever refused for good (`DeliveryRefused`): one event stands for many
recipients, and refusing it would lose all their mail. Messages and logs carry addresses
and SMTP answers, never the links (their tokens decide calls) nor the password.

Mail leaves over one kept-open connection (`smtp_mailer.Mailer`). aiosmtplib comes with the
`server` extra; it is imported only when mail is sent, so the core library imports without it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..calls.states import CallStatus
from ..exceptions import NotFound
from ..store.run_plan import utcnow
from .base import DeliveryFailed
from .call_summary import call_url
from .email_content import MailLinks, Purpose, compose_call_mail
from .settings import SmtpSettings
from .smtp_mailer import Mailer, SendOutcome

if TYPE_CHECKING:
    from ..store import Store
    from ..store.models import AuditEventRow, ToolCallRow, UserRow

__all__ = ("EMAIL_ACTIONS", "EmailChannel", "email_link_url", "open_email_channel")

logger = logging.getLogger("approvals.email")

EMAIL_ACTIONS: dict[str, Purpose] = {
    "call.requested": "pending",
    "call.reminded": "reminder",
    "call.escalated": "escalation",
}
"""Audit actions that make mail, and the purpose each mail is recorded under."""
CHANNEL = "email"


def email_link_url(public_url: str, token: str) -> str:
    """The confirmation page of a link: `/email/{token}` under the inbox's address."""
    return f"{public_url.rstrip('/')}/email/{quote(token, safe='')}"


class EmailChannel:
    """Reviewers' mail as one destination of the durable deliverer (`approvals.channels.base.Channel`)."""

    kind = "email"
    destination_id = CHANNEL
    actions: Collection[str] | None = frozenset(EMAIL_ACTIONS)

    def __init__(self, store: Store, smtp: SmtpSettings, *, public_url: str, mailer: Mailer | None = None) -> None:
        self.store = store
        self.smtp = smtp
        self.public_url = public_url
        self.mailer = mailer or Mailer(smtp)
        self.site = f"smtp://{smtp.host}:{smtp.port}"

    def wants(self, event: AuditEventRow) -> bool:
        return event.action in EMAIL_ACTIONS

    def event_name(self, event: AuditEventRow) -> str:
        return f"email.{EMAIL_ACTIONS.get(event.action, event.action)}"

    async def deliver(self, event: AuditEventRow) -> None:
        purpose = EMAIL_ACTIONS.get(event.action)
        if purpose is None:
            return
        try:
            call = await self.store.calls.get_call(event.subject_id)
        except NotFound:
            return  # deleted with its run: nobody to ask
        if call.status != CallStatus.PENDING or _expired(call):
            return  # decided, expired or cancelled by now: asking would only confuse
        details: dict[str, Any] = event.details if isinstance(event.details, dict) else {}
        groups = tuple(str(g) for g in details.get("groups") or ()) if purpose == "escalation" else ()
        recipients = await self._recipients(call, purpose, groups)
        waiting: list[str] = []
        for user in recipients:
            assert user.email is not None
            outcome = await self._mail(call, user, purpose, groups)
            if outcome.sent:
                continue
            if outcome.temporary:
                waiting.append(f"{user.email}: {outcome.problem}")
            else:
                logger.warning(
                    "mail about call %s to %s refused for good, skipped: %s", call.id, user.email, outcome.problem
                )
        if waiting:
            raise DeliveryFailed(f"mail about call {call.id} deferred for {len(waiting)}: " + "; ".join(waiting)[:500])

    async def _recipients(self, call: ToolCallRow, purpose: Purpose, groups: tuple[str, ...]) -> list[UserRow]:
        """Who gets this mail: the routed reviewers (or, escalating, the groups' members) not yet mailed for it."""
        if purpose == "escalation":
            if not groups:
                return []  # escalated to nobody by mail
            users = await self.store.people.reviewers_in(groups)
            done_purposes: str | None = None  # anyone mailed about the call already knows of it
        else:
            users = await self.store.people.reviewers_in(call.approver_groups)
            done_purposes = purpose
        done = {m.destination for m in await self.store.outbound.sent_messages(call.id, CHANNEL, purpose=done_purposes)}
        return [user for user in users if user.email and user.email not in done]

    async def _mail(self, call: ToolCallRow, user: UserRow, purpose: Purpose, groups: tuple[str, ...]) -> SendOutcome:
        assert user.email is not None
        expires_at = utcnow() + dt.timedelta(seconds=self.smtp.link_ttl)
        if call.expires_at is not None:
            expires_at = min(expires_at, call.expires_at)
        tokens = await self.store.outbound.create_email_links(
            call.id, user.username, call.current_digest, expires_at=expires_at
        )
        links = MailLinks(
            approve=email_link_url(self.public_url, tokens.approve),
            deny=email_link_url(self.public_url, tokens.deny),
            inbox=call_url(self.public_url, call.id),
            links_expire_at=expires_at,
        )
        message = compose_call_mail(
            call, sender=self.smtp.sender, recipient=user.email, links=links, purpose=purpose, groups=groups
        )
        outcome = await self.mailer.send(message, user.email)
        if outcome.sent:
            await self.store.outbound.record_message(
                call.id, CHANNEL, user.email, purpose, str(message["Message-ID"])[:200]
            )
            logger.info("mailed %s about call %s (%s)", user.email, call.id, purpose)
        return outcome


def _expired(call: ToolCallRow) -> bool:
    return call.expires_at is not None and call.expires_at <= utcnow()


@asynccontextmanager
async def open_email_channel(
    store: Store, smtp: SmtpSettings, *, public_url: str | None
) -> AsyncIterator[EmailChannel]:
    """The e-mail channel; `public_url` (where the links lead) is required."""
    if not public_url:
        raise ValueError("e-mail needs the inbox's public URL: its links lead there (APPROVALS_PUBLIC_URL)")
    mailer = Mailer(smtp)
    try:
        yield EmailChannel(store, smtp, public_url=public_url, mailer=mailer)
    finally:
        await mailer.close()
