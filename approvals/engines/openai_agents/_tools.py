"""An OpenAI Agents function tool as the core sees it: validated the SDK's own way, and what the SDK tells a bad call.

The SDK validates a function tool's arguments only when it runs the tool (`on_invoke_tool`
parses the JSON, then builds the tool's pydantic model of its parameters, `FuncSchema.
params_pydantic_model`); a call that needs approval is interrupted before that. We validate
it first, with the same model, so invalid arguments never reach a person, and tell the model
what the SDK would have told it (the tool's failure error function, applied to the SDK's own
`ModelBehaviorError`).

The SDK keeps that model inside the tool's invoker, so it is rebuilt from the decorated
function (`FunctionTool.__wrapped__`) with the tool's strict mode, and used only when its JSON
schema is the tool's own. A tool built by hand (`FunctionTool(...)`, an MCP tool) has only its
JSON schema, which validates it (`jsonschema`), with our own retry wording.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.exceptions import ModelBehaviorError
from agents.function_schema import function_schema
from agents.tool import maybe_invoke_function_tool_failure_error_function
from pydantic import BaseModel, TypeAdapter, ValidationError

from ...exceptions import ToolRetryError
from ..native.tools import Tool

__all__ = ("AgentsTool", "agents_tool")


def _never_called(**_: Any) -> None:
    raise AssertionError("the OpenAI Agents SDK runs its own tools")


@dataclass(frozen=True)
class AgentsTool:
    """A function tool, its validator as ours (`Tool`), and the pydantic model the SDK validates it with."""

    sdk: FunctionTool
    tool: Tool[Any]
    model: type[BaseModel] | None
    """None for a tool the SDK knows only by its JSON schema."""

    async def problem(self, arguments: str | None, context: RunContextWrapper[Any]) -> str | None:
        """What the model is told about these arguments if they are invalid, as the SDK tells it; None if valid.

        A tool whose failure error function is None makes the SDK raise instead: so do we
        (`ModelBehaviorError`), and the run fails with its words.
        """
        error = _sdk_error(self.sdk.name, arguments or "", self.model) if self.model is not None else None
        if error is None:
            try:  # what the store keeps must be valid too (a NaN the SDK would accept cannot be digested)
                self.tool.validate_args(arguments)
            except ToolRetryError as exc:
                return exc.message
            return None
        told = await maybe_invoke_function_tool_failure_error_function(
            function_tool=self.sdk, context=context, error=error
        )
        if told is None:
            raise error
        return told


def _sdk_error(name: str, arguments: str, model: type[BaseModel]) -> ModelBehaviorError | None:
    """The error the SDK's `on_invoke_tool` raises for these arguments, in its words; None if they validate."""
    base = f"Invalid JSON input for tool {name}"
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError as exc:
        error = ModelBehaviorError(f"{base}: {arguments}")
        error.__cause__ = exc  # the SDK's default formatter reports the JSON error itself
        return error
    if not isinstance(parsed, dict):
        return ModelBehaviorError(f"{base}: expected a JSON object")
    try:
        model(**parsed)
    except ValidationError as exc:
        return ModelBehaviorError(f"{base}: {exc}")
    return None


def agents_tool(sdk: FunctionTool, policies: Mapping[str, Any] | None = None) -> AgentsTool:
    """`sdk` as ours: validated by its own pydantic model when it has one, else by its JSON schema."""
    model = _params_model(sdk)
    options: dict[str, Any] = {
        "name": sdk.name,
        "description": sdk.description,
        "strict": sdk.strict_json_schema,
        "requires_approval": sdk.needs_approval is not False,
        "allow_long_description": True,
        **(policies or {}),
    }
    if model is not None:
        tool = Tool.from_validator(
            _never_called, validator=TypeAdapter(model), json_schema=sdk.params_json_schema, **options
        )
    else:
        tool = Tool.from_schema(_never_called, json_schema=sdk.params_json_schema, **options)
    return AgentsTool(sdk, tool, model)


def _params_model(sdk: FunctionTool) -> type[BaseModel] | None:
    """The pydantic model the SDK validates `sdk`'s arguments with, when it can be had faithfully."""
    try:
        function = sdk.__wrapped__
    except AttributeError:
        return None
    if not inspect.isroutine(function):
        return None
    try:
        schema = function_schema(function, strict_json_schema=sdk.strict_json_schema)
    except Exception:
        return None
    if _shape(schema.params_json_schema) != _shape(sdk.params_json_schema):
        return None  # built with other options than we can see: its JSON schema is the safe validator
    return schema.params_pydantic_model


def _shape(schema: Any, *, names: bool = False) -> Any:
    """A JSON schema without its titles and descriptions: what validation depends on.

    `names`: `schema` maps names to schemas (`properties`, `$defs`), whatever the names are.
    """
    if isinstance(schema, dict):
        return {
            key: _shape(value, names=not names and key in _NAMED)
            for key, value in schema.items()
            if names or key not in ("title", "description")
        }
    if isinstance(schema, list):
        return [_shape(value) for value in schema]
    return schema


_NAMED = frozenset({"properties", "$defs", "definitions", "patternProperties"})
