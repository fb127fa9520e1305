"""Durable runs: the SQL store behind pauses, decisions, leases and the audit log.

`Store(Database(url))` holds the operations the system needs, each one transaction, by the
aggregate they change: `store.runs` (`start_run`, `claim`, `mark_executing`, `append_step`,
`pause`, `finish`, ...), `store.calls` (`decide`, `expire`, and the call lifecycle of agents
that run elsewhere: `request_call`, `wait_for_decision`, `settle_call`), `store.rules`,
`store.conversations`, `store.people` (accounts, tokens, sign-in), `store.outbound` (messages
about calls) and `store.audit`, plus the reads the web app and the resumer need; `facade.py`
says how.
"""

from __future__ import annotations

from ..calls.actors import SYSTEM, TOKEN_SCOPES, Actor
from ..calls.states import Role
from .audit_log import AuditLog
from .backends.database import Database, normalize_url
from .backends.notify import Notifier
from .calls import Calls
from .claims import ClaimedRun
from .conversations import Conversations
from .facade import Store
from .logins import LoginAttempt, LoginLimits
from .outbound import Outbound
from .paused_runs import PausedRun
from .people import People
from .policy_evaluation import PolicyEvaluation
from .policy_rules import DryRun, DryRunRow, Rules
from .queries import Page
from .run_plan import DecidedCall
from .runs import Runs
from .wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL

__all__ = (
    "PENDING_CHANNEL",
    "READY_CHANNEL",
    "RUNS_CHANNEL",
    "SYSTEM",
    "TOKEN_SCOPES",
    "Actor",
    "AuditLog",
    "Calls",
    "ClaimedRun",
    "Conversations",
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
    "People",
    "PolicyEvaluation",
    "Role",
    "Rules",
    "Runs",
    "Store",
    "normalize_url",
)
