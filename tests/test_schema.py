"""Point 1: a function's signature and docstring become a JSON schema and a validator."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from approvals import Tool, ToolDefinitionError, ToolRetryError, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    city: str = Field(description="City name")


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Filters(TypedDict):
    tag: str
    limit: int


def props(t: Tool[Any]) -> dict[str, Any]:
    properties: dict[str, Any] = t.tool_def.parameters_json_schema["properties"]
    return properties


def test_basic_types_defaults_and_required() -> None:
    def f(a: int, b: str, c: float = 1.5, d: bool = False) -> None:
        """Do it."""

    schema = Tool(f).tool_def.parameters_json_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["a", "b"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["a"] == {"type": "integer"}
    assert schema["properties"]["c"] == {"type": "number", "default": 1.5}
    assert schema["properties"]["d"] == {"type": "boolean", "default": False}


def test_optional_literal_enum() -> None:
    def f(mode: Literal["fast", "slow"], color: Color, note: Optional[str] = None) -> None:  # noqa: UP045
        pass

    p = props(Tool(f))
    assert p["mode"]["enum"] == ["fast", "slow"]
    assert p["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    defs = Tool(f).tool_def.parameters_json_schema["$defs"]
    assert defs["Color"]["enum"] == ["red", "blue"]
    args = Tool(f).validate_args({"mode": "fast", "color": "blue"})
    assert args.color is Color.BLUE
    assert args.note is None


def test_nested_model_dataclass_typeddict() -> None:
    def f(address: Address, point: Point, filters: Filters) -> None:
        pass

    t = Tool(f)
    defs = t.tool_def.parameters_json_schema["$defs"]
    assert set(defs) == {"Address", "Point", "Filters"}
    assert defs["Address"]["properties"]["city"]["description"] == "City name"
    args = t.validate_args(
        {"address": {"street": "Main", "city": "Oslo"}, "point": {"x": 1}, "filters": {"tag": "a", "limit": 2}}
    )
    assert isinstance(args.address, Address)
    assert args.point == Point(1, 0)
    assert args.filters == {"tag": "a", "limit": 2}


def test_annotated_field_constraints() -> None:
    def f(
        amount: Annotated[int, Field(ge=1, le=100)],
        code: Annotated[str, Field(min_length=3, pattern=r"^[A-Z]+$", description="Upper-case code")],
    ) -> None:
        pass

    t = Tool(f)
    p = props(t)
    assert p["amount"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert p["code"]["minLength"] == 3
    assert p["code"]["pattern"] == "^[A-Z]+$"
    assert p["code"]["description"] == "Upper-case code"
    with pytest.raises(ToolRetryError) as err:
        t.validate_args({"amount": 0, "code": "ab"})
    assert "- amount: Input should be greater than or equal to 1 (got 0)" in err.value.message
    assert "- code: String should have at least 3 characters" in err.value.message


def test_datetime_uuid_decimal() -> None:
    def f(when: dt.datetime, ref: uuid.UUID, price: Decimal) -> None:
        pass

    t = Tool(f)
    p = props(t)
    assert p["when"]["format"] == "date-time"
    assert p["ref"]["format"] == "uuid"
    args = t.validate_args({"when": "2026-01-02T03:04:05Z", "ref": str(uuid.UUID(int=7)), "price": "10.50"})
    assert args.when == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert args.price == Decimal("10.50")
    assert t.dump_args(args) == {
        "when": "2026-01-02T03:04:05Z",
        "ref": str(uuid.UUID(int=7)),
        "price": "10.50",
    }


def test_keyword_only_and_positional_only_parameters_are_passed_correctly() -> None:
    seen: dict[str, Any] = {}

    def f(a: int, /, b: int, *, c: int = 3) -> None:
        seen.update(a=a, b=b, c=c)

    t = Tool(f)
    assert t.tool_def.parameters_json_schema["required"] == ["a", "b"]
    positional, keyword = t.args_schema.call_args(t.validate_args({"a": 1, "b": 2}))
    t.function(*positional, **keyword)
    assert seen == {"a": 1, "b": 2, "c": 3}


def test_google_docstring() -> None:
    def f(a: int, b: str) -> str:
        """Look up a thing.

        Longer explanation.

        Args:
            a: The first one.
            b: The second one,
                over two lines.

        Returns:
            The thing found.
        """
        return ""

    t = Tool(f)
    assert t.tool_def.description == "Look up a thing.\n\nLonger explanation.\n\nReturns:\nThe thing found."
    assert props(t)["a"]["description"] == "The first one."
    assert props(t)["b"]["description"] == "The second one,\nover two lines."


def test_numpy_docstring() -> None:
    def f(a: int) -> str:
        """Look up a thing.

        Parameters
        ----------
        a : int
            The first one.

        Returns
        -------
        str
            The thing found.
        """
        return ""

    t = Tool(f)
    assert t.tool_def.description == "Look up a thing.\n\nReturns:\nstr: The thing found."
    assert props(t)["a"]["description"] == "The first one."


def test_sphinx_docstring() -> None:
    def f(a: int) -> str:
        """Look up a thing.

        :param a: The first one.
        :returns: The thing found.
        """
        return ""

    t = Tool(f)
    assert t.tool_def.description == "Look up a thing.\n\nReturns:\nThe thing found."
    assert props(t)["a"]["description"] == "The first one."


def test_field_description_wins_over_docstring() -> None:
    def f(a: Annotated[int, Field(description="From the field")]) -> None:
        """Do.

        Args:
            a: From the docstring.
        """

    assert props(Tool(f))["a"]["description"] == "From the field"


def test_plain_docstring_is_the_description() -> None:
    def f() -> None:
        """Just text.

        Args are mentioned here but not as a section.
        """

    assert Tool(f).tool_def.description == "Just text.\n\nArgs are mentioned here but not as a section."


class Refund(BaseModel):
    """A refund request."""

    order_id: str
    amount: Decimal = Field(gt=0)


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int


def test_single_model_parameter_is_described_by_the_model() -> None:
    received: list[Any] = []

    def refund(request: Refund) -> None:
        """Refund an order."""
        received.append(request)

    t = Tool(refund)
    schema = t.tool_def.parameters_json_schema
    assert set(schema["properties"]) == {"order_id", "amount"}
    assert schema["additionalProperties"] is False
    assert t.tool_def.description == "Refund an order."
    args = t.validate_args({"order_id": "A", "amount": "5"})
    assert isinstance(args, Refund)
    positional, keyword = t.args_schema.call_args(args)
    t.function(*positional, **keyword)
    assert received[0].amount == Decimal("5")
    with pytest.raises(ToolRetryError, match="unexpected: Extra inputs are not permitted"):
        t.validate_args({"order_id": "A", "amount": "5", "unexpected": 1})


def test_single_model_that_allows_extra_keeps_its_choice() -> None:
    def f(payload: Loose) -> None:
        pass

    t = Tool(f)
    assert t.validate_args({"a": 1, "b": 2}).model_extra == {"b": 2}


def test_parameter_names_that_clash_with_pydantic_are_kept_for_the_model() -> None:
    def f(json: str, schema: int = 1) -> tuple[str, int]:
        return json, schema

    t = Tool(f)
    assert set(props(t)) == {"json", "schema"}
    args = t.validate_args({"json": "x", "schema": 2})
    assert t.dump_args(args) == {"json": "x", "schema": 2}
    positional, keyword = t.args_schema.call_args(args)
    assert t.function(*positional, **keyword) == ("x", 2)


def test_unannotated_parameter_accepts_anything() -> None:
    def f(x) -> None:  # type: ignore[no-untyped-def]
        pass

    t = Tool(f)
    assert props(t)["x"] == {}
    assert t.validate_args({"x": [1, "a"]}).x == [1, "a"]


def test_async_function_and_decorator_forms() -> None:
    @tool
    async def plain(a: int) -> int:
        return a

    @tool(name="renamed", requires_approval=True)
    def configured(a: int) -> int:
        return a

    assert plain.name == "plain"
    assert plain.is_async
    assert configured.name == "renamed"
    assert configured.requires_approval is True
    assert not configured.is_async
    assert configured(3) == 3  # the tool stays callable as the function


def test_string_annotations_are_resolved() -> None:
    def f(a: "int", b: "list[str]") -> None:  # noqa: UP037
        pass

    assert props(Tool(f))["b"] == {"type": "array", "items": {"type": "string"}}


def test_unresolvable_annotation_is_a_definition_error() -> None:
    def f(a: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ToolDefinitionError, match="cannot resolve type hints"):
        Tool(f)
