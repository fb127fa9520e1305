"""Handling one step's tool calls: validate, decide approval, execute, count retries.

The run loop hands the model's tool calls to a `ToolManager` and gets back one outcome per
call, in the model's order: a result, a retry prompt for the model, or a deferral waiting
for a person. The manager owns the per-run retry counters and the timeout and
concurrency rules, so the run loop stays a loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeAlias

import anyio

from ... import tracing
from ...exceptions import (
    ApprovalRequired,
    ModelRetry,
    ToolDefinitionError,
    ToolExecutionError,
    ToolRetriesExceeded,
    ToolRetryError,
    UserError,
)
from ..resume_rules import ToolCallLike, ValidatedCall, bind
from ._run_context import AgentDepsT, RunContext
from .tools import INHERIT, Tool, ToolDefinition, ToolReturn, ToolsPrepareFunc


@dataclass(kw_only=True)
class CallSucceeded:
    """The tool ran and returned."""

    validated: ValidatedCall
    result: ToolReturn


@dataclass(kw_only=True)
class CallRetry:
    """The model must try again; `message` tells it why."""

    call: ToolCallLike
    message: str


@dataclass(kw_only=True)
class CallDeferred:
    """The call waits for a person's decision."""

    validated: ValidatedCall
    reason: str | None = None


CallOutcome: TypeAlias = CallSucceeded | CallRetry | CallDeferred


class ToolManager(Generic[AgentDepsT]):
    """Runs one run's tool calls; keep one per run so retry counts carry across steps."""

    def __init__(
        self,
        tools: Mapping[str, Tool[Any]],
        *,
        default_retries: int = 1,
        default_timeout: float | None = None,
        prepare_tools: ToolsPrepareFunc | None = None,
    ) -> None:
        self.tools = dict(tools)
        self.default_retries = default_retries
        self.default_timeout = default_timeout
        self.prepare_tools = prepare_tools
        self.failures: dict[str, int] = {}
        """Failures in a row per tool name in this run."""
        self.definitions: dict[str, ToolDefinition] = {name: t.tool_def for name, t in self.tools.items()}
        """Definitions visible to the model in the current step."""

    async def prepare(self, ctx: RunContext[AgentDepsT]) -> list[ToolDefinition]:
        """Run the prepare hooks and return the definitions the model sees this step."""
        visible: list[ToolDefinition] = []
        for name, item in self.tools.items():
            definition = await item.prepare_definition(replace(ctx, tool_name=name, retry=self.failures.get(name, 0)))
            if definition is not None:
                visible.append(definition)
        if self.prepare_tools is not None:
            prepared = self.prepare_tools(ctx, visible)
            if inspect.isawaitable(prepared):
                prepared = await prepared
            visible = list(prepared or [])
            unknown = [d.name for d in visible if d.name not in self.tools]
            if unknown:
                raise ToolDefinitionError(
                    "prepare_tools result", [f"unknown tool {n!r} (renaming is not allowed)" for n in unknown]
                )
        self.definitions = {d.name: d for d in visible}
        return visible

    def max_retries(self, tool: Tool[Any]) -> int:
        """The tool's own retry budget, or the agent's default."""
        return self.default_retries if tool.max_retries is None else tool.max_retries

    def timeout(self, tool: Tool[Any]) -> float | None:
        """The tool's own timeout wins; INHERIT falls back to the agent's default."""
        return self.default_timeout if tool.timeout is INHERIT else tool.timeout

    def call_context(
        self, ctx: RunContext[AgentDepsT], call: ToolCallLike, *, approved: bool = False
    ) -> RunContext[AgentDepsT]:
        """The context one tool call sees."""
        tool = self.tools.get(call.tool_name)
        return replace(
            ctx,
            tool_name=call.tool_name,
            tool_call_id=call.tool_call_id,
            retry=self.failures.get(call.tool_name, 0),
            max_retries=self.max_retries(tool) if tool else self.default_retries,
            approved=approved,
        )

    def validate(self, call: ToolCallLike) -> ValidatedCall | CallRetry:
        """Validate one call against the tool the model was shown; bad calls become retries."""
        definition = self.definitions.get(call.tool_name)
        tool = self.tools.get(call.tool_name)
        if definition is None or tool is None:
            names = ", ".join(sorted(self.definitions)) or "none"
            return self._retry(call, f"Unknown tool name: {call.tool_name!r}. Available tools: {names}.")
        try:
            args = tool.validate_args(call.args, strict_nulls=definition.strict is True)
        except ToolRetryError as exc:
            return self._retry(call, exc.message)
        return self.bind(call, tool, args)

    def bind(self, call: ToolCallLike, tool: Tool[Any], args: Any) -> ValidatedCall:
        """Pair a call with already validated arguments and their digest."""
        return bind(call, tool, args)

    async def handle_calls(
        self,
        ctx: RunContext[AgentDepsT],
        calls: Sequence[ToolCallLike],
        *,
        before_execute: Callable[[int], None] | None = None,
    ) -> list[CallOutcome]:
        """Validate all calls, defer those needing approval, execute the rest; outcomes in call order.

        `before_execute(n)` is called with the number of calls about to run, so a caller can
        enforce a limit (by raising) before anything executes.
        """
        outcomes: list[CallOutcome | None] = [None] * len(calls)
        runnable: list[tuple[int, ValidatedCall]] = []
        for index, call in enumerate(calls):
            checked = self.validate(call)
            if isinstance(checked, CallRetry):
                outcomes[index] = checked
            elif await self._needs_approval(ctx, checked):
                outcomes[index] = CallDeferred(validated=checked)
            else:
                runnable.append((index, checked))
        if before_execute is not None:
            before_execute(len(runnable))
        for index, outcome in await self.execute_many(ctx, [v for _, v in runnable]):
            outcomes[runnable[index][0]] = outcome
        return [o for o in outcomes if o is not None]

    async def execute_many(
        self, ctx: RunContext[AgentDepsT], calls: Sequence[ValidatedCall], *, approved: bool = False
    ) -> list[tuple[int, CallOutcome]]:
        """Execute calls in order; neighbours run concurrently, a `sequential` tool runs alone."""
        results: list[tuple[int, CallOutcome]] = []

        async def run_one(index: int, validated: ValidatedCall) -> None:
            results.append((index, await self.execute(ctx, validated, approved=approved)))

        batch: list[tuple[int, ValidatedCall]] = []

        async def flush() -> None:
            if len(batch) == 1:
                await run_one(*batch[0])
            elif batch:
                async with anyio.create_task_group() as group:
                    for index, validated in batch:
                        group.start_soon(run_one, index, validated)
            batch.clear()

        for index, validated in enumerate(calls):
            if self.definitions.get(validated.tool.name, validated.tool.tool_def).sequential:
                await flush()
                await run_one(index, validated)
            else:
                batch.append((index, validated))
        await flush()
        return sorted(results, key=lambda pair: pair[0])

    async def execute(
        self, ctx: RunContext[AgentDepsT], validated: ValidatedCall, *, approved: bool = False
    ) -> CallOutcome:
        """Run one validated call with its timeout, mapping retries and deferrals to outcomes."""
        tool, call = validated.tool, validated.call
        timeout = self.timeout(tool)
        call_ctx = self.call_context(ctx, call, approved=approved)
        result: ToolReturn | None = None
        try:
            with anyio.move_on_after(timeout), tracing.executing_tool(tool.name, call.tool_call_id):
                result = await tool.call(call_ctx, validated.args)
        except ModelRetry as exc:
            return self._retry(call, exc.message)
        except ApprovalRequired as exc:
            if approved:
                raise UserError(
                    f"Tool {tool.name!r} raised ApprovalRequired for a call that was already approved; "
                    "check ctx.approved before asking again"
                ) from exc
            return CallDeferred(validated=validated, reason=exc.reason)
        except Exception as exc:
            raise ToolExecutionError(tool.name, call.tool_call_id, exc) from exc
        if result is None:  # only a timeout leaves it unset: Tool.call always returns a ToolReturn
            return self._retry(call, f"Timed out after {timeout:g} seconds.")
        self.failures.pop(tool.name, None)
        return CallSucceeded(validated=validated, result=result)

    async def _needs_approval(self, ctx: RunContext[AgentDepsT], validated: ValidatedCall) -> bool:
        try:
            return await validated.tool.needs_approval(self.call_context(ctx, validated.call), validated.args)
        except Exception as exc:
            raise ToolExecutionError(validated.tool.name, validated.call.tool_call_id, exc) from exc

    def _retry(self, call: ToolCallLike, message: str) -> CallRetry:
        tool = self.tools.get(call.tool_name)
        limit = self.max_retries(tool) if tool else self.default_retries
        count = self.failures.get(call.tool_name, 0) + 1
        if count > limit:
            raise ToolRetriesExceeded(call.tool_name, limit, message)
        self.failures[call.tool_name] = count
        return CallRetry(call=call, message=message)
