"""The standing rules in force, compiled once per process, and what they decide for a call.

The compiled `RuleSet` is kept and read again only when the rules' revision (the largest row
id) moved, so evaluating a call costs one small read and microseconds of CEL. A stored version
that no longer reads as a rule becomes an `ask` (`stored_rule`). The rules themselves are
written by `policy_rules.Rules`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio.to_thread
from pydantic import ValidationError
from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls.tools import DeferredToolRequests
from ..policy.evaluation import NO_RULE, AskedCall, Failure, Outcome, RuleSet, StoredRule
from ..policy.rules import Effect, Kind, RuleSpec, rule_problems
from ._base import StoreBase
from .backends.database import Database
from .backends.notify import Notifier
from .models import PolicyRuleRow, RunRow
from .run_plan import utcnow

__all__ = ("PolicyEvaluation", "latest_rows", "stored_rule")

log = logging.getLogger("approvals.policy")
_LATEST = select(func.max(PolicyRuleRow.id)).group_by(PolicyRuleRow.name)
_REVISION = select(func.max(PolicyRuleRow.id))
_RUN_FACTS = select(RunRow.engine, RunRow.agent_name, RunRow.session_id, RunRow.started_by).where(
    RunRow.id == bindparam("run_id")
)


def stored_rule(row: PolicyRuleRow) -> StoredRule:
    """A stored version; one that no longer reads as a rule (a CEL release that refuses its condition, a row
    edited by hand) becomes an `ask` for every call it may match, so it never lets a call through, and says why."""
    try:
        spec = RuleSpec.model_validate(row.definition)
    except ValidationError as exc:
        reason = f"stored version {row.version} no longer reads as a rule: {'; '.join(rule_problems(exc))}"
        log.error("rule %s: %s; it asks a person for every call it may match", row.name, reason)
        raw = row.definition if isinstance(row.definition, dict) else {}
        spec = RuleSpec.model_construct(
            name=row.name,
            effect=Effect.ASK,
            reason=reason,
            engine=_patterns_or_any(raw.get("engine")),
            agent=_patterns_or_any(raw.get("agent")),
            tool=_patterns_or_any(raw.get("tool")),
        )
        return replace(_stored_as(row, spec), last_error=reason)
    return _stored_as(row, spec)


def _patterns_or_any(value: Any) -> list[str]:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) and item for item in value):
        return value
    return ["*"]


def _stored_as(row: PolicyRuleRow, spec: RuleSpec) -> StoredRule:
    return StoredRule(
        spec=spec,
        version=row.version,
        kind=Kind(row.kind),
        author=row.author,
        created_at=row.created_at,
        author_groups=frozenset(row.author_groups or ()),
        deleted=row.deleted,
        last_error=row.last_error,
        last_error_at=row.last_error_at,
        id=row.id,
    )


class PolicyEvaluation:
    """The rules in force, per process, and what they decide for a requested call.

    One object per `Store`, given to each aggregate that decides calls by the rules (runs, calls,
    rules, conversations): the compiled rules are cached once, so a change one of them reads is
    the rule set all of them use.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._rule_set: RuleSet | None = None
        self._noted_failures: set[tuple[str, int]] = set()

    async def rules_in_force(self, session: AsyncSession | None = None) -> RuleSet:
        """The compiled rules, read and compiled again only when they changed since the last look.

        `session`: a read the caller has open already, so the look costs no connection of its own.
        """
        if session is None:
            async with self.db.read() as own:
                return await self.rules_in_force(own)
        revision = (await session.scalar(_REVISION)) or 0
        current = self._rule_set
        if current is not None and current.revision == revision:
            return current
        rows = (await session.scalars(latest_rows())).all()
        rule_set = RuleSet([stored_rule(row) for row in rows if not row.deleted], revision)
        self._rule_set = rule_set
        return rule_set

    async def rules_at(self, revision: int) -> RuleSet:
        """The compiled rules at `revision` (read already, with other things): those held when it is theirs."""
        current = self._rule_set
        if current is not None and current.revision == revision:
            return current
        return await self.rules_in_force()

    async def evaluate_policy(self, call: AskedCall, rule_set: RuleSet | None = None) -> Outcome:
        """What the rules in force (or `rule_set`, read already) decide for `call`; a condition's failure is
        noted on its rule, once."""
        rule_set = rule_set if rule_set is not None else await self.rules_in_force()
        if not len(rule_set):
            return NO_RULE
        outcome = await _decided(rule_set, call)
        if outcome.failures:
            await self._note_failures(outcome.failures)
        return outcome

    async def held_rules(self) -> RuleSet:
        """The rules this process holds, read only the first time: a pause checks their revision in its write."""
        return self._rule_set if self._rule_set is not None else await self.rules_in_force()

    async def pause_outcomes(
        self, run_id: str, requests: DeferredToolRequests, rule_set: RuleSet | None = None
    ) -> list[Outcome] | None:
        """What the rules (those in force, or `rule_set`) decide for the calls a run pauses on; None: no rules."""
        rule_set = rule_set if rule_set is not None else await self.rules_in_force()
        if not len(rule_set):
            return None
        async with self.db.read() as session:
            run = (await session.execute(_RUN_FACTS, {"run_id": run_id})).one_or_none()
        if run is None:
            return None  # the write that follows says what became of the run
        return await self._decide_each(
            rule_set,
            requests,
            engine=run.engine,
            agent=run.agent_name,
            session=run.session_id or run_id,
            requester=run.started_by,
        )

    async def new_run_outcomes(
        self, agent_name: str, requests: DeferredToolRequests, *, engine: str, session: str, requester: str | None
    ) -> list[Outcome] | None:
        """What the rules decide for the calls of a run stored already paused; None when there are no rules."""
        rule_set = await self.rules_in_force()
        if not len(rule_set):
            return None
        return await self._decide_each(
            rule_set, requests, engine=engine, agent=agent_name, session=session, requester=requester
        )

    async def _decide_each(
        self,
        rule_set: RuleSet,
        requests: DeferredToolRequests,
        *,
        engine: str,
        agent: str,
        session: str,
        requester: str | None,
    ) -> list[Outcome]:
        now = utcnow()
        outcomes = []
        for request in requests.approvals:
            outcome = await _decided(
                rule_set,
                AskedCall(
                    engine=engine,
                    agent=agent,
                    tool=request.tool_name,
                    session=session,
                    args=request.args,
                    requester=requester,
                    now=now,
                    approvals_required=request.approvals_required,
                ),
            )
            if outcome.failures:
                await self._note_failures(outcome.failures)
            outcomes.append(outcome)
        return outcomes

    async def _note_failures(self, failures: Sequence[Failure]) -> None:
        """Log a rule's failed condition and show it on the rule: once per rule version and process."""
        noted = self._noted_failures
        for failure in failures:
            if (failure.rule, failure.version) in noted:
                continue
            noted.add((failure.rule, failure.version))
            log.warning("rule %s (version %s) failed: %s", failure.rule, failure.version, failure.message)
            async with self.db.write() as session:
                await session.execute(
                    update(PolicyRuleRow)
                    .where(PolicyRuleRow.name == failure.rule, PolicyRuleRow.version == failure.version)
                    .values(last_error=failure.message, last_error_at=utcnow())
                )


async def _decided(rule_set: RuleSet, call: AskedCall) -> Outcome:
    """`rule_set.decide(call)`, in a thread when a condition may run in the worker process: the loop never waits."""
    if rule_set.needs_worker(call):
        return await anyio.to_thread.run_sync(rule_set.decide, call)
    return rule_set.decide(call)


def latest_rows() -> Select[PolicyRuleRow]:
    return select(PolicyRuleRow).where(PolicyRuleRow.id.in_(_LATEST))


class UnderRules(StoreBase):
    """An aggregate whose writes the rules decide first (`Runs`, `Calls`): given the store's one
    `PolicyEvaluation`, and the tool definition versions this process stored, which they share."""

    def __init__(
        self,
        db: Database,
        notifier: Notifier | None = None,
        *,
        policy: PolicyEvaluation,
        tool_versions: set[str] | None = None,
    ) -> None:
        super().__init__(db, notifier)
        self.policy = policy
        self._stored_tool_versions = tool_versions if tool_versions is not None else set()
        """Tool definition versions this process stored or saw stored: a version's definition never changes."""
