"""Point 10: exporting definitions for OpenAI (plain and strict), Anthropic, Responses and MCP."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model

from approvals import Tool, UserError
from approvals.engines.native.formats import (
    StrictSchemaError,
    openai_strict_schema,
    strict_violations,
    to_anthropic_tool,
    to_mcp_tool,
    to_openai_responses_tool,
    to_openai_tool,
)


class Line(BaseModel):
    """One order line."""

    sku: Annotated[str, Field(min_length=3, description="Stock keeping unit")]
    quantity: int = Field(default=1, ge=1)
    note: Optional[str] = None  # noqa: UP045


class Customer(BaseModel):
    name: str
    email: str | None = None
    vip: bool = False


class Order(BaseModel):
    customer: Customer
    billing: Customer | None = None
    lines: list[Line]
    rush: bool = False
    channel: Literal["web", "phone"] = "web"
    ship_after: dt.date | None = None


def place(order: Order, priority: int = 0) -> str:
    """Place an order.

    Args:
        order: The order to place.
        priority: Higher runs first.
    """
    return "ok"


def test_openai_plain_shape() -> None:
    definition = Tool(place).tool_def
    exported = to_openai_tool(definition)
    assert exported == {
        "type": "function",
        "function": {
            "name": "place",
            "description": "Place an order.",
            "parameters": definition.parameters_json_schema,
        },
    }


def test_openai_strict_on_nested_models_follows_the_rules() -> None:
    exported = to_openai_tool(Tool(place).tool_def, strict=True)
    function = exported["function"]
    assert function["strict"] is True
    schema = function["parameters"]
    assert strict_violations(schema) == []
    assert schema["required"] == ["order", "priority"]
    assert schema["properties"]["priority"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    line = schema["$defs"]["Line"]
    assert line["additionalProperties"] is False
    assert line["required"] == ["sku", "quantity", "note"]
    # constraints strict mode rejects move into the description instead of vanishing
    assert line["properties"]["sku"] == {"type": "string", "description": "Stock keeping unit (minLength=3)"}
    assert "default" not in keys_anywhere(schema)
    assert line["properties"]["quantity"]["description"] == "default: 1"


def keys_anywhere(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in keys_anywhere(value)}
    if isinstance(node, list):
        return {k for value in node for k in keys_anywhere(value)}
    return set()


def test_the_original_schema_breaks_strict_rules_and_the_export_fixes_them() -> None:
    original = Tool(place).tool_def.parameters_json_schema
    assert strict_violations(original)  # sanity: the checker does find problems
    assert strict_violations(openai_strict_schema(Tool(place).tool_def)) == []


def test_strict_nulls_for_optional_parameters_mean_defaults() -> None:
    t = Tool(place, strict=True)
    args = t.validate_args(
        {
            "order": {
                "customer": {"name": "Ann", "email": None},
                "billing": {"name": "Bob", "email": None, "vip": None},
                "lines": [{"sku": "ABC", "quantity": None, "note": None}],
                "rush": None,
                "channel": None,
                "ship_after": None,
            },
            "priority": None,
        },
        strict_nulls=True,
    )
    assert args.priority == 0
    assert args.order.billing == Customer(name="Bob")
    assert args.order.lines[0].quantity == 1
    assert args.order.rush is False
    assert args.order.channel == "web"


def test_strict_export_refuses_what_strict_mode_cannot_express() -> None:
    def free_form(data: dict[str, int]) -> None:
        pass

    with pytest.raises(StrictSchemaError, match="free-form keys"):
        to_openai_tool(Tool(free_form).tool_def, strict=True)

    def anything(value: Any) -> None:
        pass

    with pytest.raises(StrictSchemaError, match="any type"):
        to_openai_tool(Tool(anything).tool_def, strict=True)


def test_the_definition_strict_flag_is_used_by_default() -> None:
    assert to_openai_tool(Tool(place, strict=True).tool_def)["function"]["strict"] is True
    assert "strict" not in to_openai_tool(Tool(place).tool_def)["function"]


def test_openai_long_description_is_refused_unless_allowed() -> None:
    definition = Tool(place, description="x" * 2000, allow_long_description=True).tool_def
    with pytest.raises(UserError, match="at most 1024"):
        to_openai_tool(definition)
    assert to_openai_tool(definition, allow_long_description=True)["function"]["description"] == "x" * 2000
    assert to_anthropic_tool(definition)["description"] == "x" * 2000


def test_anthropic_shape() -> None:
    definition = Tool(place).tool_def
    assert to_anthropic_tool(definition) == {
        "name": "place",
        "description": "Place an order.",
        "input_schema": definition.parameters_json_schema,
    }


def test_responses_and_mcp_shapes() -> None:
    definition = Tool(place).tool_def
    responses = to_openai_responses_tool(definition, strict=True)
    assert responses["type"] == "function"
    assert responses["name"] == "place"
    assert responses["strict"] is True
    assert strict_violations(responses["parameters"]) == []
    assert to_mcp_tool(definition) == {
        "name": "place",
        "description": "Place an order.",
        "inputSchema": definition.parameters_json_schema,
    }


def test_strict_checker_catches_each_rule() -> None:
    assert strict_violations({"type": "array"}) == ["#: the root must be an object"]
    problems = strict_violations(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "minLength": 2}, "b": {"default": 1, "type": "integer"}},
            "required": ["a"],
        }
    )
    assert "#: additionalProperties must be false" in problems
    assert "#: every property must be listed in required" in problems
    assert "#/properties/a: keyword 'minLength' is not allowed" in problems
    assert "#/properties/b: keyword 'default' is not allowed" in problems


# -- property test: any nesting of supported types exports to a valid strict schema --------------

_names = (f"M{i}" for i in itertools.count())
leaf_types = st.sampled_from(
    [
        int,
        str,
        float,
        bool,
        dt.datetime,
        Literal["a", "b"],
        Annotated[int, Field(ge=0, le=9)],
        Annotated[str, Field(max_length=5)],
    ]
)


def _model(fields: list[tuple[Any, bool]]) -> Any:
    definitions: dict[str, Any] = {}
    for i, (annotation, optional) in enumerate(fields):
        definitions[f"f{i}"] = (annotation | None, None) if optional else (annotation, ...)
    return create_model(next(_names), **definitions)


types = st.recursive(
    leaf_types,
    lambda inner: st.one_of(
        inner.map(lambda t: list[t]),  # type: ignore[valid-type]
        st.lists(st.tuples(inner, st.booleans()), min_size=1, max_size=4).map(_model),
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(params=st.lists(st.tuples(types, st.booleans()), min_size=1, max_size=4))
def test_any_nested_signature_exports_to_a_valid_strict_schema(params: list[tuple[Any, bool]]) -> None:
    model = _model(params)

    def fn(args: Any) -> None:
        pass

    fn.__annotations__ = {"args": model}
    exported = to_openai_tool(Tool(fn).tool_def, strict=True)
    assert strict_violations(exported["function"]["parameters"]) == []
