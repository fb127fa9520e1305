"""A LangChain tool as the core sees it: its arguments validated as LangChain validates them, its definition as bound.

`HumanInTheLoopMiddleware` pauses in `after_model`, before `ToolNode` validates anything, so
the engine validates each paused call itself, with the schema the model was shown
(`BaseTool.tool_call_schema`: the tool's `args_schema` without the arguments LangGraph injects,
such as `ToolRuntime`). It is the schema the middleware itself checks an edit against in its
`per_call` mode, and a reviewer's edit here is checked by the same validator. Arguments it
refuses go back to the model in `ToolNode`'s own words (`TOOL_INVOCATION_ERROR_TEMPLATE`).
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt.tool_node import TOOL_INVOCATION_ERROR_TEMPLATE
from pydantic import BaseModel, TypeAdapter

from ...exceptions import ToolRetryError, UserError
from ..native.tools import Tool

__all__ = ("POLICY_KEY", "as_tool", "retry_text")

POLICY_KEY = "approvals"
"""Key in a LangChain tool's `metadata` for our policies, e.g. `{"approvals_required": 2, "idempotent": True}`."""
_POLICIES = ("approvals_required", "approval_ttl", "idempotent")


def as_tool(tool: BaseTool) -> Tool[Any]:
    """`tool` as ours: validated by its `tool_call_schema`, described as LangChain binds it to a model; never run."""
    bound = convert_to_openai_tool(tool)["function"]
    parameters: dict[str, Any] = bound.get("parameters") or {"type": "object", "properties": {}}
    description = str(bound.get("description") or tool.description or "")
    policies = _policies(tool.name, tool.metadata)
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return Tool.from_validator(
            _never_called,
            validator=cast(Any, TypeAdapter(schema)),
            json_schema=parameters,
            name=tool.name,
            description=description,
            metadata=tool.metadata,
            allow_long_description=True,
            **policies,
        )
    return Tool.from_schema(  # a tool described by a JSON schema: LangChain passes its arguments as they are
        _never_called,
        name=tool.name,
        description=description,
        json_schema=parameters,
        metadata=tool.metadata,
        allow_long_description=True,
        **policies,
    )


def retry_text(error: ToolRetryError, args: Any) -> str:
    """What `ToolNode` tells the model of arguments its tool refused, for our `ToolRetryError`."""
    lines = "\n".join(f"{location}: {message}" if location else message for location, message in error.errors)
    return TOOL_INVOCATION_ERROR_TEMPLATE.format(tool_name=error.tool_name, tool_kwargs=args, error=lines)


def _never_called(**_: Any) -> None:
    raise AssertionError("LangGraph runs its own tools")


def _policies(name: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Our per-tool policies from `metadata["approvals"]`; an unknown key is a mistake said at once."""
    given = (metadata or {}).get(POLICY_KEY) or {}
    if not isinstance(given, dict) or set(given) - set(_POLICIES):
        raise UserError(f"tool {name!r}: metadata[{POLICY_KEY!r}] takes only {', '.join(_POLICIES)}, not {given!r}")
    return {"idempotent": False, "approvals_required": 1, "approval_ttl": None, **given}
