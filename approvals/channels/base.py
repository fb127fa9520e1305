"""What an outbound channel is to the durable deliverer (`approvals.channels.deliverer`).

A channel turns audit events into messages for one destination: a webhook URL, later a
Slack channel or a mailbox. The deliverer follows the audit log for it through a cursor,
holds the destination's lease, calls `deliver` for each event the channel `wants`, in the
log's order, and moves the cursor once the destination accepted the event or refused it
for good. Everything else (retries with backoff, outages, which process delivers) is the
deliverer's, so a channel is only the translation and one attempt at sending.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..store.models import AuditEventRow

__all__ = ("Channel", "DeliveryFailed", "DeliveryRefused")


class DeliveryFailed(Exception):
    """This attempt failed but a later one may succeed (network error, timeout, the receiver is down).

    The deliverer tries the same event again with backoff, for as long as it takes; the
    destination's later events wait behind it. Any other exception `deliver` raises is
    treated the same way (and logged with its traceback): an event is never skipped
    because of a bug. The message is recorded on the cursor (`last_error`), so it must
    hold no secret.
    """


class DeliveryRefused(Exception):
    """The destination refused this event for good (trying again would not help).

    The deliverer logs it, records it on the cursor and in the audit log
    (`{kind}.refused`), and moves on to the next event. The message must hold no secret.
    """


class Channel(Protocol):
    """One destination of one kind of outbound delivery."""

    @property
    def kind(self) -> str:
        """The kind of channel, e.g. "webhook": names it in logs and in the audit action `{kind}.refused`.

        At most 20 characters (the audit log's subject type).
        """
        ...

    @property
    def destination_id(self) -> str:
        """The cursor key in `webhook_cursors.endpoint`: stable across restarts, unique, at most 64 characters.

        It holds no secret (a URL's SHA-256, or e.g. "slack:C0123"); changing it starts a new cursor at the log's head.
        """
        ...

    @property
    def site(self) -> str:
        """A label for logs and people reading the cursor table (e.g. scheme and host); no secret, at most 300."""
        ...

    @property
    def actions(self) -> Collection[str] | None:
        """The audit actions this channel may want, read with the log in SQL; None reads every event."""
        ...

    def wants(self, event: AuditEventRow) -> bool:
        """Whether `event` is sent to this destination; the cursor passes over the others."""
        ...

    def event_name(self, event: AuditEventRow) -> str:
        """The name of the message `event` makes, for logs and refusal records (e.g. "call.pending")."""
        ...

    async def deliver(self, event: AuditEventRow) -> None:
        """Send `event` once; return when the destination accepted it.

        Raise `DeliveryFailed` to be tried again later, `DeliveryRefused` to be passed over.
        The deliverer cancels an attempt that takes longer than its `attempt_timeout`, and
        may send an event again after a crash or a lost answer (at least once): receivers
        drop repeats by the audit event's id.
        """
        ...
