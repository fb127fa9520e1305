"""Issue 16: the shapes pydantic-ai describes are also validated and called the way it calls them.

`test_pydantic_ai_parity.py` compares the schemas; here the functions run through the tool
manager (the path a model's calls take), and the built schemas are reused safely.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, model_validator

from approvals import RunContext, Tool, ToolDefinitionError, ToolRetryError
from approvals.engines.native._tool_manager import CallRetry, CallSucceeded, ToolManager

from .helpers import Call
from .tool_shapes import Label, Shipment, Ticket, pack


def ctx() -> RunContext[None]:
    return RunContext(deps=None, run_id="r")


async def run(tool: Tool[Any], args: str | dict[str, Any]) -> Any:
    """Validate and execute one call as the run loop does; the function's return value, or the retry message."""
    [outcome] = await ToolManager({tool.name: tool}).handle_calls(ctx(), [Call(tool.name, args)])
    if isinstance(outcome, CallRetry):
        return outcome.message
    assert isinstance(outcome, CallSucceeded)
    return outcome.result.return_value


# -- *args and **kwargs ------------------------------------------------------------------------


def label(order_id: int, *labels: str, **counts: int) -> tuple[int, tuple[str, ...], dict[str, int]]:
    """Label an order.

    Args:
        order_id: The order.
        labels: Labels to add.
        counts: How many of each item.
    """
    return order_id, labels, counts


@pytest.mark.anyio
async def test_varargs_are_passed_by_position_and_extra_keys_by_keyword() -> None:
    tool = Tool(label)
    assert await run(tool, '{"order_id": 7, "labels": ["fragile", "gift"], "mugs": 2, "plates": "3"}') == (
        7,
        ("fragile", "gift"),
        {"mugs": 2, "plates": 3},
    )


@pytest.mark.anyio
async def test_varargs_may_be_left_out() -> None:
    """Not required (pydantic-ai requires them): no values is an empty `*args`."""
    assert await run(Tool(label), {"order_id": 7}) == (7, (), {})


@pytest.mark.anyio
async def test_varargs_and_kwargs_values_are_validated() -> None:
    message = await run(Tool(label), {"order_id": 7, "labels": ["ok", 3], "mugs": "many"})
    assert "- labels.1: Input should be a valid string (got 3)" in message
    assert "- mugs: Input should be a valid integer, unable to parse string as an integer" in message


@pytest.mark.anyio
async def test_positional_only_parameters_and_varargs() -> None:
    def join(sep: str, /, *parts: str) -> str:
        return sep.join(parts)

    assert await run(Tool(join), {"sep": "-", "parts": ["a", "b"]}) == "a-b"


@pytest.mark.anyio
async def test_kwargs_alone_take_any_keys_and_are_stored_for_review() -> None:
    def set_counters(**counters: int) -> dict[str, int]:
        return counters

    tool = Tool(set_counters)
    validated = tool.validate_args({"a": "1", "b": 2})
    assert tool.dump_args(validated) == {"a": 1, "b": 2}
    assert tool.dump_args(tool.validate_args(tool.dump_args(validated))) == {"a": 1, "b": 2}
    assert await run(tool, {"a": 1}) == {"a": 1}


def test_without_kwargs_unknown_keys_are_refused_at_the_top_only() -> None:
    """As pydantic-ai: the arguments object is closed; a nested dataclass or TypedDict ignores unknown keys."""
    tool = Tool(pack)
    args = {
        "dimensions": {"height_cm": 1},
        "measured": {"width_cm": 2},
        "label": {"text": "hi", "unknown": 1},
        "contact": {"email": "a@b.c", "unknown": 1},
        "boxes": [],
    }
    validated = tool.validate_args(args)
    assert validated.label == Label("hi")
    assert validated.contact == {"email": "a@b.c"}
    with pytest.raises(ToolRetryError, match="- surprise: Extra inputs are not permitted"):
        tool.validate_args({**args, "surprise": 1})


# -- a lone dataclass or TypedDict parameter ----------------------------------------------------


@pytest.mark.anyio
async def test_a_dataclass_parameter_receives_an_instance() -> None:
    def ship(shipment: Shipment) -> Shipment:
        return shipment

    tool = Tool(ship)
    assert tool.tool_def.description == "A parcel to send."
    assert await run(tool, '{"to": "Ann", "weight_kg": 2}') == Shipment("Ann", 2.0)
    assert tool.dump_args(tool.validate_args({"to": "Ann"})) == {"to": "Ann", "weight_kg": 1.0}
    assert "- to: Field required" in await run(tool, {"weight_kg": 2})


@pytest.mark.anyio
async def test_a_positional_only_dataclass_parameter() -> None:
    def ship(shipment: Shipment, /) -> str:
        return shipment.to

    assert await run(Tool(ship), {"to": "Ann"}) == "Ann"


@pytest.mark.anyio
async def test_a_typeddict_parameter_receives_the_dict() -> None:
    def file_ticket(ticket: Ticket) -> Ticket:
        """Open a ticket."""
        return ticket

    tool = Tool(file_ticket)
    assert tool.tool_def.description == "Open a ticket."
    assert tool.tool_def.parameters_json_schema["description"] == "A support ticket."
    assert await run(tool, {"title": "Broken", "urgent": "true"}) == {"title": "Broken", "urgent": True}


@pytest.mark.anyio
async def test_a_dataclass_with_context() -> None:
    def ship(ctx: RunContext[None], shipment: Shipment) -> str:
        return f"{ctx.run_id}:{shipment.to}"

    tool = Tool(ship)
    assert tool.takes_ctx
    assert set(tool.tool_def.parameters_json_schema["properties"]) == {"to", "weight_kg"}
    assert await run(tool, {"to": "Ann"}) == "r:Ann"


class Checked(BaseModel):
    """A checked request."""

    amount: int

    @model_validator(mode="before")
    @classmethod
    def accept_a_bare_number(cls, data: Any) -> Any:
        return {"amount": data} if isinstance(data, int) else data


def test_a_model_parameter_with_validators_still_refuses_unknown_keys() -> None:
    def charge(request: Checked) -> int:
        return request.amount

    tool = Tool(charge)
    assert tool.tool_def.description == "A checked request."
    assert tool.validate_args({"amount": "3"}).amount == 3
    with pytest.raises(ToolRetryError, match="- extra: Extra inputs are not permitted"):
        tool.validate_args({"amount": 3, "extra": 1})


def test_attribute_docstrings_of_a_dataclass_reached_only_through_a_list() -> None:
    def stick(boxes: list[Label], count: int) -> int:
        return count

    label = Tool(stick).tool_def.parameters_json_schema["$defs"]["Label"]
    assert label["properties"]["text"]["description"] == "What the label says."


# -- docstrings -------------------------------------------------------------------------------


def test_a_typed_returns_section_alone_reads_as_pydantic_ais() -> None:
    def now() -> str:
        """
        Returns:
            str: The time now.
        """
        return ""

    assert (
        Tool(now).tool_def.description
        == "<returns>\n<type>str</type>\n<description>The time now.</description>\n</returns>"
    )


def test_a_parameter_documented_with_its_stars() -> None:
    def tag(*labels: str) -> str:
        """Tag.

        Args:
            *labels: Labels to add.
        """
        return ""

    assert Tool(tag).tool_def.parameters_json_schema["properties"]["labels"]["description"] == "Labels to add."


# -- reuse of built schemas ---------------------------------------------------------------------


def refund(order_id: str, amount: int) -> str:
    """Refund an order.

    :param order_id: The order.
    :param amount: How much.
    """
    return order_id


def test_tools_of_one_function_share_the_built_schema_not_the_definition() -> None:
    first, second = Tool(refund), Tool(refund, name="refund_again")
    assert first.args_schema is second.args_schema
    assert (first.name, second.name) == ("refund", "refund_again")
    first.tool_def.parameters_json_schema["properties"]["amount"]["minimum"] = 0
    assert "minimum" not in second.tool_def.parameters_json_schema["properties"]["amount"]
    assert "minimum" not in Tool(refund).tool_def.parameters_json_schema["properties"]["amount"]


def test_options_that_shape_the_schema_are_not_served_another_options_result() -> None:
    auto = Tool(refund)
    as_google = Tool(refund, docstring_format="google")
    assert auto.tool_def.parameters_json_schema["properties"]["amount"]["description"] == "How much."
    assert "description" not in as_google.tool_def.parameters_json_schema["properties"]["amount"]
    assert auto.args_schema is not as_google.args_schema
    assert Tool(refund).tool_def.description == "Refund an order."


def test_a_description_override_stays_with_its_tool() -> None:
    assert Tool(refund, description="Custom.").tool_def.description == "Custom."
    assert Tool(refund).tool_def.description == "Refund an order."


def test_callables_that_cannot_be_keys_are_described_every_time() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, a: int) -> int:
            return a

    first, second = Tool(Unhashable(), name="unhashable"), Tool(Unhashable(), name="unhashable")
    assert first.tool_def.parameters_json_schema == second.tool_def.parameters_json_schema
    assert first.args_schema is not second.args_schema


def test_require_parameter_descriptions_is_checked_after_a_lenient_build() -> None:
    def undocumented(a: int) -> int:
        return a

    Tool(undocumented)
    with pytest.raises(ToolDefinitionError, match="parameter 'a' has no description"):
        Tool(undocumented, require_parameter_descriptions=True)


def test_takes_ctx_is_checked_after_a_build_that_detected_it() -> None:
    def with_ctx(ctx: RunContext[None], a: int) -> int:
        return a

    assert Tool(with_ctx).takes_ctx
    with pytest.raises(ToolDefinitionError, match="declared not to take the context"):
        Tool(with_ctx, takes_ctx=False)
    assert Tool(with_ctx, takes_ctx=True).takes_ctx


def test_a_function_changed_after_its_first_tool_is_described_again() -> None:
    def f(a: int) -> int:
        """Before."""
        return a

    assert Tool(f).tool_def.description == "Before."
    f.__doc__ = "After."
    f.__annotations__["a"] = str
    tool = Tool(f)
    assert tool.tool_def.description == "After."
    assert tool.tool_def.parameters_json_schema["properties"]["a"] == {"type": "string"}


def test_a_failed_build_is_not_kept() -> None:
    """A string annotation may name a type defined after the function."""
    namespace: dict[str, Any] = {}
    exec("def later(item: 'Later') -> None:\n    pass\n", namespace)
    with pytest.raises(ToolDefinitionError, match="cannot resolve type hints"):
        Tool(namespace["later"])
    namespace["Later"] = int
    assert Tool(namespace["later"]).tool_def.parameters_json_schema["properties"]["item"] == {"type": "integer"}


def test_the_cache_does_not_keep_functions_alive() -> None:
    def plain(a: int, *rest: str, **more: int) -> None:
        pass

    def flattened(shipment: Shipment) -> None:
        pass

    def typed_dict(ticket: Ticket) -> None:
        pass

    functions: list[Callable[..., Any]] = [plain, flattened, typed_dict]
    tools = [Tool(f) for f in functions]
    assert [Tool(f).args_schema for f in functions] == [t.args_schema for t in tools]
    refs = [weakref.ref(f) for f in functions]
    del plain, flattened, typed_dict, functions, tools
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
