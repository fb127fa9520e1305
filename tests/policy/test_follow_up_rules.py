"""A rule's reminders and escalation: written like its other fields, checked the same way, over the defaults."""

from __future__ import annotations

import datetime as dt

import pytest

from approvals.policy import InvalidRule, dump_rules, load_rules, parse_rule, rule_flags
from approvals.policy.follow_ups import FollowUpPlan, follow_up_plan
from approvals.policy.rules import RuleSpec

from .rulesets import NOW, stored

ASKED = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def plan_of(spec: RuleSpec | None) -> FollowUpPlan:
    """The plan over the defaults of a deployment: remind 15 min ahead, escalate to ops after an hour."""
    return follow_up_plan(spec, remind_before=900.0, escalate_after=3600.0, escalate_to=("ops",))


def ask(**fields: object) -> dict[str, object]:
    return {"name": "big-refunds", "tool": "refund", "effect": "ask", **fields}


def test_follow_up_fields_read_as_durations_and_groups_and_survive_a_rules_file() -> None:
    spec = parse_rule(ask(remind_before="30m", escalate_after="2h", escalate_to=["oncall", "finance-leads", "oncall"]))
    assert (spec.remind_before, spec.escalate_after, spec.escalate_to) == (1800.0, 7200.0, ["finance-leads", "oncall"])
    assert load_rules(dump_rules([spec])) == [spec]
    assert "escalate_to" not in parse_rule(ask()).definition()  # unset: the defaults, and the file stays short


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"remind_before": "soon"}, "remind_before: 'soon' is not a duration: use seconds or a text such as 30m"),
        ({"escalate_after": -5}, "escalate_after: give a time from 0 (never) to 366d"),
        ({"escalate_after": "400d"}, "escalate_after: give a time from 0 (never) to 366d"),
        ({"remind_before": float("nan")}, "remind_before: give a time from 0 (never) to 366d"),
        ({"escalate_to": ["on call"]}, "escalate_to: 'on call' is not a group name"),
        ({"escalate_to": []}, "escalate_to: name at least one group; to turn escalation off, set escalate_after: 0"),
        ({"escalate_to": "oncall"}, "escalate_to: Input should be a valid list"),
    ],
)
def test_bad_follow_up_values_are_refused_naming_the_field(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(InvalidRule) as refused:
        parse_rule(ask(**fields))
    assert any(line.startswith(problem) for line in refused.value.problems), refused.value.problems


@pytest.mark.parametrize("effect", ["allow", "deny"])
def test_follow_ups_apply_to_ask_rules_only(effect: str) -> None:
    rule = {"name": "r", "tool": "x", "effect": effect, "reason": "no", "remind_before": 0, "escalate_to": ["ops"]}
    with pytest.raises(InvalidRule, match="remind_before, escalate_to apply to ask rules only"):
        parse_rule(rule)


def test_a_rules_values_replace_the_defaults_one_by_one() -> None:
    plan = plan_of(parse_rule(ask(escalate_to=["finance-leads"])))
    assert (plan.remind_before, plan.escalate_after, plan.escalate_to) == (900.0, 3600.0, ("finance-leads",))
    plan = plan_of(parse_rule(ask(remind_before="1h", escalate_after="10m")))
    assert (plan.remind_before, plan.escalate_after, plan.escalate_to) == (3600.0, 600.0, ("ops",))
    assert plan_of(None) == plan_of(parse_rule(ask()))


def test_zero_turns_a_step_off() -> None:
    plan = plan_of(parse_rule(ask(remind_before=0, escalate_after="0s")))
    assert not plan.reminds and not plan.escalates
    assert plan.remind_at(ASKED, ASKED + dt.timedelta(hours=1)) is None
    assert plan.escalate_at(ASKED) is None


def test_when_a_call_is_reminded_and_escalated() -> None:
    plan = plan_of(None)
    hour = dt.timedelta(hours=1)
    assert plan.remind_at(ASKED, ASKED + hour) == ASKED + dt.timedelta(minutes=45)
    assert plan.remind_at(ASKED, None) is None  # no expiry: nothing to remind of
    assert plan.remind_at(ASKED, ASKED + dt.timedelta(minutes=15)) is None  # asked with no more time than that
    assert plan.escalate_at(ASKED) == ASKED + hour
    nobody = follow_up_plan(None, remind_before=None, escalate_after=3600.0, escalate_to=())
    assert nobody.escalate_at(ASKED) is None and not nobody.reminds  # no groups to escalate to


def test_an_escalation_to_groups_nobody_is_in_is_flagged_when_the_groups_are_known() -> None:
    rules = [
        stored(name="refunds", tool="refund", effect="ask", escalate_to=["oncall", "finance-leads"]),
        stored(name="wires", tool="wire", effect="ask", escalate_to=["finance-leads"]),
    ]
    assert rule_flags(rules, now=NOW, groups_with_members={"finance-leads"}) == {
        "refunds": ["escalates to a group nobody is in: no user is in oncall"]
    }
    assert rule_flags(rules, now=NOW) == {}  # groups unknown: nothing to say
