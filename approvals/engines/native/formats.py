"""Export tool definitions in the shapes providers and ecosystems expect.

One `ToolDefinition` becomes an OpenAI chat-completions tool (plain or strict), an
OpenAI Responses tool, an Anthropic tool or an MCP tool. Strict export rewrites the
schema into the subset OpenAI's strict mode accepts (see `approvals.engines.native._json_schema`).
"""

from __future__ import annotations

from typing import Any

from ...exceptions import UserError
from ._json_schema import StrictSchemaError, strict_violations, to_strict
from .tools import MAX_DESCRIPTION_LENGTH, ToolDefinition

__all__ = (
    "StrictSchemaError",
    "openai_strict_schema",
    "strict_violations",
    "to_anthropic_tool",
    "to_mcp_tool",
    "to_openai_responses_tool",
    "to_openai_tool",
)


def openai_strict_schema(definition: ToolDefinition) -> dict[str, Any]:
    """The definition's parameters rewritten for OpenAI's strict mode; `StrictSchemaError` if impossible."""
    return to_strict(definition.parameters_json_schema)


def _openai_parts(
    definition: ToolDefinition, strict: bool | None, allow_long_description: bool
) -> tuple[dict[str, Any], bool]:
    if len(definition.description) > MAX_DESCRIPTION_LENGTH and not allow_long_description:
        raise UserError(
            f"Tool {definition.name!r}: description is {len(definition.description)} characters; "
            f"OpenAI accepts at most {MAX_DESCRIPTION_LENGTH} (pass allow_long_description=True to send it anyway)"
        )
    use_strict = definition.strict if strict is None else strict
    if use_strict:
        return openai_strict_schema(definition), True
    return definition.parameters_json_schema, False


def to_openai_tool(
    definition: ToolDefinition, *, strict: bool | None = None, allow_long_description: bool = False
) -> dict[str, Any]:
    """`{"type": "function", "function": {...}}` for the chat-completions API.

    `strict` overrides the definition's own flag; strict export raises `StrictSchemaError`
    for schemas strict mode cannot express (free-form dicts, `Any`, tuples).
    """
    parameters, is_strict = _openai_parts(definition, strict, allow_long_description)
    function: dict[str, Any] = {"name": definition.name, "parameters": parameters}
    if definition.description:
        function["description"] = definition.description
    if is_strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def to_openai_responses_tool(
    definition: ToolDefinition, *, strict: bool | None = None, allow_long_description: bool = False
) -> dict[str, Any]:
    """The flat function-tool shape of OpenAI's Responses API."""
    parameters, is_strict = _openai_parts(definition, strict, allow_long_description)
    result: dict[str, Any] = {
        "type": "function",
        "name": definition.name,
        "parameters": parameters,
        "strict": is_strict,
    }
    if definition.description:
        result["description"] = definition.description
    return result


def to_anthropic_tool(definition: ToolDefinition) -> dict[str, Any]:
    """`{"name", "description", "input_schema"}` for Anthropic's Messages API (no 1024-character limit)."""
    result: dict[str, Any] = {"name": definition.name, "input_schema": definition.parameters_json_schema}
    if definition.description:
        result["description"] = definition.description
    if definition.strict:
        result["strict"] = True
    return result


def to_mcp_tool(definition: ToolDefinition) -> dict[str, Any]:
    """`{"name", "description", "inputSchema"}` as listed by a Model Context Protocol server."""
    return {
        "name": definition.name,
        "description": definition.description,
        "inputSchema": definition.parameters_json_schema,
    }
