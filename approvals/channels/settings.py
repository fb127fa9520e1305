"""What the reviewer channels need to know, as plain values: the web app's settings and the CLI build them.

The core never reads the environment; `approvals_web.settings.Settings.outbound()` turns
APPROVALS_* variables into these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ("FollowUpDefaults", "OutboundSettings", "SlackSettings", "SmtpSettings")

DEFAULT_SLACK_API_URL = "https://slack.com/api/"


@dataclass(frozen=True)
class SlackSettings:
    """A Slack app's credentials and where its messages go."""

    bot_token: str = field(repr=False)
    """The bot token (`xoxb-…`) with chat:write, users:read, users:read.email and im:write."""
    signing_secret: str = field(repr=False)
    """Verifies every interaction Slack sends (`X-Slack-Signature`)."""
    channel: str | None = None
    """Where calls routed to no group with a route of its own go: a conversation id (`C…`) or a member id (`U…`)."""
    routes: Mapping[str, str] = field(default_factory=dict)
    """Group name -> conversation or member id: calls routed to a group go to its destination."""
    api_url: str = DEFAULT_SLACK_API_URL
    """Slack's Web API (the tests point it at a fake Slack)."""


@dataclass(frozen=True)
class SmtpSettings:
    """The SMTP server reviewers' mail leaves through."""

    host: str
    sender: str
    """The From address."""
    port: int = 587
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    security: Literal["starttls", "tls", "none"] = "starttls"
    """`starttls` upgrades a plain connection (port 587), `tls` connects over TLS (port 465), `none` is plain."""
    timeout: float = 10.0
    link_ttl: float = 24 * 3600.0
    """Seconds a decision link works (never past the call's own expiry)."""


@dataclass(frozen=True)
class FollowUpDefaults:
    """Reminders and escalation for calls whose rule says nothing of them; None turns a step off."""

    remind_before: float | None = 15 * 60.0
    """Remind the call's reviewers this many seconds before it expires (calls without an expiry are not reminded)."""
    escalate_after: float | None = 3600.0
    """Escalate a call nobody decided this many seconds after it was asked."""
    escalate_to: tuple[str, ...] = ()
    """The groups escalated to (told, and allowed to approve a call routed to other groups); none: no escalation."""


@dataclass(frozen=True)
class OutboundSettings:
    """Every outbound channel of one process: webhooks, Slack, e-mail."""

    public_url: str | None = None
    """Where reviewers reach the inbox: links in Slack messages and mails point there."""
    webhook_urls: Sequence[str] = ()
    webhook_secret_for: Callable[[str], str | None] = lambda url: None
    slack: SlackSettings | None = None
    smtp: SmtpSettings | None = None
    follow_ups: FollowUpDefaults = field(default_factory=FollowUpDefaults)

    @property
    def any_channel(self) -> bool:
        return bool(self.webhook_urls) or self.slack is not None or self.smtp is not None
