"""Conditions: CEL compiled once, refused with a position when wrong, and a failed evaluation said plainly."""

from __future__ import annotations

import datetime as dt

import pytest

from approvals.policy import VARIABLES, ConditionFailed, InvalidCondition, compile_condition
from approvals.policy.conditions import MAX_CONDITION, activation, prepared

from .rulesets import NOW


def variables(args: dict[str, object] | None = None, **facts: object) -> dict[str, object]:
    base = {"tool": "refund", "agent": "support-app", "engine": "gate", "session": "s1", "context": None}
    merged = base | {"requester": None, "now": NOW} | facts
    return activation(args=args or {}, **merged)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("args.amount <", 1, 14),
        ("args.amount < 50 &&\n  args.region ==", 2, 17),
        ("args.amount < 50 )", 1, 18),
    ],
)
def test_a_syntax_error_names_its_line_and_column(text: str, line: int, column: int) -> None:
    with pytest.raises(InvalidCondition) as raised:
        compile_condition(text)
    assert (raised.value.line, raised.value.column) == (line, column)
    assert f"at line {line}, column {column}" in str(raised.value)
    assert "^" not in str(raised.value)  # the parser's caret drawing is left out


@pytest.mark.parametrize("text", ["arg.amount > 1", "args.amount > limit", "request.tool == 'x'"])
def test_an_unknown_variable_is_refused_naming_the_variables_a_condition_may_use(text: str) -> None:
    with pytest.raises(InvalidCondition, match="unknown variable") as raised:
        compile_condition(text)
    assert all(name in str(raised.value) for name in VARIABLES)
    assert raised.value.line is None


@pytest.mark.parametrize(
    "text",
    [
        "args.items.exists(item, item.sku == 'A')",
        "args.items.all(i, i.qty > 0) && args.items.exists_one(j, j.qty > 5)",
        "args.items.map(x, x.qty).filter(q, q > 1).size() == 1",
        "args.tags.exists(t, t == tool)",
    ],
)
def test_the_names_a_macro_binds_are_allowed(text: str) -> None:
    condition = compile_condition(text)
    call = variables({"items": [{"sku": "A", "qty": 6}, {"sku": "B", "qty": 1}], "tags": ["refund"]})
    assert condition.holds(call) is True


@pytest.mark.parametrize("text", ["", "   ", "x" * (MAX_CONDITION + 1)])
def test_an_empty_or_huge_condition_is_refused(text: str) -> None:
    with pytest.raises(InvalidCondition):
        compile_condition(text)


@pytest.mark.parametrize(("text", "gave"), [("args.amount", "int 20"), ("'yes'", "str 'yes'"), ("1 + 1", "int 2")])
def test_a_condition_that_is_not_true_or_false_fails(text: str, gave: str) -> None:
    with pytest.raises(ConditionFailed, match=f"gave {gave}, not true or false"):
        compile_condition(text).holds(variables({"amount": 20}))


def test_a_missing_field_fails_with_a_hint_to_test_it_with_has() -> None:
    condition = compile_condition("args.region == 'eu'")
    with pytest.raises(ConditionFailed, match=r"no field 'region' \(test it first with has\(\.\.\.\)\)"):
        condition.holds(variables({"amount": 20}))
    guarded = compile_condition("has(args.region) && args.region == 'eu'")
    assert guarded.holds(variables({"amount": 20})) is False
    assert guarded.holds(variables({"region": "eu"})) is True


def test_a_type_error_fails_naming_it() -> None:
    with pytest.raises(ConditionFailed, match=r"^TypeError: No such overload"):
        compile_condition("args.amount < 50").holds(variables({"amount": "20"}))  # text is no number


def test_every_variable_is_bound_for_a_call() -> None:
    call = variables(
        {"to": "x@example.com"},
        context={"cwd": "/srv/prod/app"},
        requester="alice",
        session="s9",
    )
    assert set(call) == set(VARIABLES)
    texts = [
        "tool == 'refund' && agent == 'support-app' && engine == 'gate' && session == 's9'",
        "context.cwd.startsWith('/srv/prod') && requester == 'alice'",
        "now == timestamp('2030-01-01T12:00:00Z') && now > timestamp('2029-12-31T00:00:00Z')",
    ]
    for text in texts:
        assert compile_condition(text).holds(call) is True, text
    nobody = variables()
    assert nobody["context"] == {} and nobody["requester"] == ""  # never null: `context.x` is a missing field


def test_a_constant_condition_is_known_as_such() -> None:
    assert compile_condition("1 > 2").constant is False
    assert compile_condition("true || false").constant is True
    assert compile_condition("args.amount > 2").constant is None
    assert compile_condition("[1, 2].exists(x, x > 5)").constant is False  # only its own macro's name
    assert compile_condition("1 + 1").constant is None  # not true or false at all


def test_a_prepared_context_decides_as_the_plain_variables_do() -> None:
    call = variables({"amount": 20, "items": [1, 2]}, now=NOW + dt.timedelta(hours=1))
    ready = prepared(call)
    assert ready is not call
    for text in ("args.amount < 50", "size(args.items) == 2", "now > timestamp('2030-01-01T12:30:00Z')"):
        assert compile_condition(text).holds(ready) == compile_condition(text).holds(call) is True
    with pytest.raises(ConditionFailed, match="no field 'region'"):
        compile_condition("args.region == 'eu'").holds(ready)


def test_a_value_cel_cannot_take_fails_each_condition_that_reads_it() -> None:
    call = variables({"amount": object()})
    assert prepared(call) is call  # left as it is: each condition says what it cannot read
    with pytest.raises(ConditionFailed):
        compile_condition("args.amount < 50").holds(prepared(call))
