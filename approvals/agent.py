"""The run loop: ask the model, run safe tool calls, and stop cleanly on calls that need a person.

`Agent.run` returns either the final output or `DeferredToolRequests`. A paused run is
continued by calling `run` again with the stored history and `DeferredToolResults`; any
`Agent` object with the same tools can do it, in this process or another. Each step
appends only its new messages, so the cost of a step does not grow with the history.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from types import NoneType
from typing import Any, Generic, cast, overload

import anyio
import pydantic_core
from typing_extensions import TypeVar

from ._history import pending_tool_calls, resolved_ids, run_id_of, tool_call_accepted_since_prompt
from ._model_output import storable_response, tool_call_ids
from ._output import OUTPUT_TOOL_NAME, OutputSchema, ended_parts
from ._run_context import RunContext
from ._tool_manager import CallDeferred, CallOutcome, CallRetry, CallSucceeded, ToolManager, ValidatedCall
from .deferred import DeferredToolCall, DeferredToolRequests, DeferredToolResults, ToolAnswered, ToolApproved
from .exceptions import (
    InvalidDeferredResults,
    ToolDefinitionError,
    ToolRetriesExceeded,
    ToolRetryError,
    UserError,
)
from .messages import (
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    dump_messages,
)
from .models import Model, ModelRequestParameters, ModelSettings, infer_model
from .models.settings import check_model_settings, forced_tool_choice, merge_model_settings
from .tools import Tool, ToolsPrepareFunc
from .toolsets import FunctionToolset, collect_tools
from .usage import UsageLimits, usage_of_run

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
        before_approved_calls: Callable[[list[str]], Awaitable[None]] | None = None,
        on_step: Callable[[list[ModelMessage]], Awaitable[None]] | None = None,
    ) -> AgentRunResult[OutputT]:
        """Run until the model answers, or until calls need a person.

        Start a run with a `prompt`; continue a paused one with its `message_history` and
        `deferred_tool_results` (one decision per pending call). Invalid decisions raise
        `InvalidDeferredResults` before anything runs. `before_approved_calls(ids)` is
        awaited once all decisions are checked and before any approved call runs, so a
        store can durably mark them as executing first. `on_step(messages)` is awaited
        before each model request with the messages added since the last call, so a store
        can append each step as it completes; the messages of the last step are only in
        the result.
        """
        chosen = infer_model(model) if model is not None else self.model
        if chosen is None:
            raise UserError("No model: pass one to Agent(...) or to run(model=...)")
        messages: list[ModelMessage] = list(message_history or [])
        run_id = run_id or run_id_of(messages) or uuid.uuid4().hex
        limits = usage_limits or self.usage_limits
        usage = usage_of_run(messages, run_id)
        ctx: RunContext[AgentDepsT] = RunContext(deps=deps, run_id=run_id, run_step=usage.requests)
        manager: ToolManager[AgentDepsT] = ToolManager(
            self.tools,
            default_retries=self.retries,
            default_timeout=self.tool_timeout,
            prepare_tools=self.prepare_tools,
        )
        new_index = len(messages)

        parts: list[ModelRequestPart] = []
        pending = pending_tool_calls(messages)
        if pending:
            if deferred_tool_results is None:
                ids = ", ".join(pending)
                raise UserError(f"The run is waiting for decisions on calls {ids}; pass deferred_tool_results")
            parts = await self._apply_decisions(
                ctx, manager, messages, pending, deferred_tool_results, limits, usage, before_approved_calls
            )
        elif deferred_tool_results is not None and deferred_tool_results.approvals:
            ids = ", ".join(map(repr, deferred_tool_results.approvals))
            raise InvalidDeferredResults(
                [f"the run has no calls waiting for decisions, but decisions were given for {ids}"]
            )
        if prompt is not None:
            if not messages and self.instructions:
                parts.append(SystemPromptPart(content=self.instructions))
            parts.append(UserPromptPart(content=prompt))
        elif not messages:
            raise UserError("A new run needs a prompt")
        elif not parts and isinstance(messages[-1], ModelResponse):
            raise UserError("The run has already ended; give a prompt to continue the conversation")
        if parts:
            messages.append(ModelRequest(parts=parts, run_id=run_id))

        settings = merge_model_settings(self.model_settings, check_model_settings(model_settings))
        output = await self._loop(ctx, chosen, manager, messages, settings, limits, usage, on_step, new_index)
        return AgentRunResult(
            output=output, run_id=run_id, usage=usage, _messages=messages, _new_message_index=new_index
        )

    async def _loop(
        self,
        ctx: RunContext[AgentDepsT],
        model: Model,
        manager: ToolManager[AgentDepsT],
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        limits: UsageLimits,
        usage: Usage,
        on_step: Callable[[list[ModelMessage]], Awaitable[None]] | None,
        delivered: int,
    ) -> OutputT | DeferredToolRequests:
        output_failures = 0
        used_ids = tool_call_ids(messages)
        while True:
            if on_step is not None and len(messages) > delivered:
                await on_step(messages[delivered:])
                delivered = len(messages)
            limits.check_before_request(usage)
            ctx = replace(ctx, run_step=ctx.run_step + 1)
            definitions = await manager.prepare(ctx)
            params = ModelRequestParameters(
                function_tools=definitions,
                output_tools=[self._output.tool_def] if self._output else [],
                allow_text_output=self._output is None,
            )
            response = await model.request(messages, self._step_settings(settings, messages), params)
            response = storable_response(response, used_ids)
            response.run_id = ctx.run_id
            usage.incr(response.usage)
            if not response.usage.requests:
                usage.requests += 1
            limits.check_tokens(usage)
            messages.append(response)

            calls = response.tool_calls
            parts: list[ModelRequestPart] = []
            if self._output is not None:
                final_calls = [c for c in calls if c.tool_name == OUTPUT_TOOL_NAME]
                calls = [c for c in calls if c.tool_name != OUTPUT_TOOL_NAME]
                if final_calls or not calls:
                    try:
                        if not final_calls:
                            raise ToolRetryError(OUTPUT_TOOL_NAME, f"Respond by calling the {OUTPUT_TOOL_NAME!r} tool.")
                        result = self._output.validate(final_calls[0])
                    except ToolRetryError as exc:
                        output_failures += 1
                        if output_failures > self.output_retries:
                            raise ToolRetriesExceeded(OUTPUT_TOOL_NAME, self.output_retries, exc.message) from None
                        call_id = final_calls[0].tool_call_id if final_calls else None
                        parts.append(
                            RetryPromptPart(content=exc.message, tool_name=OUTPUT_TOOL_NAME, tool_call_id=call_id)
                        )
                    else:
                        messages.append(
                            ModelRequest(parts=ended_parts(response.tool_calls, final_calls[0]), run_id=ctx.run_id)
                        )
                        return result  # type: ignore[no-any-return]
            elif not calls:
                return response.text  # type: ignore[return-value]

            outcomes = await manager.handle_calls(
                ctx, calls, before_execute=lambda count: limits.check_before_tool_calls(usage, count)
            )
            parts.extend(_parts_for(outcomes, usage))
            deferred = [o for o in outcomes if isinstance(o, CallDeferred)]
            if parts:
                messages.append(ModelRequest(parts=parts, run_id=ctx.run_id))
            if deferred:
                return DeferredToolRequests(approvals=[_deferred_call(manager, o) for o in deferred])

    def _step_settings(self, settings: ModelSettings | None, messages: Sequence[ModelMessage]) -> ModelSettings | None:
        """The run's settings, without a forcing `tool_choice` once a tool call has been accepted."""
        if not (settings and self.reset_tool_choice and forced_tool_choice(settings.get("tool_choice"))):
            return settings
        if not tool_call_accepted_since_prompt(messages):
            return settings
        unforced = dict(settings)
        del unforced["tool_choice"]
        return cast("ModelSettings", unforced)

    async def _apply_decisions(
        self,
        ctx: RunContext[AgentDepsT],
        manager: ToolManager[AgentDepsT],
        messages: list[ModelMessage],
        pending: dict[str, ToolCallPart],
        results: DeferredToolResults,
        limits: UsageLimits,
        usage: Usage,
        before_approved_calls: Callable[[list[str]], Awaitable[None]] | None,
    ) -> list[ModelRequestPart]:
        """Check every decision first, then run the approved calls; parts in the model's call order."""
        decisions = results.decisions()
        resolved = resolved_ids(messages)
        problems = [
            f"no decision for call {call_id!r} ({call.tool_name})"
            for call_id, call in pending.items()
            if call_id not in decisions
        ]
        for call_id in decisions:
            if call_id in resolved:
                problems.append(f"call {call_id!r} was already decided or run; it cannot be decided again")
            elif call_id not in pending:
                problems.append(f"call {call_id!r} is not one of the calls waiting for a decision")

        to_run: dict[str, ValidatedCall] = {}
        for call_id, call in pending.items():
            decision = decisions.get(call_id)
            tool = self.tools.get(call.tool_name)
            if tool is None:
                problems.append(f"call {call_id!r}: tool {call.tool_name!r} no longer exists in agent {self.name!r}")
                continue
            if not isinstance(decision, ToolApproved):
                continue
            try:
                original = tool.validate_args(call.args)
            except ToolRetryError as exc:
                problems.append(f"call {call_id!r}: its stored arguments no longer validate: {exc.message}")
                continue
            validated = manager.bind(call, tool, original)
            if decision.args_digest is not None and decision.args_digest != validated.digest:
                problems.append(f"call {call_id!r}: the approval was given for different arguments (digest mismatch)")
            if decision.override_args is not None:
                try:
                    edited = tool.validate_args(decision.override_args)
                except ToolRetryError as exc:
                    problems.append(f"call {call_id!r}: the edited arguments are invalid:\n{exc.message}")
                    continue
                validated = manager.bind(call, tool, edited)
            to_run[call_id] = validated
        if problems:
            raise InvalidDeferredResults(problems)

        limits.check_before_tool_calls(usage, len(to_run))
        if before_approved_calls is not None and to_run:
            await before_approved_calls(list(to_run))
        ran = dict(
            zip(
                to_run,
                [o for _, o in await manager.execute_many(ctx, list(to_run.values()), approved=True)],
                strict=True,
            )
        )
        parts: list[ModelRequestPart] = []
        for call_id, call in pending.items():
            decision = decisions[call_id]
            if isinstance(decision, ToolApproved):
                override = to_run[call_id].dumped_args if decision.override_args is not None else None
                parts.extend(_parts_for([ran[call_id]], usage, args_override=override))
            elif isinstance(decision, ToolAnswered):
                parts.append(
                    ToolReturnPart(
                        tool_name=call.tool_name,
                        content=_jsonable(decision.content, call.tool_name),
                        tool_call_id=call_id,
                        source="reviewer",
                    )
                )
            else:
                parts.append(ToolDeniedPart(tool_name=call.tool_name, tool_call_id=call_id, reason=decision.message))
        return parts


def _parts_for(
    outcomes: Sequence[CallOutcome], usage: Usage, *, args_override: dict[str, Any] | None = None
) -> list[ModelRequestPart]:
    """Request parts for executed and retried calls; deferred calls get none until decided."""
    parts: list[ModelRequestPart] = []
    extra: list[ModelRequestPart] = []
    for outcome in outcomes:
        if isinstance(outcome, CallSucceeded):
            usage.tool_calls += 1
            call, result = outcome.validated.call, outcome.result
            parts.append(
                ToolReturnPart(
                    tool_name=call.tool_name,
                    content=_jsonable(result.return_value, call.tool_name),
                    tool_call_id=call.tool_call_id,
                    metadata=_jsonable(result.metadata, call.tool_name),
                    args_override=args_override,
                )
            )
            if result.content is not None:
                items = [result.content] if isinstance(result.content, str) else list(result.content)
                extra.extend(
                    UserPromptPart(content=i if isinstance(i, str) else pydantic_core.to_json(i).decode())
                    for i in items
                )
        elif isinstance(outcome, CallRetry):
            call = outcome.call
            parts.append(
                RetryPromptPart(content=outcome.message, tool_name=call.tool_name, tool_call_id=call.tool_call_id)
            )
    return parts + extra


def _deferred_call(manager: ToolManager[Any], outcome: CallDeferred) -> DeferredToolCall:
    validated = outcome.validated
    definition = manager.definitions.get(validated.tool.name, validated.tool.tool_def)
    return DeferredToolCall(
        tool_name=validated.tool.name,
        tool_call_id=validated.call.tool_call_id,
        args=validated.dumped_args,
        args_digest=validated.digest,
        tool_def=definition,
        reason=outcome.reason,
        approvals_required=validated.tool.approvals_required,
        approval_ttl=validated.tool.approval_ttl,
        idempotent=validated.tool.idempotent,
    )


def _jsonable(value: Any, tool_name: str) -> Any:
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError as exc:
        raise UserError(f"Tool {tool_name!r} returned a value that cannot be turned into JSON: {exc}") from exc
