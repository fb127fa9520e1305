"""What lists and pages show about calls and runs, worked out in Python so templates only display it.

Badges, verdicts in words, one-line summaries, and the standing rules a call names: the one
that decided it ("approved by rule small-refunds, version 3") or routed it to groups. What a
viewer may do with a call or a run is `approvals.calls.options`, the schema-driven edit form
`approvals_web.pages.forms` and the run's conversation `approvals_web.pages.timeline`. Nothing here
touches the database or the request.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from approvals.calls.states import CallStatus, RunStatus
from approvals.policy.evaluation import RULE_ACTOR_PREFIX
from approvals.service import AuditEvent, Call

_STATUS_TONE: dict[str, str] = {
    CallStatus.PENDING: "warn",
    CallStatus.OUTCOME_UNKNOWN: "bad",
    CallStatus.APPROVED: "ok",
    CallStatus.EXECUTING: "warn",
    CallStatus.SUCCEEDED: "ok",
    CallStatus.ANSWERED: "ok",
    CallStatus.DENIED: "bad",
    CallStatus.EXPIRED: "bad",
    CallStatus.FAILED: "bad",
    CallStatus.CANCELLED: "bad",
    RunStatus.COMPLETED: "ok",
    RunStatus.AWAITING_APPROVAL: "warn",
}
"""Badge colours; a status not named here (ready, resuming) gets none."""
CALL_STATUSES = tuple(CallStatus)
RUN_STATUSES = tuple(RunStatus)


_VERDICT_LABELS = {
    "approve": "approved",
    "edit": "edited and approved",
    "deny": "denied",
    "answer": "answered",
    "expire": "expired",
}


def tone(status: str | None) -> str:
    """The badge colour class for a status: ok, bad, warn or none."""
    return _STATUS_TONE.get(status or "", "")


def verdict_label(verdict: str | None) -> str:
    """A stored verdict as words: "edit" -> "edited and approved"."""
    return _VERDICT_LABELS.get(verdict or "", verdict or "")


def as_text(value: Any) -> str:
    """A value as a person reads it: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False)


# --- summaries -----------------------------------------------------------------------------


def summarize(args: Any, width: int = 110, *, schema: Mapping[str, Any] | None = None) -> str:
    """Arguments on one line: `key=value, ...` in the schema's order, shortened to `width` characters.

    (PostgreSQL's JSONB does not keep key order, so the order comes from the schema.)
    """
    if isinstance(args, dict):
        order = {name: i for i, name in enumerate((schema or {}).get("properties") or {})}
        keys = sorted(args, key=lambda k: (order.get(k, len(order)), k))
        parts = [f"{key}={_short(args[key])}" for key in keys]
        text = ", ".join(parts)
    else:
        text = _short(args)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if not value or " " in value or "," in value else value
    return json.dumps(value, ensure_ascii=False, default=str)


def expiring_soon(call: Call, seconds: int, now: dt.datetime | None = None) -> bool:
    if call.expires_at is None or not call.is_open:
        return False
    now = now or dt.datetime.now(dt.UTC)
    return (call.expires_at - now).total_seconds() <= seconds


# --- rules named on calls and audit events -------------------------------------------------


@dataclass(frozen=True)
class RuleMention:
    """A standing rule a call or an audit event names, and what it did there."""

    did: Literal["approved", "denied", "routed"]
    rule: str
    version: int | None = None
    remembered: bool = False
    """Made by a reviewer's approve-and-remember rather than written by an admin."""

    @property
    def words(self) -> str:
        """E.g. "approved by rule small-refunds, version 3" (pages link the rule's name)."""
        version = f", version {self.version}" if self.version is not None else ""
        return f"{self.did} by {'remembered ' if self.remembered else ''}rule {self.rule}{version}"


@dataclass(frozen=True)
class Routing:
    """Who may approve a call a rule asked about: "Routed to: finance (2 approvals)"."""

    groups: tuple[str, ...]
    approvals: int
    rule: RuleMention | None

    @property
    def words(self) -> str:
        who = ", ".join(self.groups) if self.groups else "any reviewer"
        return f"{who} ({self.approvals} approval{'s' if self.approvals != 1 else ''})"


def rule_actor(actor: str | None) -> str | None:
    """The rule's name when `actor` (a call's `decided_by`, a decision's or an event's actor) is a rule."""
    if actor and actor.startswith(RULE_ACTOR_PREFIX):
        return actor.removeprefix(RULE_ACTOR_PREFIX)
    return None


def decided_by_rule(call: Call, remembered: Collection[tuple[str, int]] = ()) -> RuleMention | None:
    """The rule that approved or denied `call`, if a rule (not a person) decided it."""
    name = rule_actor(call.decided_by)
    if name is None:
        return None
    version = call.rule_version if call.rule_name == name else None
    did: Literal["approved", "denied"] = "denied" if call.verdict == "deny" else "approved"
    return RuleMention(did, name, version, (name, version) in remembered if version is not None else False)


def routing(call: Call) -> Routing | None:
    """Whom a rule routed `call` to, when a rule asked people about it (and decided nothing itself)."""
    if rule_actor(call.decided_by) is not None or not (call.rule_name or call.approver_groups):
        return None
    rule = RuleMention("routed", call.rule_name, call.rule_version) if call.rule_name else None
    groups = tuple(call.approver_groups or ())
    return Routing(groups, call.approvals_required, rule)


def audit_rule(event: AuditEvent) -> RuleMention | None:
    """The rule an audit event says decided or routed its call: `call.approved` / `call.denied` by `rule:<name>`,
    or a `call.requested` whose policy asked people."""
    details = event.details if isinstance(event.details, dict) else {}
    if event.action in ("call.approved", "call.denied") and rule_actor(event.actor) is not None:
        did: Literal["approved", "denied"] = "approved" if event.action == "call.approved" else "denied"
        return RuleMention(
            did,
            str(details.get("rule") or rule_actor(event.actor)),
            _int_or_none(details.get("version")),
            details.get("remembered") is True,
        )
    policy = details.get("policy") if event.action == "call.requested" else None
    if isinstance(policy, dict) and policy.get("effect") == "ask" and policy.get("rule"):
        return RuleMention("routed", str(policy["rule"]), _int_or_none(policy.get("version")))
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
