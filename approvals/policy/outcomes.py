"""What a rule's outcome writes on a new call: its status, who decided, its quorum, time and groups.

The one copy for every engine: a resumable engine's pause (`store.paused_runs.paused_write`)
and a gate's request (`store.calls`) both store a call with these columns.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..calls.states import CallStatus
from .evaluation import Outcome
from .rules import Effect

__all__ = ("RULE_DECISION_COLUMNS", "call_columns", "decided_details", "rule_decision")

RULE_DECISION_COLUMNS = ("call_id", "actor", "verdict", "reason", "args_digest", "created_at", "consumed_at")


def call_columns(
    outcome: Outcome, *, approvals_required: int, expires_at: dt.datetime | None, now: dt.datetime
) -> dict[str, Any]:
    """The columns of a new call that `outcome` sets; the call waits for people (`pending`) unless a rule decided.

    An `ask` never weakens what the tool asks for: the larger number of approvals and the
    earlier expiry win.
    """
    columns: dict[str, Any] = {
        "status": CallStatus.PENDING,
        "rule_name": outcome.rule,
        "rule_version": outcome.version,
        "approver_groups": None,
        "approvals_required": approvals_required,
        "expires_at": expires_at,
        "verdict": None,
        "decided_by": None,
        "decided_at": None,
        "denial_reason": None,
    }
    if outcome.effect is Effect.ASK:
        columns["approvals_required"] = max(approvals_required, outcome.approvals)
        columns["approver_groups"] = list(outcome.groups) or None
        if outcome.ttl is not None:
            by_rule = now + dt.timedelta(seconds=outcome.ttl)
            columns["expires_at"] = by_rule if expires_at is None else min(expires_at, by_rule)
    elif outcome.effect is Effect.ALLOW:
        columns |= {"status": CallStatus.APPROVED, "verdict": "approve", "decided_by": outcome.actor, "decided_at": now}
        columns["approvals_required"] = 1
    elif outcome.effect is Effect.DENY:
        columns |= {
            "status": CallStatus.DENIED,
            "verdict": "deny",
            "decided_by": outcome.actor,
            "decided_at": now,
            "denial_reason": f"{outcome.reason} (rule {outcome.rule})",
        }
    return columns


def rule_decision(
    outcome: Outcome, call_id: str, args_digest: str, now: dt.datetime, *, used: bool = False
) -> dict[str, Any] | None:
    """The `decisions` row of a call a rule allowed (its one approval), else None; `used`: the call was handed
    out at once, so the approval is used up as it is given."""
    if outcome.effect is not Effect.ALLOW:
        return None
    return {
        "call_id": call_id,
        "actor": outcome.actor,
        "verdict": "approve",
        "reason": f"rule {outcome.rule}, version {outcome.version}",
        "args_digest": args_digest,
        "created_at": now,
        "consumed_at": now if used else None,
    }


def decided_details(outcome: Outcome, args_digest: str) -> tuple[str, dict[str, Any]] | None:
    """The audit action and details of a call a rule decided (`call.approved` / `call.denied`), else None."""
    base = {"rule": outcome.rule, "version": outcome.version}
    if outcome.remembered:
        base["remembered"] = True
    if outcome.effect is Effect.ALLOW:
        return "call.approved", {**base, "args_digest": args_digest, "approvals": 1, "required": 1}
    if outcome.effect is Effect.DENY:
        return "call.denied", {**base, "reason": outcome.reason}
    return None
