"""Durable runs: the SQL store behind pauses, decisions, leases and the audit log.

`Store(Database(url))` offers the few operations the system needs, each one transaction:
`start_run`, `claim`, `mark_executing`, `append_step`, `pause`, `finish`, `decide`,
`expire`, the call lifecycle of agents that run elsewhere (`request_call`,
`wait_for_decision`, `settle_call`), plus the reads the web app and the resumer need.
"""

from __future__ import annotations

from ..calls.actors import SYSTEM, TOKEN_SCOPES, Actor
from ..calls.states import Role
from .accounts import AccountOps
from .backends.database import Database, normalize_url
from .backends.notify import Notifier
from .calls import CallOps
from .channel_messages import ChannelMessageOps
from .claims import ClaimedRun
from .conversations import ConversationOps
from .email_links import EmailLinkOps
from .follow_ups import FollowUpOps
from .lifecycle import RunLifecycle
from .logins import LoginAttempt, LoginLimits, LoginOps
from .paused_runs import PausedRun, PausedRunOps
from .policy_rules import DryRun, DryRunRow, RuleOps
from .queries import Page
from .reviewer_identity import IdentityOps
from .run_plan import DecidedCall
from .wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL

__all__ = (
    "PENDING_CHANNEL",
    "READY_CHANNEL",
    "RUNS_CHANNEL",
    "SYSTEM",
    "TOKEN_SCOPES",
    "Actor",
    "ClaimedRun",
    "ConversationOps",
    "DryRun",
    "DryRunRow",
    "Database",
    "DecidedCall",
    "LoginAttempt",
    "LoginLimits",
    "Notifier",
    "Page",
    "PausedRun",
    "PausedRunOps",
    "Role",
    "RuleOps",
    "Store",
    "normalize_url",
)


class Store(
    RunLifecycle,
    CallOps,
    RuleOps,
    IdentityOps,
    AccountOps,
    ChannelMessageOps,
    EmailLinkOps,
    FollowUpOps,
    LoginOps,
    ConversationOps,
    PausedRunOps,
):
    """All store operations over one database."""
