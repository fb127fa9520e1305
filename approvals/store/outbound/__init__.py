"""Outbound: what the system sends people about calls, and what it remembers of having sent it.

`Outbound` is the aggregate: channel messages (`channel_messages`), e-mail links
(`email_links`) and follow-ups, reminders and escalations (`follow_ups`). `Store.outbound` is
one. The webhook cursors (`outbox.WebhookCursors`) are the deliverer's, over `store.outbound`.
"""

from __future__ import annotations

from ..channel_messages import ChannelMessageOps
from ..email_links import EmailLinkOps
from ..follow_ups import FollowUpOps

__all__ = ("Outbound",)


class Outbound(ChannelMessageOps, EmailLinkOps, FollowUpOps):
    """Messages about calls: sent through channels, as e-mail links, and as follow-ups."""
