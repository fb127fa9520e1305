"""Outbound: what the system sends people about calls, and what it remembers of having sent it.

`Outbound` is the aggregate: channel messages (`channel_messages`), e-mail links
(`email_links`) and follow-ups, reminders and escalations (`follow_ups`). `Store.outbound` is
one; `Store` still answers the same methods (it passes them on) while callers move to
`store.outbound.…`. The webhook cursors (`outbox`) are the deliverer's, reached through the store.
"""

from __future__ import annotations

from ..channel_messages import ChannelMessageOps
from ..email_links import EmailLinkOps
from ..follow_ups import FollowUpOps

__all__ = ("Outbound",)


class Outbound(ChannelMessageOps, EmailLinkOps, FollowUpOps):
    """Messages about calls: sent through channels, as e-mail links, and as follow-ups."""
