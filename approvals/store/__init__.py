"""Durable runs: the SQL store behind pauses, decisions, leases and the audit log.

`Store(Database(url))` offers the few operations the system needs, each one transaction:
`start_run`, `claim`, `mark_executing`, `append_step`, `pause`, `finish`, `decide`,
`expire`, the call lifecycle of agents that run elsewhere (`request_call`,
`wait_for_decision`, `settle_call`), plus the reads the web app and the resumer need.
Its parts by aggregate: `store.people` (accounts, tokens, sign-in) and `store.outbound`
(messages about calls); `facade.py` says how.
"""

from __future__ import annotations

from ..calls.actors import SYSTEM, TOKEN_SCOPES, Actor
from ..calls.states import Role
from .backends.database import Database, normalize_url
from .backends.notify import Notifier
from .claims import ClaimedRun
from .conversations import ConversationOps
from .facade import Store
from .logins import LoginAttempt, LoginLimits
from .outbound import Outbound
from .paused_runs import PausedRun, PausedRunOps
from .people import People
from .policy_rules import DryRun, DryRunRow, RuleOps
from .queries import Page
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
    "Outbound",
    "Page",
    "PausedRun",
    "PausedRunOps",
    "People",
    "Role",
    "RuleOps",
    "Store",
    "normalize_url",
)
