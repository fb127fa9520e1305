"""A structured output type, offered to the model as the `final_result` tool.

Validation failures go back to the model as a retry prompt, like a tool's; a value that
passes pydantic but holds infinity or NaN is refused too, since it could not be stored as
JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic_core
from pydantic import TypeAdapter

from ...calls.canonical import non_finite_path
from ...exceptions import ToolRetryError
from .messages import ModelRequestPart, ToolCallPart, ToolReturnPart
from .tools import OUTPUT_TOOL_NAME, ToolDefinition

__all__ = ("OUTPUT_TOOL_NAME", "OutputSchema", "ended_parts")


class OutputSchema:
    """The output type's validator and the `final_result` tool definition the model sees."""

    def __init__(self, output_type: Any) -> None:
        self.adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        schema = self.adapter.json_schema()
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            schema = {
                "type": "object",
                "properties": {"response": schema},
                "required": ["response"],
                "additionalProperties": False,
            }
        self.tool_def = ToolDefinition(
            name=OUTPUT_TOOL_NAME,
            description="Call this with the final response; it ends the conversation.",
            parameters_json_schema=schema,
        )

    def validate(self, call: ToolCallPart) -> Any:
        """The output the call carries; `ToolRetryError` tells the model what to fix."""
        try:
            args: Any = call.args
            if self.wrapped:
                result = self.adapter.validate_python(call.args_as_dict().get("response"))
            elif isinstance(args, str):
                result = self.adapter.validate_json(args or "{}")
            else:
                result = self.adapter.validate_python(args or {})
        except pydantic_core.ValidationError as exc:
            lines = "\n".join(
                f"- {'.'.join(map(str, e['loc'])) or 'output'}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ToolRetryError(
                OUTPUT_TOOL_NAME, f"The final result is invalid:\n{lines}\nFix it and try again."
            ) from None
        path = non_finite_path(self.adapter.dump_python(result, mode="json"))
        if path is not None:
            where = ".".join(map(str, path)) or "output"
            raise ToolRetryError(
                OUTPUT_TOOL_NAME,
                f"The final result is invalid:\n- {where}: Input should be a finite number (not infinity or NaN)\n"
                "Fix it and try again.",
            )
        return result


def ended_parts(calls: Sequence[ToolCallPart], final: ToolCallPart) -> list[ModelRequestPart]:
    """Results for every call of the step that ended the run; other calls were not run."""
    return [
        ToolReturnPart(
            tool_name=call.tool_name,
            content="Final result processed."
            if call is final
            else "Not executed: the run ended with its final result.",
            tool_call_id=call.tool_call_id,
            source="not-run",
        )
        for call in calls
    ]
