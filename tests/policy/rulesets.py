"""Rules and calls for the policy tests, built in one line each: no database, no YAML."""

from __future__ import annotations

import datetime as dt
from typing import Any

from approvals.policy import AskedCall, Kind, RuleSet, StoredRule, parse_rule

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def stored(
    version: int = 1,
    *,
    kind: Kind = Kind.STANDING,
    author: str = "ada",
    author_groups: frozenset[str] = frozenset(),
    deleted: bool = False,
    **definition: Any,
) -> StoredRule:
    """A stored rule from its definition's fields (as a rules file writes them)."""
    return StoredRule(
        spec=parse_rule(definition),
        version=version,
        kind=kind,
        author=author,
        created_at=NOW - dt.timedelta(days=1),
        author_groups=author_groups,
        deleted=deleted,
    )


def asked(tool: str = "refund", args: dict[str, Any] | None = None, **facts: Any) -> AskedCall:
    """A call of `tool` by the gate's support app in session s1, asked at `NOW` (any field overridden)."""
    defaults: dict[str, Any] = {"engine": "gate", "agent": "support-app", "session": "s1", "now": NOW}
    return AskedCall(tool=tool, args=args if args is not None else {}, **(defaults | facts))


def decide(rules: list[StoredRule], call: AskedCall) -> Any:
    return RuleSet(rules).decide(call)
