"""No JSON Schema and no arguments make validation run for long: patterns by RE2, `uniqueItems` in
linear time, a time budget for the rest (approvals/calls/bounded_jsonschema.py).

Before these, `^(a+)+$` against 40 characters backtracked for years, 1,000 objects under
`uniqueItems` took 5.7 s, and `anyOf` over a recursive `$ref` was exponential in the depth of the
arguments, each on the server's event loop. A test that would hang without the fix runs the
validation in a thread and asks that it end within a minute: termination, not speed, is asserted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from approvals.calls import CallRequest, validate_request
from approvals.calls.arguments import ArgsInvalid, JsonSchemaArgs, check_json_schema
from approvals.calls.bounded_jsonschema import MATCHING_MODULES, TooCostly, quick_pass, search
from approvals.exceptions import InvalidArguments, UserError

WATCHDOG = 60.0
"""Seconds a validation may take before the test calls it hung (the fixed code takes milliseconds)."""


def finishes(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Validate in a thread: None when the arguments are valid, else the errors; fails if it never ends."""
    outcome: list[str | None] = []

    def validate() -> None:
        try:
            JsonSchemaArgs(schema).validate_python(args)
            outcome.append(None)
        except ArgsInvalid as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=validate, daemon=True)
    thread.start()
    thread.join(WATCHDOG)
    assert not thread.is_alive(), "validation did not end"
    return outcome[0]


def with_property(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": schema}}


def exponential_schema() -> dict[str, Any]:
    """`anyOf` whose two branches both check the same child: 2^depth checks for arguments nested `depth` deep."""
    node = {
        "anyOf": [
            {"type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 1},
            {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 5},
        ]
    }
    return {"type": "object", "$defs": {"node": node}, "properties": {"x": {"$ref": "#/$defs/node"}}}


def nested(depth: int) -> Any:
    """A leaf that matches neither branch, `depth` lists deep: every path is tried."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_a_backtracking_pattern_is_matched_in_linear_time() -> None:
    errors = finishes(with_property({"type": "string", "pattern": "^(a+)+$"}), {"x": "a" * 5000 + "b"})
    assert errors is not None and "does not match" in errors
    assert finishes(with_property({"type": "string", "pattern": "^(a+)+$"}), {"x": "a" * 5000}) is None


def test_pattern_properties_and_additional_properties_match_names_in_linear_time() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^(b+)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    errors = finishes(schema, {"b" * 5000 + "c": 1})
    assert errors is not None and "not" in errors
    assert finishes(schema, {"bbb": 3}) is None
    assert finishes(schema, {"bbb": "three"}) is not None


def test_every_module_of_jsonschema_that_matches_patterns_matches_them_with_re2() -> None:
    for module in MATCHING_MODULES:
        assert module.re.search is search


@pytest.mark.parametrize(
    ("pattern", "why"),
    [("(?=a)b", "lookaround"), (r"(a)\1", "backreference"), ("(?<!x)y", "lookbehind")],
)
def test_a_pattern_re2_cannot_run_is_refused_when_the_schema_is_checked(pattern: str, why: str) -> None:
    problems = check_json_schema(with_property({"type": "string", "pattern": pattern}))
    assert any(repr(pattern) in problem and "linear time" in problem for problem in problems), (why, problems)
    nested = {"type": "object", "patternProperties": {pattern: {}}}
    assert check_json_schema(nested), why


def test_data_keywords_are_not_read_as_patterns() -> None:
    schema = with_property({"enum": [{"pattern": "(?=x)"}], "default": {"pattern": "(?<=y)"}})
    assert check_json_schema(schema) == []


def test_a_subschema_naming_another_dialect_is_bounded_as_well() -> None:
    """Each `$schema` picks its dialect's validator class; every class counts and matches with RE2."""
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "uniqueItems": True}
    schema = with_property(draft7)
    assert check_json_schema(schema) == []
    errors = finishes(schema, {"x": [{"a": i} for i in range(5_000)] + [{"a": 0}]})
    assert errors is not None and "more than once" in errors


def test_unique_items_of_many_objects_is_checked_once_each() -> None:
    schema = with_property({"type": "array", "uniqueItems": True})
    assert finishes(schema, {"x": [{"a": i, "b": [i, {"c": str(i)}]} for i in range(5_000)]}) is None


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([1, True], True),
        ([0, False], True),
        ([None, False], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([[1, 2], [2, 1]], True),
        ([[1, {"a": 1.0}], [1, {"a": 1}]], False),
        (["1", 1], True),
    ],
)
def test_unique_items_keeps_json_equality(items: list[Any], unique: bool) -> None:
    errors = finishes(with_property({"type": "array", "uniqueItems": True}), {"x": items})
    assert (errors is None) is unique, errors


def test_an_exponential_schema_is_stopped_by_the_time_budget() -> None:
    """2^40 paths for arguments nested 40 deep."""
    errors = finishes(exponential_schema(), {"x": nested(40)})
    assert errors is not None and "takes longer than" in errors


def test_arguments_nested_past_the_recursion_limit_are_refused_not_a_crash() -> None:
    deep: Any = 0
    for _ in range(5000):
        deep = [deep]
    nested = {"items": {"$ref": "#/$defs/a"}}
    schema = {"type": "object", "$defs": {"a": nested}, "properties": {"x": {"$ref": "#/$defs/a"}}}
    errors = finishes(schema, {"x": deep})
    assert errors is not None and "nest too deeply" in errors


def test_the_gate_refuses_a_schema_it_could_not_run_safely_with_the_reason() -> None:
    request = CallRequest(
        engine="gate",
        source="billing",
        session_id="s",
        tool_name="refund",
        tool_call_id="k",
        args={"x": "a"},
        json_schema=with_property({"type": "string", "pattern": "(?=a)a"}),
    )
    with pytest.raises((UserError, InvalidArguments)) as refused:
        validate_request(request)
    assert "linear time" in str(refused.value)


def test_a_quick_pass_hands_a_costly_validation_back_to_its_caller() -> None:
    """On the event loop a check gets a few milliseconds; past them the caller moves it to a thread."""
    with pytest.raises(TooCostly), quick_pass():
        JsonSchemaArgs(exponential_schema()).validate_python({"x": nested(40)})
    with quick_pass():  # what is cheap is done where it is
        assert JsonSchemaArgs(with_property({"type": "integer"})).validate_python({"x": 3}) == {"x": 3}


def test_checking_a_schema_against_its_metaschema_is_bounded_too() -> None:
    """jsonschema takes ~9 s to check a schema of 20,000 properties; it gets the same budget as arguments."""

    def properties(count: int) -> dict[str, Any]:
        return {"type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 1} for i in range(count)}}

    with pytest.raises(TooCostly), quick_pass():
        check_json_schema(properties(500))
    assert check_json_schema(properties(500)) == []  # with the full budget, a large but ordinary schema passes
    [refused] = check_json_schema(properties(20_000))
    assert refused.startswith("json_schema is too costly to check")


def test_time_the_thread_spends_waiting_does_not_count_against_the_budget() -> None:
    """The budget is CPU time: a loaded machine (other processes, another thread holding the GIL) stretches the
    wall time of an ordinary check, and must not turn it into a refusal."""
    schema = with_property({"type": "array", "items": {"type": "integer"}})
    with quick_pass(0.05):
        time.sleep(0.1)  # the thread waits: wall time passes the budget, its CPU time does not
        assert JsonSchemaArgs(schema).validate_python({"x": list(range(200))}) == {"x": list(range(200))}
