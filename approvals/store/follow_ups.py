"""Reminders and escalations of calls nobody decided: each made once, in any process, through restarts.

A follow-up is one transaction: the call's run and the call are locked (the order decisions
take them in, so a decision racing it either comes first, and the call is no longer pending,
or waits and sees what the follow-up wrote), its `call_follow_ups` row is inserted unless it
exists, and only then are the audit event (`call.reminded` / `call.escalated`, which the Slack
and e-mail channels follow) and the wake-up written. An escalation of a call routed to groups
adds the escalation groups to them, so their members may approve; a call any reviewer may
approve stays so. When it happens is `approvals.policy.follow_ups`; finding due calls is the
worker's (`approvals.worker.follow_ups`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Table, bindparam, exists, func, select, update

from ..calls.actors import SYSTEM_ACTOR_ID
from ..calls.states import CallStatus
from ..policy.follow_ups import Step
from ..policy.rules import Effect, Kind, RuleSpec
from ._base import StoreBase
from .audit import call_event
from .backend import Backend
from .decision_sql import LOCK_RUN
from .models import AuditEventRow, CallFollowUpRow, PolicyRuleRow, ToolCallRow
from .run_plan import utcnow
from .run_sql import Tx
from .wakeups import PENDING_CHANNEL

__all__ = ("FOLLOW_UP_ACTIONS", "FollowUpOps", "OpenCall")

log = logging.getLogger("approvals.follow_ups")

FOLLOW_UP_ACTIONS = {Step.REMIND: "call.reminded", Step.ESCALATE: "call.escalated"}
"""The audit action of each step."""
CALLS = cast(Table, ToolCallRow.__table__)
_COLUMNS = (
    CALLS.c.id,
    CALLS.c.run_id,
    CALLS.c.agent_name,
    CALLS.c.tool_name,
    CALLS.c.status,
    CALLS.c.created_at,
    CALLS.c.expires_at,
    CALLS.c.rule_name,
    CALLS.c.rule_version,
    CALLS.c.approver_groups,
)
_LOCK_CALL = select(*_COLUMNS).where(CALLS.c.id == bindparam("call_id")).with_for_update()
_REVISION = select(func.count(PolicyRuleRow.id), func.max(PolicyRuleRow.id)).where(PolicyRuleRow.kind == Kind.STANDING)
_DEFINITIONS = select(PolicyRuleRow.name, PolicyRuleRow.version, PolicyRuleRow.definition).where(
    PolicyRuleRow.kind == Kind.STANDING
)


@dataclass(frozen=True)
class OpenCall:
    """A pending call as a follow-up reads it: when it was asked, when it expires, its rule and groups."""

    id: str
    run_id: str
    agent_name: str
    tool_name: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    rule_name: str | None
    rule_version: int | None
    approver_groups: tuple[str, ...] | None

    @classmethod
    def of(cls, row: Any) -> OpenCall:
        groups = row.approver_groups
        return cls(
            id=row.id,
            run_id=row.run_id,
            agent_name=row.agent_name,
            tool_name=row.tool_name,
            created_at=row.created_at,
            expires_at=row.expires_at,
            rule_name=row.rule_name,
            rule_version=row.rule_version,
            approver_groups=tuple(groups) if groups else None,
        )

    @property
    def rule(self) -> tuple[str, int] | None:
        if self.rule_name is None or self.rule_version is None:
            return None
        return self.rule_name, self.rule_version


class FollowUpOps(StoreBase):
    """The `call_follow_ups` table, and what the follow-ups read."""

    _follow_up_rules: Mapping[tuple[str, int], RuleSpec | None] = {}
    """Every version of every standing ask rule, parsed once (a version never changes); None: no longer reads."""
    _follow_up_revision: tuple[int, int | None] | None = None

    async def follow_up_rules(self) -> Mapping[tuple[str, int], RuleSpec | None]:
        """The ask rules' versions by (name, version), read again only when a version was added."""
        async with self.db.read() as session:
            revision = tuple((await session.execute(_REVISION)).one())
            if revision == self._follow_up_revision:
                return self._follow_up_rules
            rows = (await session.execute(_DEFINITIONS)).all()
        known = self._follow_up_rules
        rules = dict(known)
        for name, version, definition in rows:
            if (name, version) not in known:
                spec = _read(name, version, definition)
                if spec is None or spec.effect is Effect.ASK:
                    rules[(name, version)] = spec
        self._follow_up_rules, self._follow_up_revision = rules, (revision[0], revision[1])
        return rules

    async def due_reminders(
        self, *, now: dt.datetime, horizon: float, rules: Collection[str] | None = None
    ) -> list[OpenCall]:
        """Pending calls not yet reminded that expire after `now` and within `horizon` seconds of it
        (`rules`: only calls of these rules; None: any call)."""
        query = _open_without(Step.REMIND, rules).where(
            CALLS.c.expires_at > now, CALLS.c.expires_at <= now + dt.timedelta(seconds=horizon)
        )
        async with self.db.read() as session:
            return [OpenCall.of(row) for row in (await session.execute(query)).all()]

    async def due_escalations(
        self, *, now: dt.datetime, after: float, rules: Collection[str] | None = None
    ) -> list[OpenCall]:
        """Pending calls not yet escalated, asked at least `after` seconds before `now`, and not past their expiry
        (`rules`: only calls of these rules; None: any call)."""
        query = _open_without(Step.ESCALATE, rules).where(
            CALLS.c.created_at <= now - dt.timedelta(seconds=after),
            CALLS.c.expires_at.is_(None) | (CALLS.c.expires_at > now),
        )
        async with self.db.read() as session:
            return [OpenCall.of(row) for row in (await session.execute(query)).all()]

    async def follow_up(self, call_id: str, step: Step, *, due_at: dt.datetime, groups: Sequence[str] = ()) -> bool:
        """Remind or escalate (to `groups`) a call, unless that was done or the call no longer waits; True if done."""
        return await self.run_statements(lambda tx: _follow_up(tx, call_id, step, due_at, tuple(groups), utcnow()))

    async def follow_up_events(self, run_id: str) -> list[AuditEventRow]:
        """The audit events of the reminders, escalations and hook fallbacks of a run's calls, oldest first (what the
        timeline says happened while they waited)."""
        query = select(AuditEventRow).where(
            AuditEventRow.run_id == run_id, AuditEventRow.action.in_([*FOLLOW_UP_ACTIONS.values(), "call.fallback"])
        )
        async with self.db.read() as session:
            return list((await session.scalars(query.order_by(AuditEventRow.id))).all())

    async def follow_ups_of(self, call_ids: Collection[str]) -> list[CallFollowUpRow]:
        """The reminders and escalations made for these calls, oldest first."""
        if not call_ids:
            return []
        query = select(CallFollowUpRow).where(CallFollowUpRow.call_id.in_(list(call_ids)))
        async with self.db.read() as session:
            rows = (await session.scalars(query.order_by(CallFollowUpRow.done_at))).all()
        return list(rows)


def _read(name: str, version: int, definition: Any) -> RuleSpec | None:
    try:
        return RuleSpec.model_validate(definition)
    except ValidationError:
        log.warning("rule %s version %d no longer reads: its calls get the default follow-ups", name, version)
        return None


def _open_without(step: Step, rules: Collection[str] | None) -> Any:
    """Pending calls (of `rules`, unless None) without a follow-up of `step`."""
    done = exists().where(CallFollowUpRow.call_id == CALLS.c.id, CallFollowUpRow.step == step.value)
    query = select(*_COLUMNS).where(CALLS.c.status == CallStatus.PENDING, ~done)
    return query if rules is None else query.where(CALLS.c.rule_name.in_(sorted(rules)))


@cache
def _insert_once(backend: Backend) -> Any:
    return backend.insert(CallFollowUpRow).on_conflict_do_nothing().returning(CallFollowUpRow.call_id)


def _follow_up(
    tx: Tx, call_id: str, step: Step, due_at: dt.datetime, groups: tuple[str, ...], now: dt.datetime
) -> bool:
    tx.session.execute(LOCK_RUN, {"call_id": call_id})  # the run first, then the call: as a decision locks them
    row = tx.session.execute(_LOCK_CALL, {"call_id": call_id}).one_or_none()
    if row is None or row.status != CallStatus.PENDING:
        return False
    done = {"call_id": call_id, "step": step.value, "done_at": now}
    if tx.session.execute(_insert_once(tx.backend), done).one_or_none() is None:
        return False  # another process made it first
    call = OpenCall.of(row)
    details: dict[str, Any] = {"due_at": due_at.isoformat(), "rule": call.rule_name, "version": call.rule_version}
    if step is Step.REMIND:
        details |= {"groups": list(call.approver_groups or ()), "expires_at": _iso(call.expires_at)}
    else:
        details["groups"] = sorted(groups)
        if call.approver_groups:  # routed to groups: the escalation groups may approve too
            widened = sorted({*call.approver_groups, *groups})
            tx.session.execute(
                update(ToolCallRow).where(ToolCallRow.id == call_id).values(approver_groups=widened, updated_at=now)
            )
            details["approver_groups"] = widened
    tx.record(call_event(SYSTEM_ACTOR_ID, FOLLOW_UP_ACTIONS[step], call, details, at=now))
    tx.announce(PENDING_CHANNEL, call.run_id)
    return True


def _iso(at: dt.datetime | None) -> str | None:
    return at.isoformat() if at is not None else None
