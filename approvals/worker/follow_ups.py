"""Reminders and escalation of calls nobody decided: the scanner every process runs.

Every `interval` seconds (and once at start) it asks the database for pending calls that
may be due (expiring within the longest `remind_before` in use; asked at least the shortest
`escalate_after` ago), works out each call's own times from its rule (`follow_up_plan`), and
makes those due (`store.outbound.follow_up`: once per call and step, whichever process gets there
first). Any number of processes may scan the same database; one that stopped is made up for
by the next scan of any process, so a step is late by at most an interval, never lost or doubled.

Database outages are waited out with backoff, logged once when they start and once when they
end; any other error is logged with its traceback and the next scan goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
import anyio.abc

from .._outage import Outage
from ..calls import clock
from ..channels.settings import FollowUpDefaults
from ..policy.follow_ups import FollowUpPlan, Step, follow_up_plan
from ..policy.rules import RuleSpec
from ..store import Store
from ..store.errors import describe, is_transient
from ..store.follow_ups import OpenCall

__all__ = ("FollowUpHealth", "FollowUpScan", "Plans", "run_follow_ups", "scan_follow_ups")

logger = logging.getLogger("approvals.follow_ups")


@dataclass
class FollowUpHealth:
    """How this process's scanner is doing, for `/readyz`: when it last got through, and what it made."""

    last_scan: dt.datetime | None = None
    reminded: int = 0
    escalated: int = 0
    outage: bool = False

    def summary(self) -> dict[str, object]:
        last = self.last_scan.isoformat() if self.last_scan is not None else None
        return {"last_scan": last, "reminded": self.reminded, "escalated": self.escalated, "outage": self.outage}


@dataclass(frozen=True)
class FollowUpScan:
    """What one scan did: the calls it reminded and escalated (those another process made first are not here)."""

    reminded: list[str] = field(default_factory=list)
    escalated: list[str] = field(default_factory=list)


class Plans:
    """Each rule version's follow-ups over the defaults, and the widest window a scan must look in."""

    def __init__(self, defaults: FollowUpDefaults) -> None:
        self.defaults = defaults
        self.default = self._plan(None)
        self._rules: Mapping[tuple[str, int], RuleSpec | None] | None = None
        self._plans: dict[tuple[str, int], FollowUpPlan] = {}
        self.remind_horizon: float | None = None
        """The longest `remind_before` of any plan; None: nothing is ever reminded."""
        self.shortest_escalation: float | None = None
        """The shortest `escalate_after` of any plan that escalates; None: nothing is ever escalated."""
        self.reminding_rules: frozenset[str] | None = None
        """When calls without a rule are not reminded: the rules some version of which reminds (None: any call)."""
        self.escalating_rules: frozenset[str] | None = None
        """When calls without a rule are not escalated: the rules some version of which escalates (None: any call)."""
        self._update({})

    def update(self, rules: Mapping[tuple[str, int], RuleSpec | None]) -> None:
        """Take the rule versions the store read (the same mapping until a rule changes)."""
        if rules is not self._rules:
            self._update(rules)

    def for_call(self, call: OpenCall) -> FollowUpPlan:
        """The call's rule's plan; a call without a rule (or whose rule is not stored as an ask) has the defaults."""
        return self._plans.get(call.rule, self.default) if call.rule is not None else self.default

    def unknown(self, calls: list[OpenCall]) -> bool:
        """Whether some of `calls` name a rule version stored after the rules were read."""
        return any(call.rule is not None and call.rule not in self._plans for call in calls)

    def _update(self, rules: Mapping[tuple[str, int], RuleSpec | None]) -> None:
        self._rules = rules
        self._plans = {key: self._plan(spec) for key, spec in rules.items()}
        every = [self.default, *self._plans.values()]
        reminds = [plan.remind_before for plan in every if plan.remind_before]
        escalates = [plan.escalate_after for plan in every if plan.escalates and plan.escalate_after]
        self.remind_horizon = max(reminds, default=None)
        self.shortest_escalation = min(escalates, default=None)
        reminding = frozenset(name for (name, _), plan in self._plans.items() if plan.reminds)
        escalating = frozenset(name for (name, _), plan in self._plans.items() if plan.escalates)
        self.reminding_rules = None if self.default.reminds else reminding
        self.escalating_rules = None if self.default.escalates else escalating

    def _plan(self, spec: RuleSpec | None) -> FollowUpPlan:
        defaults = self.defaults
        return follow_up_plan(
            spec,
            remind_before=defaults.remind_before,
            escalate_after=defaults.escalate_after,
            escalate_to=defaults.escalate_to,
        )


async def scan_follow_ups(store: Store, plans: Plans, *, now: dt.datetime | None = None) -> FollowUpScan:
    """Make every reminder and escalation due at `now` (default: the current time)."""
    now = now or clock.now()
    plans.update(await store.outbound.follow_up_rules())
    return FollowUpScan(reminded=await _remind(store, plans, now), escalated=await _escalate(store, plans, now))


async def _remind(store: Store, plans: Plans, now: dt.datetime) -> list[str]:
    if plans.remind_horizon is None:
        return []
    found = await store.outbound.due_reminders(now=now, horizon=plans.remind_horizon, rules=plans.reminding_rules)
    reminded = []
    for call in await _with_their_rules(store, plans, found):
        due = plans.for_call(call).remind_at(call.created_at, call.expires_at)
        if due is not None and due <= now and await store.outbound.follow_up(call.id, Step.REMIND, due_at=due):
            reminded.append(call.id)
    return reminded


async def _escalate(store: Store, plans: Plans, now: dt.datetime) -> list[str]:
    if plans.shortest_escalation is None:
        return []
    found = await store.outbound.due_escalations(now=now, after=plans.shortest_escalation, rules=plans.escalating_rules)
    escalated = []
    for call in await _with_their_rules(store, plans, found):
        plan = plans.for_call(call)
        due = plan.escalate_at(call.created_at)
        if due is None or due > now:
            continue
        if await store.outbound.follow_up(call.id, Step.ESCALATE, due_at=due, groups=plan.escalate_to):
            escalated.append(call.id)
    return escalated


async def _with_their_rules(store: Store, plans: Plans, calls: list[OpenCall]) -> list[OpenCall]:
    """`calls`, once `plans` knows their rules: a call asked under a rule saved after the scan read the rules
    makes it read them again, so it never gets the defaults its rule overrides."""
    if plans.unknown(calls):
        plans.update(await store.outbound.follow_up_rules())
    return calls


async def run_follow_ups(
    store: Store,
    defaults: FollowUpDefaults,
    stop: anyio.Event,
    *,
    interval: float = 15.0,
    health: FollowUpHealth | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Remind and escalate due calls every `interval` seconds until `stop` is set (`health` says how it goes)."""
    health = health if health is not None else FollowUpHealth()
    plans = Plans(defaults)
    outage = Outage("looking for calls to remind or escalate", logger, first_delay=min(0.25, interval))
    task_status.started()
    while not stop.is_set():
        wait = interval
        try:
            scan = await scan_follow_ups(store, plans)
            outage.succeeded()
            health.last_scan, health.outage = clock.now(), False
            health.reminded += len(scan.reminded)
            health.escalated += len(scan.escalated)
            if scan.reminded or scan.escalated:
                logger.info("reminded %d and escalated %d call(s)", len(scan.reminded), len(scan.escalated))
        except Exception as exc:
            if not is_transient(exc):
                logger.exception("looking for calls to remind or escalate failed unexpectedly")
            else:
                health.outage = True
                wait = outage.failed(describe(exc))
        with anyio.move_on_after(wait):
            await stop.wait()
