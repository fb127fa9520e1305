"""One call to `Agent.run`: settle the decisions, then ask the model and run its tool calls until it answers or waits.

`AgentRun` holds what changes while a run moves on (the context, the history and its totals)
next to what stays fixed for it (the model, the tools, the settings, the limits), so each
step is a method that reads them instead of a function taking a dozen arguments. Each step
appends only its new messages, so the cost of a step does not grow with the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, cast

import pydantic_core
from typing_extensions import TypeVar

from ... import tracing
from ...exceptions import ToolRetriesExceeded, ToolRetryError, UserError
from ..history import tool_call_accepted_since_prompt
from ..resume_rules import Settlement, deferred_call, settle
from ._model_output import storable_response
from ._output import OUTPUT_TOOL_NAME, OutputSchema, ended_parts
from ._persistence import NO_PERSISTENCE, RunPersistence
from ._run_context import RunContext
from ._tool_manager import CallDeferred, CallOutcome, CallRetry, CallSucceeded, ToolManager
from .deferred import (
    DeferredToolCall,
    DeferredToolRequests,
    DeferredToolResults,
    ToolAnswered,
    ToolApproved,
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
)
from .models import Model, ModelRequestParameters, ModelSettings
from .models.settings import forced_tool_choice
from .usage import RunTotals, UsageLimits

__all__ = ("AgentRun",)

AgentDepsT = TypeVar("AgentDepsT", default=None)
OutputT = TypeVar("OutputT", default=str)
ModelMessage = ModelRequest | ModelResponse


@dataclass(kw_only=True, eq=False)
class AgentRun(Generic[AgentDepsT, OutputT]):
    """A run in progress: its state, and the steps that move it on."""

    ctx: RunContext[AgentDepsT]
    """The context tools see; `run_step` moves on with each model request."""
    model: Model
    manager: ToolManager[AgentDepsT]
    """The run's tools, with their retry counts across steps."""
    messages: list[ModelMessage]
    """The whole history; this run appends to it (`_add`)."""
    totals: RunTotals
    """The totals of `messages`, counted on as each message is added."""
    settings: ModelSettings | None
    limits: UsageLimits
    output: OutputSchema | None
    """The structured output type; None for a text answer."""
    output_retries: int
    """Invalid outputs in a row the model may send before the run fails."""
    reset_tool_choice: bool
    """Stop forcing a `tool_choice` once a tool call was accepted, so the model can answer."""
    instructions: str | None
    """The system prompt a new run starts with."""
    agent_name: str
    """How problems with decisions name the agent."""
    persistence: RunPersistence = NO_PERSISTENCE
    """Told when approved calls are about to run and when steps complete, so a store can keep up."""
    new_index: int = field(init=False)
    """Where the messages this run adds begin."""
    _delivered: int = field(init=False)
    _output_failures: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.new_index = self._delivered = len(self.messages)

    @property
    def usage(self) -> Usage:
        """Usage so far, counting what the history already used."""
        return self.totals.usage

    async def run(
        self, prompt: str | None, deferred_tool_results: DeferredToolResults | None
    ) -> OutputT | DeferredToolRequests:
        """Settle the pending calls and add the prompt, then loop until the model answers or calls wait."""
        await self._begin(prompt, deferred_tool_results)
        return await self._loop()

    async def _begin(self, prompt: str | None, results: DeferredToolResults | None) -> None:
        """The first request of this call: the decided calls' results, then the prompt."""
        settled = settle(self.messages, results, tools=self.manager.tools, agent_name=self.agent_name)
        parts = await self._apply_decisions(settled) if settled is not None else []
        if prompt is not None:
            if not self.messages and self.instructions:
                parts.append(SystemPromptPart(content=self.instructions))
            parts.append(UserPromptPart(content=prompt))
        elif not self.messages:
            raise UserError("A new run needs a prompt")
        elif not parts and isinstance(self.messages[-1], ModelResponse):
            raise UserError("The run has already ended; give a prompt to continue the conversation")
        if parts:
            self._append(parts)

    async def _loop(self) -> OutputT | DeferredToolRequests:
        """Hand finished steps to the persistence, ask the model, run its calls; until it answers or calls wait."""
        while True:
            if len(self.messages) > self._delivered:
                await self.persistence.on_step(self.messages[self._delivered :])
                self._delivered = len(self.messages)
            response = await self._request()
            calls = response.tool_calls
            parts: list[ModelRequestPart] = []
            if self.output is not None:
                final_calls = [c for c in calls if c.tool_name == OUTPUT_TOOL_NAME]
                calls = [c for c in calls if c.tool_name != OUTPUT_TOOL_NAME]
                if final_calls or not calls:
                    try:
                        result = self._validate_output(self.output, final_calls)
                    except ToolRetryError as exc:
                        parts.append(self._output_retry(exc, final_calls))
                    else:
                        self._append(ended_parts(response.tool_calls, final_calls[0]))
                        return result  # type: ignore[no-any-return]
            elif not calls:
                return response.text  # type: ignore[return-value]

            outcomes = await self.manager.handle_calls(self.ctx, calls, before_execute=self._check_tool_calls)
            parts.extend(_parts_for(outcomes))
            deferred = [o for o in outcomes if isinstance(o, CallDeferred)]
            if parts:
                self._append(parts)
            if deferred:
                return DeferredToolRequests(approvals=[self._deferred_call(o) for o in deferred])

    async def _request(self) -> ModelResponse:
        """Ask the model once; its response is made storable, counted and appended."""
        self.limits.check_before_request(self.usage)
        self.ctx = replace(self.ctx, run_step=self.ctx.run_step + 1)
        definitions = await self.manager.prepare(self.ctx)
        params = ModelRequestParameters(
            function_tools=definitions,
            output_tools=[self.output.tool_def] if self.output else [],
            allow_text_output=self.output is None,
        )
        with tracing.requesting_model(self.model.model_name, self.model.system) as span:
            response = await self.model.request(self.messages, self._step_settings(), params)
            tracing.model_answered(span, response)
        response = storable_response(response, self.totals.tool_call_ids)
        response.run_id = self.ctx.run_id
        self._add(response)
        self.limits.check_tokens(self.usage)
        return response

    def _append(self, parts: list[ModelRequestPart]) -> None:
        self._add(ModelRequest(parts=parts, run_id=self.ctx.run_id))

    def _deferred_call(self, outcome: CallDeferred) -> DeferredToolCall:
        validated = outcome.validated
        definition = self.manager.definitions.get(validated.tool.name, validated.tool.tool_def)
        return deferred_call(validated, definition, outcome.reason)

    def _add(self, message: ModelMessage) -> None:
        """Append to the history and count it: the totals always match the messages."""
        self.totals.add(message)
        self.messages.append(message)

    def _check_tool_calls(self, count: int) -> None:
        self.limits.check_before_tool_calls(self.usage, count)

    def _step_settings(self) -> ModelSettings | None:
        """The run's settings, without a forcing `tool_choice` once a tool call has been accepted."""
        settings = self.settings
        if not (settings and self.reset_tool_choice and forced_tool_choice(settings.get("tool_choice"))):
            return settings
        if not tool_call_accepted_since_prompt(self.messages):
            return settings
        unforced = dict(settings)
        del unforced["tool_choice"]
        return cast("ModelSettings", unforced)

    @staticmethod
    def _validate_output(output: OutputSchema, final_calls: Sequence[ToolCallPart]) -> Any:
        if not final_calls:
            raise ToolRetryError(OUTPUT_TOOL_NAME, f"Respond by calling the {OUTPUT_TOOL_NAME!r} tool.")
        return output.validate(final_calls[0])

    def _output_retry(self, exc: ToolRetryError, final_calls: Sequence[ToolCallPart]) -> RetryPromptPart:
        """Tell the model what to fix in its output, or fail the run once its retries are used up."""
        self._output_failures += 1
        if self._output_failures > self.output_retries:
            raise ToolRetriesExceeded(OUTPUT_TOOL_NAME, self.output_retries, exc.message) from None
        call_id = final_calls[0].tool_call_id if final_calls else None
        return RetryPromptPart(content=exc.message, tool_name=OUTPUT_TOOL_NAME, tool_call_id=call_id)

    async def _apply_decisions(self, settled: Settlement) -> list[ModelRequestPart]:
        """Run the approved calls of the checked decisions; parts in the model's call order."""
        pending, decisions, to_run = settled.pending, settled.decisions, settled.to_run
        self._check_tool_calls(len(to_run))
        if to_run:
            await self.persistence.before_approved_calls(list(to_run))
        ran = dict(
            zip(
                to_run,
                [o for _, o in await self.manager.execute_many(self.ctx, list(to_run.values()), approved=True)],
                strict=True,
            )
        )
        parts: list[ModelRequestPart] = []
        for call_id, call in pending.items():
            decision = decisions[call_id]
            if isinstance(decision, ToolApproved):
                override = to_run[call_id].dumped_args if decision.override_args is not None else None
                parts.extend(_parts_for([ran[call_id]], args_override=override))
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
    outcomes: Sequence[CallOutcome], *, args_override: dict[str, Any] | None = None
) -> list[ModelRequestPart]:
    """Request parts for executed and retried calls; deferred calls get none until decided."""
    parts: list[ModelRequestPart] = []
    extra: list[ModelRequestPart] = []
    for outcome in outcomes:
        if isinstance(outcome, CallSucceeded):
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


def _jsonable(value: Any, tool_name: str) -> Any:
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError as exc:
        raise UserError(f"Tool {tool_name!r} returned a value that cannot be turned into JSON: {exc}") from exc
