"""Deciding one requested call by the rules: compiled once per rule set, evaluated once per call.

A `RuleSet` is the current version of every rule, compiled and indexed by tool name, so a
call is checked against the rules of its tool and the few whose tool is a pattern, not
against every rule. `RuleSet.decide` returns an `Outcome`: the effect, the rule and version
that decided it (or none: the call asks, as its tool says), and the conditions that failed.

Precedence (`rules`): deny over ask over allow; among asks the strictest. A condition that
cannot be evaluated for a call (a missing field, a type error) counts as `ask`, so a broken
rule never lets a call through; so does one that outlasts its time budget (`conditions`, `sandbox`):
a condition that is not provably cheap runs in a separate process, so `decide` may wait for it,
and a caller on an event loop asks `needs_worker` first and decides in a thread when it says so.
A remembered rule stands in for its author's one approval:
it allows only calls its author alone could approve (one approval needed, the author in the
groups that may approve, the author not the one asking), and never beats a deny.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .conditions import Condition, ConditionFailed, OverBudget, activation, compile_condition, prepared
from .rules import Effect, Kind, RuleSpec

__all__ = ("NO_RULE", "AskedCall", "Failure", "Outcome", "RuleSet", "StoredRule")

MATCHING_CACHE = 4096
"""The most engine, agent and tool names a rule set keeps its matching rules for."""
RULE_ACTOR_PREFIX = "rule:"
"""A call a rule decided names `rule:<name>` as who decided it, in the call and the audit log."""


@dataclass(frozen=True)
class StoredRule:
    """One version of a rule, as stored."""

    spec: RuleSpec
    version: int
    kind: Kind
    author: str
    created_at: dt.datetime
    author_groups: frozenset[str] = frozenset()
    """A remembered rule's author's groups when they made it: what its allow may stand in for."""
    deleted: bool = False
    last_error: str | None = None
    """The last time its condition could not be evaluated, why (shown on the rule)."""
    last_error_at: dt.datetime | None = None
    id: int = 0
    """The row's id: every change appends a row, so the largest id is the rules' revision."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def actor(self) -> str:
        """Who decided a call this rule decided, as the call and audit log name it."""
        return RULE_ACTOR_PREFIX + self.spec.name

    def in_force(self, now: dt.datetime) -> bool:
        """Enabled, not removed and not expired."""
        expires = self.spec.expires_at
        return self.spec.enabled and not self.deleted and (expires is None or expires > now)


@dataclass(frozen=True, kw_only=True)
class AskedCall:
    """What the rules read of one requested call."""

    engine: str
    agent: str
    tool: str
    session: str
    args: Mapping[str, Any]
    context: Mapping[str, Any] | None = None
    requester: str | None = None
    now: dt.datetime
    approvals_required: int = 1
    """The approvals the tool itself asks for: a remembered rule never stands in for a quorum."""


@dataclass(frozen=True)
class Failure:
    """A rule whose condition could not be evaluated for a call."""

    rule: str
    version: int
    message: str


@dataclass(frozen=True)
class Outcome:
    """What the rules decided for a call."""

    effect: Effect | None
    """None: no rule matched, the call asks as its tool says."""
    rule: str | None = None
    version: int | None = None
    reason: str = ""
    approvals: int = 1
    groups: tuple[str, ...] = ()
    ttl: float | None = None
    remembered: bool = False
    failures: tuple[Failure, ...] = ()
    matched: tuple[str, ...] = ()
    """Every rule that matched, the deciding one included."""

    @property
    def decided(self) -> bool:
        """Whether a rule settled the call (allow or deny) so nobody is asked."""
        return self.effect in (Effect.ALLOW, Effect.DENY)

    @property
    def actor(self) -> str | None:
        return None if self.rule is None else RULE_ACTOR_PREFIX + self.rule

    def details(self) -> dict[str, Any]:
        """The outcome as the audit log records it with the call."""
        if self.effect is None and not self.failures:
            return {}
        found: dict[str, Any] = {"effect": self.effect, "rule": self.rule, "version": self.version}
        if self.remembered:
            found["remembered"] = True
        if self.failures:
            found["failures"] = [{"rule": f.rule, "version": f.version, "error": f.message} for f in self.failures]
        return found


NO_RULE = Outcome(None)


@dataclass(frozen=True, eq=False)
class _Compiled:
    rule: StoredRule
    condition: Condition | None
    engine: re.Pattern[str]
    agent: re.Pattern[str]
    tool: re.Pattern[str]


def _pattern(globs: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs))


def _is_glob(pattern: str) -> bool:
    return any(char in pattern for char in "*?[")


@dataclass
class RuleSet:
    """The rules in force, compiled once; `decide` one call at a time."""

    rules: list[StoredRule] = field(default_factory=list)
    revision: int = 0
    give_up_over_budget: bool = False
    """A condition that outlasted its budget once fails at once after (a dry run over many calls)."""
    _over_budget: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _count: int = field(default=0, init=False, repr=False)
    _by_tool: dict[str, list[_Compiled]] = field(default_factory=dict, init=False, repr=False)
    _any_tool: list[_Compiled] = field(default_factory=list, init=False, repr=False)
    _matching: dict[tuple[str, str, str], tuple[_Compiled, ...]] = field(default_factory=dict, init=False, repr=False)
    """The rules whose patterns take an engine, agent and tool, worked out at their first call."""

    def __post_init__(self) -> None:
        self._count = sum(1 for rule in self.rules if not rule.deleted)
        for rule in self.rules:
            if rule.deleted:
                continue
            spec = rule.spec
            compiled = _Compiled(
                rule,
                compile_condition(spec.when) if spec.when else None,
                _pattern(spec.engine),
                _pattern(spec.agent),
                _pattern(spec.tool),
            )
            if any(_is_glob(tool) for tool in spec.tool):
                self._any_tool.append(compiled)
            for tool in dict.fromkeys(spec.tool):
                if not _is_glob(tool):
                    self._by_tool.setdefault(tool, []).append(compiled)

    def __len__(self) -> int:
        """How many rules are in the set; asked before every call is decided, so counted once."""
        return self._count

    def _candidates(self, engine: str, agent: str, tool: str) -> tuple[_Compiled, ...]:
        """The rules whose engine, agent and tool patterns take these names: the tool's own, and the globs that do.

        Worked out once per engine, agent and tool and kept (at most `MATCHING_CACHE` of them), so
        a call pays for neither the rules of other tools nor the glob rules that never take it.
        """
        key = (engine, agent, tool)
        found = self._matching.get(key)
        if found is None:
            exact = self._by_tool.get(tool, ())
            seen = {id(rule) for rule in exact}
            found = tuple(
                rule
                for rule in (*exact, *(rule for rule in self._any_tool if id(rule) not in seen))
                if rule.tool.match(tool) and rule.engine.match(engine) and rule.agent.match(agent)
            )
            if len(self._matching) >= MATCHING_CACHE:
                self._matching.clear()  # names come from callers: keep the memory bounded
            self._matching[key] = found
        return found

    def needs_worker(self, call: AskedCall) -> bool:
        """Whether deciding `call` may evaluate a condition in the worker process (and so wait for it)."""
        return any(
            found.condition is not None and not found.condition.inline
            for found in self._candidates(call.engine, call.agent, call.tool)
        )

    @property
    def any_worker(self) -> bool:
        """Whether some rule's condition is evaluated in the worker process."""
        found = (*(c for rules in self._by_tool.values() for c in rules), *self._any_tool)
        return any(c.condition is not None and not c.condition.inline for c in found)

    def decide(self, call: AskedCall) -> Outcome:
        """The outcome for `call` by the rules in force at `call.now`.

        It may wait up to the conditions' time budget (`needs_worker`): off the event loop, then.
        """
        denies: list[StoredRule] = []
        asks: list[_Ask] = []
        allows: list[StoredRule] = []
        remembered: list[StoredRule] = []
        failures: list[Failure] = []
        variables: Any = None  # prepared for CEL once, for the first condition
        plain: dict[str, Any] | None = None  # as they are, for the worker process
        for found in self._candidates(call.engine, call.agent, call.tool):
            rule = found.rule
            if not (rule.in_force(call.now) and (rule.spec.session is None or rule.spec.session == call.session)):
                continue
            if rule.kind is Kind.REMEMBERED and call.requester == rule.author:
                continue  # nobody approves their own calls, not even through a rule they made
            if found.condition is not None:
                if plain is None:
                    plain = _variables(call)
                if variables is None and found.condition.inline:
                    variables = prepared(plain)
                try:
                    holds = self._holds(found.condition, variables if found.condition.inline else plain)
                except ConditionFailed as exc:
                    failures.append(Failure(rule.name, rule.version, str(exc)))
                    reason = f"rule {rule.name} could not be evaluated: {exc}"
                    asks.append(_Ask(rule, 1, (), None, reason))  # a rule that cannot tell asks a person
                    continue
                if not holds:
                    continue
            spec = rule.spec
            if spec.effect is Effect.DENY:
                denies.append(rule)
            elif spec.effect is Effect.ASK:
                asks.append(_Ask(rule, spec.approvals, tuple(spec.groups), spec.ttl, spec.reason))
            elif rule.kind is Kind.REMEMBERED:
                remembered.append(rule)
            else:
                allows.append(rule)
        matched = tuple(sorted({r.name for r in (*denies, *allows, *remembered)} | {a.rule.name for a in asks}))
        found_failures = tuple(failures)
        if denies:
            rule = min(denies, key=lambda r: r.name)
            return Outcome(
                Effect.DENY, rule.name, rule.version, rule.spec.reason, failures=found_failures, matched=matched
            )
        strictest = min(asks, key=_strictness) if asks else None
        needed = max(call.approvals_required, strictest.approvals if strictest else 1)
        groups = set(strictest.groups) if strictest else set()
        for rule in sorted(remembered, key=lambda r: r.name):
            if needed == 1 and (not groups or groups & rule.author_groups):
                return Outcome(
                    Effect.ALLOW,
                    rule.name,
                    rule.version,
                    rule.spec.reason,
                    remembered=True,
                    failures=found_failures,
                    matched=matched,
                )
        if strictest is not None:
            rule = strictest.rule
            return Outcome(
                Effect.ASK,
                rule.name,
                rule.version,
                strictest.reason,
                strictest.approvals,
                strictest.groups,
                strictest.ttl,
                failures=found_failures,
                matched=matched,
            )
        if allows:
            rule = min(allows, key=lambda r: r.name)
            return Outcome(
                Effect.ALLOW, rule.name, rule.version, rule.spec.reason, failures=found_failures, matched=matched
            )
        return NO_RULE

    def _holds(self, condition: Condition, variables: Any) -> bool:
        if self.give_up_over_budget and condition.text in self._over_budget:
            raise ConditionFailed(self._over_budget[condition.text])
        try:
            return condition.holds(variables)
        except OverBudget as exc:
            if self.give_up_over_budget:
                self._over_budget[condition.text] = str(exc)
            raise


@dataclass(frozen=True)
class _Ask:
    """A matching ask rule (or a rule that could not be evaluated, which asks one person)."""

    rule: StoredRule
    approvals: int
    groups: tuple[str, ...]
    ttl: float | None
    reason: str


def _strictness(ask: _Ask) -> tuple[int, float, str]:
    """Among several asks: the most approvals, then the shortest time to decide, then the name."""
    return (-ask.approvals, ask.ttl or float("inf"), ask.rule.name)


def _variables(call: AskedCall) -> dict[str, Any]:
    return activation(
        args=call.args,
        tool=call.tool,
        agent=call.agent,
        engine=call.engine,
        session=call.session,
        context=call.context,
        requester=call.requester,
        now=call.now,
    )
