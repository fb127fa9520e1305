"""Points 6, 7, 9 and 11: hand-written schemas, prepare hooks, definition checks, versioning."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from approvals import FunctionToolset, RunContext, Tool, ToolDefinition, ToolDefinitionError
from approvals.engines.native._tool_manager import CallRetry, CallSucceeded, ToolManager
from approvals.engines.native.toolsets import collect_tools

from .helpers import Call

SUM_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def untyped_sum(**kwargs):  # type: ignore[no-untyped-def]
    return kwargs["a"] + kwargs["b"]


def ctx(deps: Any = None) -> RunContext[Any]:
    return RunContext(deps=deps, run_id="r")


# -- 6. hand-written schemas ------------------------------------------------------------------


def test_from_schema_keeps_the_given_definition() -> None:
    t = Tool.from_schema(untyped_sum, name="sum", description="Sum two numbers.", json_schema=SUM_SCHEMA)
    assert t.tool_def.name == "sum"
    assert t.tool_def.description == "Sum two numbers."
    assert t.tool_def.parameters_json_schema == SUM_SCHEMA


@pytest.mark.anyio
async def test_from_schema_arguments_are_validated_before_the_call() -> None:
    t = Tool.from_schema(untyped_sum, name="sum", description="Sum.", json_schema=SUM_SCHEMA)
    m = ToolManager({"sum": t})
    [ok] = await m.handle_calls(ctx(), [Call("sum", '{"a": 1, "b": 2}')])
    assert isinstance(ok, CallSucceeded)
    assert ok.result.return_value == 3
    [bad] = await m.handle_calls(ctx(), [Call("sum", {"a": "1", "b": -1, "c": 0})])
    assert isinstance(bad, CallRetry)
    assert bad.message.startswith("Tool call validation failed for tool 'sum':\n")
    assert "- a: '1' is not of type 'integer'" in bad.message
    assert "- b: -1 is less than the minimum of 0" in bad.message
    assert "Additional properties are not allowed ('c' was unexpected)" in bad.message


@pytest.mark.anyio
async def test_from_schema_with_context() -> None:
    def greet(ctx: RunContext[str], **kwargs: Any) -> str:
        return f"{kwargs['greeting']}, {ctx.deps}"

    schema = {"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"]}
    t = Tool.from_schema(greet, name="greet", description=None, json_schema=schema, takes_ctx=True)
    [outcome] = await ToolManager({"greet": t}).handle_calls(ctx("ann"), [Call("greet", {"greeting": "hi"})])
    assert isinstance(outcome, CallSucceeded)
    assert outcome.result.return_value == "hi, ann"


def test_from_schema_rejects_an_invalid_schema() -> None:
    with pytest.raises(ToolDefinitionError) as err:
        Tool.from_schema(untyped_sum, name="sum", description="", json_schema={"type": "object", "required": 3})
    assert "json_schema is not a valid JSON schema" in str(err.value)
    with pytest.raises(ToolDefinitionError, match="must describe an object"):
        Tool.from_schema(untyped_sum, name="sum", description="", json_schema={"type": "string"})


# -- 7. dynamic tools -----------------------------------------------------------------------


def greet(name: str) -> str:
    """Greet someone.

    Args:
        name: Who to greet.
    """
    return f"hello {name}"


@pytest.mark.anyio
async def test_prepare_can_hide_a_tool() -> None:
    def only_for_admins(ctx: RunContext[str], tool_def: ToolDefinition) -> ToolDefinition | None:
        return tool_def if ctx.deps == "admin" else None

    m = ToolManager({"greet": Tool(greet, prepare=only_for_admins)})
    assert [d.name for d in await m.prepare(ctx("admin"))] == ["greet"]
    assert await m.prepare(ctx("guest")) == []
    [outcome] = await m.handle_calls(ctx("guest"), [Call("greet", {"name": "x"})])
    assert isinstance(outcome, CallRetry)
    assert outcome.message.startswith("Unknown tool name: 'greet'")


@pytest.mark.anyio
async def test_prepare_can_modify_a_copy_of_the_definition() -> None:
    async def describe_for(ctx: RunContext[str], tool_def: ToolDefinition) -> ToolDefinition:
        tool_def.parameters_json_schema["properties"]["name"]["description"] = f"Name of the {ctx.deps}."
        return tool_def

    t = Tool(greet, prepare=describe_for)
    [prepared] = await ToolManager({"greet": t}).prepare(ctx("human"))
    assert prepared.parameters_json_schema["properties"]["name"]["description"] == "Name of the human."
    assert t.tool_def.parameters_json_schema["properties"]["name"]["description"] == "Who to greet."


@pytest.mark.anyio
async def test_prepare_may_not_rename() -> None:
    t = Tool(greet, prepare=lambda ctx, d: dataclasses.replace(d, name="other"))
    with pytest.raises(ToolDefinitionError, match="renamed the tool"):
        await ToolManager({"greet": t}).prepare(ctx())


@pytest.mark.anyio
async def test_agent_wide_prepare_tools() -> None:
    def strict_and_filtered(ctx: RunContext[None], defs: list[ToolDefinition]) -> list[ToolDefinition]:
        return [dataclasses.replace(d, strict=True) for d in defs if d.name != "hidden"]

    def hidden() -> None:
        pass

    m = ToolManager({"greet": Tool(greet), "hidden": Tool(hidden)}, prepare_tools=strict_and_filtered)
    defs = await m.prepare(ctx())
    assert [(d.name, d.strict) for d in defs] == [("greet", True)]


# -- 9. definition-time checks ---------------------------------------------------------------


def noop() -> None:
    pass


@pytest.mark.parametrize("name", ["has space", "", "x" * 65, "dot.name", "ünïcode"])
def test_names_providers_reject(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="not accepted by providers"):
        Tool(noop, name=name)


def test_reserved_name() -> None:
    with pytest.raises(ToolDefinitionError, match="'final_result' is reserved"):
        Tool(noop, name="final_result")


def test_long_description_needs_explicit_permission() -> None:
    with pytest.raises(ToolDefinitionError, match="description is 1025 characters"):
        Tool(noop, description="x" * 1025)
    assert len(Tool(noop, description="x" * 1025, allow_long_description=True).tool_def.description) == 1025


def test_parameters_that_cannot_be_described() -> None:
    def takes_callback(callback: Callable[[int], int], n: int) -> None:
        pass

    with pytest.raises(ToolDefinitionError) as err:
        Tool(takes_callback)
    assert "parameter 'callback'" in str(err.value)
    assert "cannot be represented in JSON schema" in str(err.value)


def test_misplaced_context_beside_variadic_parameters() -> None:
    """*args and **kwargs are described now (issue 16); only the misplaced context is a problem."""

    def bad(a: int, ctx: RunContext[None], *rest: int, **more: int) -> None:
        pass

    with pytest.raises(ToolDefinitionError) as err:
        Tool(bad)
    assert err.value.problems == ["parameter 'ctx': RunContext may only be the first parameter"]


def test_all_problems_are_reported_at_once() -> None:
    def bad(a: int, ctx: RunContext[None]) -> None:
        pass

    with pytest.raises(ToolDefinitionError) as err:
        Tool(bad, name="bad name", retries=-1, timeout=0)
    assert len(err.value.problems) == 4


def test_takes_ctx_mismatch() -> None:
    def with_ctx(ctx: RunContext[None]) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="declared not to take the context"):
        Tool(with_ctx, takes_ctx=False)
    with pytest.raises(ToolDefinitionError, match="must be annotated RunContext"):
        Tool(noop, takes_ctx=True)


def test_require_parameter_descriptions() -> None:
    def half(a: int, b: int) -> None:
        """Half documented.

        Args:
            a: Documented.
        """

    with pytest.raises(ToolDefinitionError, match="parameter 'b' has no description"):
        Tool(half, require_parameter_descriptions=True)


def test_non_serializable_default() -> None:
    sentinel = object()

    def f(a: Any = sentinel) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="cannot be represented in JSON schema"):
        Tool(f)


def test_duplicate_names_in_a_toolset_and_across_toolsets() -> None:
    def other() -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'noop'"):
        FunctionToolset([noop, Tool(other, name="noop")])
    toolset = FunctionToolset([noop])
    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'noop'"):
        toolset.add_function(other, name="noop")
    with pytest.raises(ToolDefinitionError) as err:
        collect_tools([FunctionToolset([noop, other]).tools.values(), [Tool(noop), Tool(other)]])
    assert err.value.problems == ["duplicate tool name 'noop'", "duplicate tool name 'other'"]


def test_toolset_decorator_registers_and_returns_the_function() -> None:
    toolset: FunctionToolset[None] = FunctionToolset(id="ops")

    @toolset.tool
    def one() -> int:
        return 1

    @toolset.tool(requires_approval=True)
    def two() -> int:
        return 2

    assert one() == 1
    assert two() == 2
    assert toolset.tools["two"].requires_approval is True
    assert set(toolset.tools) == {"one", "two"}


# -- 11. metadata and versioning --------------------------------------------------------------


def test_metadata_is_kept_but_not_part_of_what_the_model_sees() -> None:
    a = Tool(greet, metadata={"team": "ops"})
    b = Tool(greet, metadata={"team": "billing"})
    assert a.tool_def.metadata == {"team": "ops"}
    assert a.tool_def.version == b.tool_def.version


def test_version_changes_when_the_definition_changes() -> None:
    def greet_v2(name: str, loud: bool = False) -> str:  # same name, one more parameter
        return name

    base = Tool(greet).tool_def
    assert len(base.version) == 16
    assert Tool(greet).tool_def.version == base.version
    assert Tool(greet_v2, name="greet").tool_def.version != base.version
    assert Tool(greet, description="Other words.").tool_def.version != base.version
    assert Tool(greet, strict=True).tool_def.version != base.version
