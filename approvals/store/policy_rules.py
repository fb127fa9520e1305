"""Standing rules in the database: their versions, who changed them, and the rule set in force.

Every change appends a version (`PolicyRuleRow`) and an audit event (`rule.created`,
`rule.changed`, `rule.enabled`, `rule.disabled`, `rule.deleted`, `rule.remembered`); nothing
is updated in place but the note of a condition's last failure. The compiled rule set in
force is `policy_evaluation.PolicyEvaluation`'s, shared by every aggregate that decides calls.

Admins manage standing rules. A reviewer makes remembered rules by approving a call
(`approve_and_remember`) and may remove their own; an admin may edit those too (to widen one).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls.actors import Actor
from ..calls.verdicts import Approve
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from ..policy.evaluation import AskedCall, Outcome, RuleSet, StoredRule
from ..policy.files import RulesDiff, plan_apply
from ..policy.remember import Remember, remembered_rule
from ..policy.rules import Effect, InvalidRule, Kind, RuleSpec
from ._base import StoreBase
from .backend import Transaction
from .backends.database import Database
from .backends.notify import Notifier
from .calls import Calls
from .models import PolicyRuleRow, RunRow, ToolCallRow
from .policy_evaluation import PolicyEvaluation, latest_rows, stored_rule
from .run_plan import utcnow
from .runs import Runs

__all__ = ("MAX_DRY_RUN", "DryRun", "DryRunRow", "Rules")

MAX_DRY_RUN = 1000


@dataclass(frozen=True)
class DryRunRow:
    """One past call, and what the proposed rule (and the rules with it) would have decided."""

    call_id: str
    run_id: str
    created_at: dt.datetime
    agent: str
    tool: str
    args: Any
    status: str
    """What actually happened to the call."""
    decided_by: str | None
    rule: Outcome
    """The proposed rule alone: its effect if it matched (None: no match); failures if it could not tell."""
    policy: Outcome
    """All rules in force, with the proposed one in place of its previous version."""


@dataclass(frozen=True)
class DryRun:
    rows: list[DryRunRow]

    @property
    def matched(self) -> int:
        return sum(1 for row in self.rows if row.rule.effect is not None)

    @property
    def failed(self) -> int:
        return sum(1 for row in self.rows if row.rule.failures)


class Rules(StoreBase):
    """Writing and reading standing rules, remembering approvals, trying a rule on past calls.

    Given the store's one `PolicyEvaluation` (a dry run tries a rule beside those in force), and
    the runs and calls aggregates whose call an approve-and-remember approves.
    """

    def __init__(
        self, db: Database, notifier: Notifier | None = None, *, policy: PolicyEvaluation, runs: Runs, calls: Calls
    ) -> None:
        super().__init__(db, notifier)
        self.policy = policy
        self._runs = runs
        self._calls = calls

    # -- reading --------------------------------------------------------------------------------

    async def list_rules(self, *, kind: Kind | None = None) -> list[StoredRule]:
        """The current version of every rule not removed, by name."""
        query = latest_rows().where(PolicyRuleRow.deleted.is_(False)).order_by(PolicyRuleRow.name)
        if kind is not None:
            query = query.where(PolicyRuleRow.kind == kind)
        async with self.db.read() as session:
            return [stored_rule(row) for row in (await session.scalars(query)).all()]

    async def get_rule(self, name: str) -> StoredRule:
        """A rule's current version (a removed rule's too: its last version says it was removed)."""
        async with self.db.read() as session:
            row = await session.scalar(latest_rows().where(PolicyRuleRow.name == name))
        if row is None:
            raise NotFound(f"No rule {name!r}")
        return stored_rule(row)

    async def rule_versions(self, name: str) -> list[StoredRule]:
        """Every version of a rule, newest first."""
        query = select(PolicyRuleRow).where(PolicyRuleRow.name == name).order_by(PolicyRuleRow.version.desc())
        async with self.db.read() as session:
            rows = (await session.scalars(query)).all()
        if not rows:
            raise NotFound(f"No rule {name!r}")
        return [stored_rule(row) for row in rows]

    async def remembered_rule_versions(self, names: Collection[str]) -> frozenset[tuple[str, int]]:
        """Which versions of these rules a reviewer's approve-and-remember made: pages say "remembered" of them."""
        if not names:
            return frozenset()
        query = select(PolicyRuleRow.name, PolicyRuleRow.version).where(
            PolicyRuleRow.name.in_(sorted(set(names))), PolicyRuleRow.kind == Kind.REMEMBERED
        )
        async with self.db.read() as session:
            return frozenset((name, version) for name, version in await session.execute(query))

    # -- writing --------------------------------------------------------------------------------

    async def save_rule(self, spec: RuleSpec, *, actor: Actor, expected_version: int | None = None) -> StoredRule:
        """Create a rule, or change it (a new version); an unchanged definition writes nothing.

        `expected_version`: the version the author edited; a `Conflict` if someone saved another since.
        """
        _require_admin(actor, "write rules")
        async with self.transaction() as tx:
            return await _save(tx, spec, actor, expected_version=expected_version)

    async def set_rule_enabled(self, name: str, enabled: bool, *, actor: Actor) -> StoredRule:
        """Enable or disable a rule (a new version)."""
        _require_admin(actor, "enable or disable rules")
        async with self.transaction() as tx:
            current = await _current(tx.session, name)
            if current.spec.enabled == enabled:
                return current
            spec = current.spec.model_copy(update={"enabled": enabled})
            action = "rule.enabled" if enabled else "rule.disabled"
            return await _save(tx, spec, actor, kind=current.kind, action=action)

    async def delete_rule(self, name: str, *, actor: Actor) -> StoredRule:
        """Remove a rule (its last version says so; its history stays). Admins, or a remembered rule's author."""
        async with self.transaction() as tx:
            current = await _current(tx.session, name)
            mine = current.kind is Kind.REMEMBERED and current.author == actor.id and actor.can("reviewer")
            if not mine:
                _require_admin(actor, "remove rules")
            return await _save(tx, current.spec, actor, kind=current.kind, action="rule.deleted", deleted=True)

    async def apply_rules(
        self, specs: Sequence[RuleSpec], *, actor: Actor, prune: bool = False, dry_run: bool = False
    ) -> RulesDiff:
        """Make the standing rules those of a file, in one transaction: each rule that differs gets a version.

        Idempotent: applying the same rules again changes nothing. Remembered rules are left
        alone. `prune` removes standing rules the file does not hold; `dry_run` only says what would change.
        """
        _require_admin(actor, "apply rules")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise InvalidRule(["a name is used by two rules"], "rules")
        async with self.transaction() as tx:
            current = {rule.name: rule for rule in await _current_rules(tx.session)}
            clash = [name for name in names if name in current and current[name].kind is Kind.REMEMBERED]
            if clash:
                raise Conflict(f"Rule {clash[0]!r} is a remembered rule; give the file's rule another name")
            standing = {name: rule.spec for name, rule in current.items() if rule.kind is Kind.STANDING}
            diff = plan_apply(standing, specs, prune=prune)
            if dry_run:
                return diff
            for spec in diff.created:
                await _save(tx, spec, actor)
            for spec, _ in diff.changed:
                await _save(tx, spec, actor)
            for name in diff.removed:
                await _save(tx, current[name].spec, actor, action="rule.deleted", deleted=True)
            if not diff.empty:
                tx.audit(actor.id, "rules.applied", "rules", "file", details=diff.summary())
        return diff

    async def approve_and_remember(
        self, call_id: str, remember: Remember, *, actor: Actor, args_digest: str | None = None
    ) -> tuple[ToolCallRow, StoredRule]:
        """Approve a call and allow calls like it for a while (`policy.remember`): the approval, then the rule.

        The rule is checked before the approval is given, and refused unless the reviewer may
        approve this very call: they can never remember more than they may approve.
        """
        problems = remember.problems()
        if problems:
            raise UserError("Cannot remember: " + "; ".join(problems))
        call = await self._calls.get_call(call_id)
        run = await self._runs.get_run(call.run_id)
        options = (await self._calls.review_facts([call_id]))[call_id].options(actor, call)
        if not options.may_approve:
            raise Forbidden(options.why_not_approve or "You may not approve this call")
        if call.approvals_required > 1:
            raise UserError("This call needs several approvals: one reviewer's approval cannot be remembered for it")
        now = utcnow()
        try:
            spec = remembered_rule(
                engine=run.engine,
                agent=call.agent_name,
                tool=call.tool_name,
                session=run.session_id or run.id,
                args=call.current_args,
                author=actor.id,
                call_id=call.id,
                remember=remember,
                now=now,
            )
        except ValueError as exc:  # pydantic's error for a bad condition
            raise UserError(f"Cannot remember: {exc}") from None
        decided = await self._calls.decide(call_id, Approve(args_digest=args_digest), actor=actor)
        async with self.transaction() as tx:
            rule = await _save(tx, spec, actor, kind=Kind.REMEMBERED, action="rule.remembered", call_id=call_id)
        return decided, rule

    # -- dry run --------------------------------------------------------------------------------

    async def dry_run_rule(self, spec: RuleSpec, *, limit: int = 100, kind: Kind = Kind.STANDING) -> DryRun:
        """What `spec` would have decided over the last `limit` calls, alone and with the rules in force."""
        if not 1 <= limit <= MAX_DRY_RUN:
            raise UserError(f"A dry run looks at 1 to {MAX_DRY_RUN} calls")
        proposed = StoredRule(spec=spec, version=0, kind=kind, author="", created_at=utcnow())
        alone = RuleSet([proposed], give_up_over_budget=True)  # a condition over its budget once is not tried again
        in_force = await self.policy.rules_in_force()
        others = (rule for rule in in_force.rules if rule.name != spec.name)
        together = RuleSet([*others, proposed], give_up_over_budget=True)
        query = (
            select(ToolCallRow, RunRow.engine, RunRow.session_id, RunRow.started_by)
            .join(RunRow, RunRow.id == ToolCallRow.run_id)
            .order_by(ToolCallRow.created_at.desc(), ToolCallRow.id.desc())
            .limit(limit)
        )
        async with self.db.read() as session:
            found = (await session.execute(query)).all()

        def decide_each() -> list[DryRunRow]:
            return [_dry_run_row(alone, together, *row) for row in found]

        if alone.any_worker or together.any_worker:  # conditions that may wait for the worker process
            return DryRun(await anyio.to_thread.run_sync(decide_each))
        return DryRun(decide_each())


def _dry_run_row(
    alone: RuleSet, together: RuleSet, call: ToolCallRow, engine: str, session_id: str | None, started_by: str | None
) -> DryRunRow:
    asked = AskedCall(
        engine=engine,
        agent=call.agent_name,
        tool=call.tool_name,
        session=session_id or call.run_id,
        args=call.args if isinstance(call.args, dict) else {},
        context=call.context if isinstance(call.context, dict) else None,
        requester=call.requested_by or started_by,
        now=call.created_at,
        approvals_required=call.approvals_required,
    )
    return DryRunRow(
        call.id,
        call.run_id,
        call.created_at,
        call.agent_name,
        call.tool_name,
        call.args,
        call.status,
        call.decided_by,
        alone.decide(asked),
        together.decide(asked),
    )


def _require_admin(actor: Actor, what: str) -> None:
    if not actor.can("admin"):
        raise Forbidden(f"{actor.id!r} ({actor.role}) may not {what}: that takes the admin role")


async def _current(session: AsyncSession, name: str) -> StoredRule:
    row = await session.scalar(latest_rows().where(PolicyRuleRow.name == name))
    if row is None or row.deleted:
        raise NotFound(f"No rule {name!r}")
    return stored_rule(row)


async def _current_rules(session: AsyncSession) -> list[StoredRule]:
    rows = (await session.scalars(latest_rows().where(PolicyRuleRow.deleted.is_(False)))).all()
    return [stored_rule(row) for row in rows]


async def _save(
    tx: Transaction[AsyncSession],
    spec: RuleSpec,
    actor: Actor,
    *,
    kind: Kind | None = None,
    action: str | None = None,
    deleted: bool = False,
    expected_version: int | None = None,
    call_id: str | None = None,
) -> StoredRule:
    """Append a version of `spec` (unless it is the current one unchanged) and audit it."""
    session = tx.session
    latest = await session.scalar(latest_rows().where(PolicyRuleRow.name == spec.name).with_for_update())
    if expected_version is not None and (latest.version if latest else 0) != expected_version:
        now_at = latest.version if latest else 0
        raise Conflict(f"Rule {spec.name!r} is at version {now_at}, not {expected_version}: someone saved it since")
    if latest is not None and not latest.deleted:
        previous = stored_rule(latest)
        if kind is None:
            kind = previous.kind
        if previous.spec == spec and not deleted:
            return previous
    kind = kind or Kind.STANDING
    if kind is Kind.REMEMBERED and spec.effect is not Effect.ALLOW:
        raise UserError("A remembered rule allows calls; write a standing rule to ask or deny")
    now = utcnow()
    row = PolicyRuleRow(
        name=spec.name,
        version=(latest.version if latest else 0) + 1,
        kind=kind,
        definition=spec.definition(),
        deleted=deleted,
        author=actor.id,
        author_groups=sorted(actor.groups) if kind is Kind.REMEMBERED else None,
        created_at=now,
    )
    session.add(row)
    try:
        await session.flush()
    except IntegrityError:
        raise Conflict(f"Rule {spec.name!r} was saved by someone else at the same moment; try again") from None
    if action is None:
        action = "rule.created" if latest is None or latest.deleted else "rule.changed"
    details: dict[str, Any] = {"version": row.version, "kind": kind, "definition": row.definition}
    if call_id is not None:
        details["call_id"] = call_id
    tx.audit(actor.id, action, "rule", spec.name, details=details, at=now)
    return stored_rule(row)
