"""When a call nobody decided is reminded and escalated: its rule's settings over the defaults.

A rule's `remind_before`, `escalate_after` and `escalate_to` each replace the default when
given; a duration of 0 turns that step off. A reminder goes out `remind_before` ahead of the
call's expiry, so a call without one is never reminded, nor one asked with less time than that
(the reminder would come before the question). An escalation goes out `escalate_after` after the
call was asked, and only when there are groups to escalate to.

Only `pending` calls are followed up. An `outcome_unknown` call waits for someone to say whether
it ran, not for an approval: no expiry applies to it, and the time since it was asked says
nothing of how long it has waited in that state.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from .rules import RuleSpec

__all__ = ("FollowUpPlan", "Step", "follow_up_plan")


class Step(StrEnum):
    """A follow-up of a call; `call_follow_ups.step` holds its value."""

    REMIND = "remind"
    ESCALATE = "escalate"


@dataclass(frozen=True)
class FollowUpPlan:
    """The follow-ups of the calls of one rule (or of no rule): None or 0 turns a step off."""

    remind_before: float | None
    escalate_after: float | None
    escalate_to: tuple[str, ...]

    @property
    def reminds(self) -> bool:
        return bool(self.remind_before)

    @property
    def escalates(self) -> bool:
        return bool(self.escalate_after) and bool(self.escalate_to)

    def remind_at(self, created_at: dt.datetime, expires_at: dt.datetime | None) -> dt.datetime | None:
        """When the call is reminded: `remind_before` ahead of its expiry, if that is after it was asked."""
        if not self.remind_before or expires_at is None:
            return None
        due = expires_at - dt.timedelta(seconds=self.remind_before)
        return due if due > created_at else None

    def escalate_at(self, created_at: dt.datetime) -> dt.datetime | None:
        """When the call is escalated: `escalate_after` after it was asked, if there are groups to escalate to."""
        if not self.escalates:
            return None
        assert self.escalate_after is not None  # `escalates` says so
        return created_at + dt.timedelta(seconds=self.escalate_after)


def follow_up_plan(
    spec: RuleSpec | None, *, remind_before: float | None, escalate_after: float | None, escalate_to: Sequence[str]
) -> FollowUpPlan:
    """The plan of a call whose rule is `spec` (None: no rule, or one that no longer reads): its values over the
    defaults given."""
    if spec is not None:
        if spec.remind_before is not None:
            remind_before = spec.remind_before
        if spec.escalate_after is not None:
            escalate_after = spec.escalate_after
        if spec.escalate_to is not None:
            escalate_to = spec.escalate_to
    return FollowUpPlan(remind_before or None, escalate_after or None, tuple(sorted(set(escalate_to))))
