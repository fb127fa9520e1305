"""Our tool schemas equal pydantic-ai's for ordinary functions (issue 16).

The expected schemas were written by pydantic-ai itself (`python -m tests.tool_shapes`), so a
change on either side that makes them differ fails here. Titles are ignored: they are names
for people reading the schema, not constraints the model must meet. Where we differ on
purpose, `expected_schema` says so and allows exactly that.
"""

from __future__ import annotations

import copy
import inspect
import json
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from approvals import Tool
from approvals.calls.arguments import ArgsInvalid

from .tool_shapes import FIXTURE, SHAPES

EXPECTED: dict[str, Any] = json.loads(FIXTURE.read_text())["tools"]


def without_titles(schema: Any) -> Any:
    """The schema minus `title` keywords (a property that is named "title" stays)."""
    if isinstance(schema, dict):
        return {
            key: (without_titles(value) if key != "properties" else {k: without_titles(v) for k, v in value.items()})
            for key, value in schema.items()
            if key != "title"
        }
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    return schema


def test_every_shape_has_pydantic_ais_schema_stored() -> None:
    assert sorted(EXPECTED) == sorted(f.__name__ for f in SHAPES), "run `python -m tests.tool_shapes`"


def expected_schema(function: Any) -> Any:
    """pydantic-ai's schema for `function`, with the differences we keep on purpose applied."""
    expected = copy.deepcopy(EXPECTED[function.__name__]["parameters"])
    parameters = list(inspect.signature(function).parameters.values())
    for param in parameters:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            # Deliberate: `*args` is not required with us. pydantic-ai requires it, so a model
            # must send `"labels": []` to pass none, which models often leave out; a call
            # without it would be a retry for nothing. Everything else about it is the same.
            expected["required"].remove(param.name)
            if not expected["required"]:
                del expected["required"]
    hints = typing.get_type_hints(function)
    if (
        len(parameters) == 1
        and isinstance(hints[parameters[0].name], type)
        and issubclass(hints[parameters[0].name], BaseModel)
    ):
        # Deliberate, and older than issue 16: the fields of a lone BaseModel parameter refuse
        # unknown keys unless the model says otherwise (`test_schema.py`,
        # test_single_model_parameter_is_described_by_the_model); pydantic-ai ignores them.
        expected["additionalProperties"] = False
    return expected


@pytest.mark.parametrize("function", SHAPES, ids=lambda f: f.__name__)
def test_schema_equals_pydantic_ais(function: Any) -> None:
    ours = Tool(function).tool_def
    theirs = EXPECTED[function.__name__]
    assert (ours.description or None) == (theirs["description"] or None)
    assert without_titles(ours.parameters_json_schema) == without_titles(expected_schema(function))


def test_a_field_default_gives_its_default_constraint_and_description() -> None:
    """`count: int = Field(1, ge=1, ...)` once failed to be described at all ("not JSON serializable")."""
    from .tool_shapes import field_default

    tool = Tool(field_default)
    assert tool.args_schema.validate_python({}).count == 1
    with pytest.raises(ArgsInvalid, match="greater than or equal to 1"):
        tool.args_schema.validate_python({"count": 0})
