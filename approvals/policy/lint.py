"""Rules that can never decide a call, flagged for the admin who wrote them.

A rule can never match when its condition is constant `false`, when it expired, or when
it asks groups nobody belongs to (its calls could only expire); an escalation to groups
nobody belongs to tells nobody. A rule is shadowed when
another rule takes every call it takes, with no condition of its own, and wins by
precedence (deny over ask over allow): the shadowed rule can never be the one that decides.

Two more are flagged because they are likely mistakes: an allow of every tool with no condition
(it approves every call), and a rule whose condition failed when evaluated (a missing field, a
type error, over its time budget: each such call asks a person). Nothing here evaluates a
condition but a cheap constant one, once per condition (`Condition.constant`).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Collection, Iterable

from .conditions import compile_condition
from .evaluation import StoredRule
from .rules import EFFECT_RANK, Effect, RuleSpec

__all__ = ("rule_flags",)


def rule_flags(
    rules: Iterable[StoredRule], *, now: dt.datetime, groups_with_members: Collection[str] | None = None
) -> dict[str, list[str]]:
    """Each rule's flags by name (only rules with some): why it can never match, or which rule shadows it."""
    live = [rule for rule in rules if not rule.deleted and rule.spec.enabled]
    flags: dict[str, list[str]] = {}
    for rule in live:
        found = _never_matches(rule.spec, now, groups_with_members)
        found += _risky(rule)
        found += [
            f"shadowed by {other.name} ({other.spec.effect}): it takes every call this rule takes"
            for other in live
            if other is not rule and _shadows(other.spec, rule.spec) and other.in_force(now)
        ]
        if found:
            flags[rule.name] = found
    return flags


def _never_matches(spec: RuleSpec, now: dt.datetime, groups_with_members: Collection[str] | None) -> list[str]:
    found = []
    if spec.when and compile_condition(spec.when).constant is False:
        found.append("never matches: its condition is always false")
    if spec.expires_at is not None and spec.expires_at <= now:
        found.append(f"never matches: it expired at {spec.expires_at.isoformat(timespec='seconds')}")
    nobody = groups_with_members is not None and not set(spec.groups) & set(groups_with_members)
    if spec.effect is Effect.ASK and spec.groups and nobody:
        found.append(f"nobody can approve: no user is in {', '.join(spec.groups)}")
    empty = sorted(set(spec.escalate_to or ()) - set(groups_with_members or ()))
    if spec.effect is Effect.ASK and groups_with_members is not None and empty:
        found.append(f"escalates to a group nobody is in: no user is in {', '.join(empty)}")
    return found


def _risky(rule: StoredRule) -> list[str]:
    spec = rule.spec
    found = []
    if spec.effect is Effect.ALLOW and "*" in spec.tool and not spec.when:
        narrowed = [
            f"{label} {', '.join(patterns)}"
            for label, patterns in (("engine", spec.engine), ("agent", spec.agent))
            if "*" not in patterns
        ]
        if spec.session:
            narrowed.append(f"session {spec.session}")
        found.append("allows every call of every tool" + (f" ({'; '.join(narrowed)})" if narrowed else ""))
    if rule.last_error:
        when = f" at {rule.last_error_at.isoformat(timespec='seconds')}" if rule.last_error_at else ""
        found.append(f"its condition failed{when}: {rule.last_error}" if rule.last_error_at else rule.last_error)
    return found


def _covers(wide: list[str], narrow: list[str]) -> bool:
    """Whether the patterns `wide` take every name the patterns `narrow` take (judged on the patterns' text)."""
    return all(any(w == "*" or w == n or fnmatch.fnmatchcase(n, w) for w in wide) for n in narrow)


def _shadows(winner: RuleSpec, loser: RuleSpec) -> bool:
    """Whether `winner` takes every call `loser` takes and decides them instead of it."""
    if winner.when and winner.when != loser.when:
        return False
    if winner.session is not None and winner.session != loser.session:
        return False
    if not (_covers(winner.engine, loser.engine) and _covers(winner.agent, loser.agent)):
        return False
    if not _covers(winner.tool, loser.tool):
        return False
    if EFFECT_RANK[winner.effect] != EFFECT_RANK[loser.effect]:
        return EFFECT_RANK[winner.effect] > EFFECT_RANK[loser.effect]
    if winner.effect is Effect.ASK:  # the strictest ask decides, then the first name
        return _strictness(winner) < _strictness(loser)
    return winner.name < loser.name  # the first name decides among equals


def _strictness(spec: RuleSpec) -> tuple[int, float, str]:
    """As `evaluation` orders asks: the most approvals, then the shortest time to decide, then the name."""
    return (-spec.approvals, spec.ttl or float("inf"), spec.name)
