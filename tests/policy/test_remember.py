"""Approve and remember: the pinned condition holds for the approved arguments and for nothing else pinned.

Argument names and values come from models and people: quotes, unicode beyond the BMP, CEL's
keywords as names, nested maps and lists, integers past CEL's `int`. Each condition is compiled
and evaluated as a rule's would be.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from approvals.policy import Remember, RememberScope, compile_condition, pinned_condition, remembered_rule
from approvals.policy.conditions import activation

from .rulesets import NOW

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
"""Any text JSON carries (lone UTF-16 surrogates are no JSON a database stores)."""
NAMES = st.one_of(
    TEXT,
    st.sampled_from(["in", "true", "false", "null", "for", "if", "has", "size", "a-b", "a.b", "😀", "é", "'", '"']),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
ARGS = st.dictionaries(NAMES, VALUES, max_size=5)


def holds(condition: str, args: dict[str, Any]) -> bool:
    variables = activation(
        args=args, tool="t", agent="a", engine="gate", session="s", context=None, requester=None, now=NOW
    )
    return compile_condition(condition).holds(variables)


def changed(value: Any) -> Any:
    """A value CEL never finds equal to `value` (CEL finds 1 == 1.0, so no nudging of numbers)."""
    return {"was": value} if isinstance(value, list) else [value]


@settings(max_examples=300, deadline=None)
@given(args=ARGS.filter(bool), data=st.data())
@example(args={"in": 1, "true": "x", "null": None}, data=None)
@example(args={"😀": {"🙂 key": "v"}, "k": "quote \" and \\ and ' and \n"}, data=None)
@example(args={"big": 2**63, "bigger": 2**64 - 1, "small": -(2**63)}, data=None)
def test_all_pinned_holds_for_the_same_arguments_and_no_changed_or_added_one(
    args: dict[str, Any], data: st.DataObject | None
) -> None:
    condition = pinned_condition(args, None)
    assert holds(condition, args)
    name = data.draw(st.sampled_from(sorted(args))) if data is not None else sorted(args)[0]
    assert not holds(condition, {**args, name: changed(args[name])})
    extra = "extra" if "extra" not in args else "extra_"
    assert not holds(condition, {**args, extra: 1})  # all pinned: nothing added either


@settings(max_examples=120, deadline=None)
@given(args=ARGS.filter(lambda a: len(a) >= 2), data=st.data())
def test_some_pinned_ignores_the_others(args: dict[str, Any], data: st.DataObject) -> None:
    names = sorted(args)
    pinned = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names) - 1, unique=True))
    free = next(name for name in names if name not in pinned)
    condition = pinned_condition(args, pinned)
    assert holds(condition, args)
    assert holds(condition, {**args, free: changed(args[free]), "added": True})
    assert not holds(condition, {**args, pinned[0]: changed(args[pinned[0]])})


@pytest.mark.parametrize(
    ("value", "other"),
    [
        (1, True),  # CEL keeps bool and int apart
        (1, "1"),
        ("é", "e\u0301"),  # the same letter, composed otherwise
        ({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "y"}]}),  # a nested leaf
        ({"a": 1}, {"a": 1, "b": 2}),
        ([1, 2], [2, 1]),
        (None, ""),
        (2**63, 2**63 + 1),
        (0.1, 0.1000000001),
    ],
)
def test_a_pinned_value_changed_subtly_no_longer_matches(value: Any, other: Any) -> None:
    condition = pinned_condition({"v": value}, ["v"])
    assert holds(condition, {"v": value})
    assert not holds(condition, {"v": other})


def test_pinning_nothing_is_no_condition_and_pinning_an_absent_name_is_ignored() -> None:
    assert pinned_condition({"a": 1}, []) == ""
    assert pinned_condition({"a": 1}, ["b"]) == ""
    assert pinned_condition({}, None) == "size(args) == 0"
    assert (
        pinned_condition({"amount": 120, "in": "x"}, None)
        == 'args.amount == 120 && args["in"] == "x" && size(args) == 2'
    )


def test_a_value_that_is_no_json_cannot_be_pinned() -> None:
    with pytest.raises(ValueError, match="not a JSON number"):
        pinned_condition({"a": float("nan")}, None)
    with pytest.raises(TypeError, match="not a JSON value"):
        pinned_condition({"a": object()}, None)


def test_a_remembered_rule_is_narrow_and_expires() -> None:
    remember = Remember(RememberScope.SESSION, dt.timedelta(hours=2), pinned=["to"])
    spec = remembered_rule(
        engine="gate",
        agent="support-app",
        tool="send_email",
        session="s1",
        args={"to": "a@example.com", "body": "hi"},
        author="finn",
        call_id="c1",
        remember=remember,
        now=NOW,
    )
    assert (spec.engine, spec.agent, spec.tool, spec.session) == (["gate"], ["support-app"], ["send_email"], "s1")
    assert spec.when == 'args.to == "a@example.com"' and spec.effect == "allow"
    assert spec.expires_at == NOW + dt.timedelta(hours=2)
    assert spec.name.startswith("remembered-") and "finn" in spec.description and "c1" in spec.description
    agent_wide = remembered_rule(
        engine="gate",
        agent="support-app",
        tool="send_email",
        session="s1",
        args={"to": "a@example.com"},
        author="finn",
        call_id="c1",
        remember=Remember(RememberScope.AGENT, dt.timedelta(hours=2), condition="args.to.endsWith('@example.com')"),
        now=NOW,
    )
    assert agent_wide.session is None and agent_wide.when == "args.to.endsWith('@example.com')"


@pytest.mark.parametrize("duration", [dt.timedelta(0), dt.timedelta(days=91), dt.timedelta(seconds=-1)])
def test_remember_for_a_positive_period_of_at_most_90_days(duration: dt.timedelta) -> None:
    assert Remember(RememberScope.AGENT, duration).problems() == ["remember for a positive period of at most 90 days"]
    assert Remember(RememberScope.AGENT, dt.timedelta(days=90)).problems() == []


def test_a_name_ending_in_a_newline_is_read_by_its_key_not_as_a_field() -> None:
    """Found by hypothesis: `re.match` with `$` took "A\\n" for an identifier, giving `args.A\\n`."""
    args = {"A\n": None}
    assert holds(pinned_condition(args, None), args)
