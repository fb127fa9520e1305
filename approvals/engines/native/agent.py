"""The front door: an `Agent` holds the model, tools and defaults; `run` starts or continues a run.

`Agent.run` returns either the final output or `DeferredToolRequests`. A paused run is
continued by calling `run` again with the stored history and `DeferredToolResults`; any
`Agent` object with the same tools can do it, in this process or another. The run itself
(the loop, the decisions) is `approvals._run.AgentRun`; this module only builds it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import NoneType
from typing import Any, Generic, overload

import anyio
from typing_extensions import TypeVar

from ...exceptions import ToolDefinitionError, UserError
from ...logs import with_run
from ..history import pending_tool_calls, run_id_of
from ._output import OutputSchema
from ._persistence import NO_PERSISTENCE, RunPersistence
from ._run import AgentRun
from ._run_context import RunContext
from ._tool_manager import ToolManager
from .deferred import DeferredToolRequests, DeferredToolResults
from .messages import ModelRequest, ModelResponse, Usage, dump_messages
from .models import Model, ModelSettings, infer_model
from .models.settings import check_model_settings, merge_model_settings
from .tools import Tool, ToolsPrepareFunc
from .toolsets import FunctionToolset, collect_tools
from .usage import RunTotals, UsageLimits

__all__ = ("Agent", "AgentRunResult", "UsageLimits", "pending_tool_calls")

AgentDepsT = TypeVar("AgentDepsT", default=None)
OutputT = TypeVar("OutputT", default=str)
ModelMessage = ModelRequest | ModelResponse


@dataclass(kw_only=True)
class AgentRunResult(Generic[OutputT]):
    """The outcome of `Agent.run`: the output, or the calls waiting for a person."""

    output: OutputT | DeferredToolRequests
    run_id: str
    usage: Usage
    totals: RunTotals = field(repr=False)
    """The totals of `all_messages()` (`usage` among them), for a caller that keeps them with the history."""
    _messages: list[ModelMessage] = field(repr=False)
    _new_message_index: int = field(repr=False)

    @property
    def paused(self) -> bool:
        """True when the run stopped for approvals."""
        return isinstance(self.output, DeferredToolRequests)

    def all_messages(self) -> list[ModelMessage]:
        """The whole history, including what came before this call to `run`."""
        return list(self._messages)

    def new_messages(self) -> list[ModelMessage]:
        """Only the messages this call to `run` added: what a store appends."""
        return self._messages[self._new_message_index :]

    def all_messages_json(self) -> bytes:
        return dump_messages(self._messages)

    def new_messages_json(self) -> bytes:
        return dump_messages(self.new_messages())


class Agent(Generic[AgentDepsT, OutputT]):
    """An LLM agent whose risky tool calls wait for a person."""

    def __init__(
        self,
        model: Model | str | None = None,
        *,
        name: str | None = None,
        instructions: str | None = None,
        deps_type: type[AgentDepsT] = NoneType,  # type: ignore[assignment]
        output_type: type[OutputT] = str,  # type: ignore[assignment]
        tools: Sequence[Tool[Any] | Callable[..., Any]] = (),
        toolsets: Sequence[FunctionToolset[Any]] = (),
        retries: int = 1,
        output_retries: int | None = None,
        tool_timeout: float | None = None,
        prepare_tools: ToolsPrepareFunc | None = None,
        usage_limits: UsageLimits | None = None,
        model_settings: ModelSettings | None = None,
        reset_tool_choice: bool = True,
    ) -> None:
        """Configure the agent.

        Args:
            model: A `Model`, or a name such as "openai:gpt-4o-mini", "anthropic:claude-..." or "test".
            name: How the agent is known to the store and workers; defaults to "agent".
            instructions: System prompt sent at the start of each run.
            deps_type: Type of the run's dependencies (for type checkers and documentation).
            output_type: `str` for a text answer, or a type the model fills in through a `final_result` tool.
            tools: Functions or `Tool`s; functions are wrapped automatically.
            toolsets: Groups of tools.
            retries: Default number of failures in a row a tool may have.
            output_retries: Failures in a row allowed for the structured output; defaults to `retries`.
            tool_timeout: Default seconds a tool call may take; None for no limit.
            prepare_tools: Hook to change or filter all tool definitions before each request.
            usage_limits: Default caps per run.
            model_settings: Default provider settings (max_tokens, temperature, tool_choice, ...).
            reset_tool_choice: Once a tool call of the run has been accepted (run, paused or
                answered), stop forcing a `tool_choice` of "required" or a tool's name, so the
                model can answer instead of calling the tool forever.
        """
        self.model = infer_model(model) if model is not None else None
        self.name = name or "agent"
        self.instructions = instructions
        self.deps_type = deps_type
        self.output_type = output_type
        self.retries = retries
        self.output_retries = retries if output_retries is None else output_retries
        self.tool_timeout = tool_timeout
        self.prepare_tools = prepare_tools
        self.usage_limits = usage_limits or UsageLimits()
        self.model_settings = check_model_settings(model_settings, where=f"model_settings of agent {self.name!r}")
        self.reset_tool_choice = reset_tool_choice
        self._own_tools = FunctionToolset[AgentDepsT](tools)
        self._toolsets = list(toolsets)
        self._output = None if output_type is str else OutputSchema(output_type)
        self._tools_cache: dict[str, Tool[Any]] | None = None
        self.tools  # noqa: B018 - check for duplicate names now, not at the first run

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """All tools by name: the agent's own and its toolsets'."""
        if self._tools_cache is None:
            groups = [self._own_tools.tools.values(), *(ts.tools.values() for ts in self._toolsets)]
            self._tools_cache = collect_tools(groups, f"agent {self.name!r}")
        return self._tools_cache

    # -- registering tools -------------------------------------------------------------------

    @overload
    def tool(self, function: Callable[..., Any], /) -> Callable[..., Any]: ...
    @overload
    def tool(self, /, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
    def tool(self, function: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a tool whose first parameter is `RunContext[Deps]`; `@agent.tool` or `@agent.tool(...)`."""
        return self._register(function, takes_ctx=True, options=options)

    @overload
    def tool_plain(self, function: Callable[..., Any], /) -> Callable[..., Any]: ...
    @overload
    def tool_plain(self, /, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
    def tool_plain(self, function: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a tool that does not take the run context."""
        return self._register(function, takes_ctx=False, options=options)

    def _register(self, function: Callable[..., Any] | None, *, takes_ctx: bool, options: dict[str, Any]) -> Any:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            new_tool = Tool(fn, takes_ctx=takes_ctx, **options)
            if new_tool.name in self.tools:
                raise ToolDefinitionError(f"agent {self.name!r}", [f"duplicate tool name {new_tool.name!r}"])
            self._own_tools.add_tool(new_tool)
            self._tools_cache = None
            return fn

        return register(function) if function is not None else register

    # -- running ------------------------------------------------------------------------------

    def run_sync(self, prompt: str | None = None, **kwargs: Any) -> AgentRunResult[OutputT]:
        """`run`, from synchronous code."""

        if kwargs.get("model") is not None:
            kwargs["model"] = infer_model(kwargs["model"])
        chosen: Model | None = kwargs.get("model") or self.model

        async def main() -> AgentRunResult[OutputT]:
            try:
                return await self.run(prompt, **kwargs)
            finally:  # connections belong to this event loop, which ends here
                if chosen is not None:
                    await chosen.close()

        return anyio.run(main)

    async def run(
        self,
        prompt: str | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        message_history: Sequence[ModelMessage] | None = None,
        deferred_tool_results: DeferredToolResults | None = None,
        model: Model | str | None = None,
        model_settings: ModelSettings | None = None,
        usage_limits: UsageLimits | None = None,
        run_id: str | None = None,
        persistence: RunPersistence | None = None,
        history_totals: RunTotals | None = None,
    ) -> AgentRunResult[OutputT]:
        """Run until the model answers, or until calls need a person.

        Start a run with a `prompt`; continue a paused one with its `message_history` and
        `deferred_tool_results` (one decision per pending call). Invalid decisions raise
        `InvalidDeferredResults` before anything runs. A store passes its `persistence`
        to be told, durably, before approved calls run and as each step completes. A caller
        that keeps a history's `RunTotals` (a worker holding the run) passes them as
        `history_totals`, so they are not counted again from the whole history; the run
        takes them over and counts on in them (`AgentRunResult.totals`).
        """
        chosen = infer_model(model) if model is not None else self.model
        if chosen is None:
            raise UserError("No model: pass one to Agent(...) or to run(model=...)")
        messages: list[ModelMessage] = list(message_history or [])
        run_id = run_id or run_id_of(messages) or uuid.uuid4().hex
        if history_totals is None:
            totals = RunTotals.of(messages, run_id)
        elif history_totals.run_id != run_id or history_totals.count != len(messages):
            raise UserError(
                f"history_totals count {history_totals.count} messages of run {history_totals.run_id!r}, "
                f"not the {len(messages)} of run {run_id!r}"
            )
        else:
            totals = history_totals
        run: AgentRun[AgentDepsT, OutputT] = AgentRun(
            ctx=RunContext(deps=deps, run_id=run_id, run_step=totals.usage.requests),
            model=chosen,
            manager=ToolManager(
                self.tools,
                default_retries=self.retries,
                default_timeout=self.tool_timeout,
                prepare_tools=self.prepare_tools,
            ),
            messages=messages,
            totals=totals,
            settings=merge_model_settings(self.model_settings, check_model_settings(model_settings)),
            limits=usage_limits or self.usage_limits,
            output=self._output,
            output_retries=self.output_retries,
            reset_tool_choice=self.reset_tool_choice,
            instructions=self.instructions,
            agent_name=self.name,
            persistence=persistence or NO_PERSISTENCE,
        )
        with with_run(run_id):  # the run's log lines name it, in a worker or not
            output = await run.run(prompt, deferred_tool_results)
        return AgentRunResult(
            output=output,
            run_id=run_id,
            usage=totals.usage,
            totals=totals,
            _messages=messages,
            _new_message_index=run.new_index,
        )
