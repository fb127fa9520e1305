"""A pydantic-ai `Agent` run by our store, inbox and worker.

`PydanticAIAgent` wraps the agent so a registry, a worker and the web app treat it as one of
ours. The run itself stays pydantic-ai's: it pauses on pydantic-ai's own `DeferredToolRequests`
(`requires_approval`, `ApprovalRequiredToolset`, `ApprovalRequired`, `CallDeferred`, external
tools), its history is stored in pydantic-ai's JSON, and it continues with pydantic-ai's
`DeferredToolResults`. What we add is what a stored run needs: each pending call validated and
digested as a row, decisions checked by the same rules as for our agents
(`approvals.engines.resume_rules`), approved calls committed as executing before pydantic-ai runs them,
and each step stored before the next model request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import pydantic_ai
from pydantic_ai import messages as pai
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models import Model as PydanticAIModel
from pydantic_ai.models import ModelRequestParameters, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition as PydanticAIToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ExternalToolset, FunctionToolset

from ...calls.tools import DeferredToolRequests, ToolDefinition
from ...exceptions import ApprovalsError, ToolRetryError, UserError
from ..history import since_last_response
from ..native.agent import AgentRunResult
from ..native.deferred import DeferredToolResults, ToolAnswered, ToolApproved, ToolDenied
from ..native.tools import Tool
from ..native.usage import RunTotals
from ..resume_rules import bind, deferred_call, settle
from ..seam import NO_HOOKS, RunHooks
from ..view import ToolCallPart, Usage
from ._history import ANSWERED_MARK, as_approvals_messages

__all__ = ("POLICY_KEY", "PydanticAIAgent", "PydanticAIRunError")

POLICY_KEY = "approvals"
"""Key in a pydantic-ai tool's `metadata` for our policies, e.g. `{"approvals_required": 2, "idempotent": True}`."""
_POLICIES = ("approvals_required", "approval_ttl", "idempotent")
DepsFactory = Callable[[Any], Any | Awaitable[Any]]


class PydanticAIRunError(ApprovalsError):
    """pydantic-ai ended the run with an error (a model's, a usage limit's): the run fails with its words."""


class PydanticAIAgent:
    """A pydantic-ai agent whose deferred tool calls wait in our inbox and resume on our workers."""

    def __init__(
        self,
        agent: pydantic_ai.Agent[Any, Any],
        *,
        name: str | None = None,
        deps_factory: DepsFactory | None = None,
    ) -> None:
        """Wrap `agent`; `name` (else the agent's own, else "agent") is how runs and workers find it."""
        if not isinstance(agent, pydantic_ai.Agent):
            raise UserError(f"PydanticAIAgent wraps a pydantic_ai.Agent, not {type(agent).__name__}")
        self.agent = agent
        self.name = name or agent.name or "agent"
        self.deps_factory = deps_factory
        self._tools: dict[str, Tool[Any]] | None = None
        self._output_type = _with_deferred(agent.output_type)
        self.tools  # noqa: B018 - a tool whose policies are wrong fails at registration, not at its first call

    def __repr__(self) -> str:
        return f"PydanticAIAgent(name={self.name!r})"

    @property
    def model(self) -> PydanticAIModel | str | None:
        return self.agent.model

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The agent's tools as ours, by name: they validate pending calls and reviewers' edits."""
        if self._tools is None:
            tools: dict[str, Tool[Any]] = {}
            for toolset in _leaf_toolsets(self.agent):
                if isinstance(toolset, FunctionToolset):
                    for pai_tool in toolset.tools.values():
                        tools[pai_tool.name] = _function_tool(pai_tool)
                elif isinstance(toolset, ExternalToolset):
                    for definition in toolset.tool_defs:
                        tools[definition.name] = _schema_tool(definition)
            self._tools = tools
        return self._tools

    async def run(
        self,
        prompt: str | None = None,
        *,
        deps: Any = None,
        message_history: Sequence[Any] | None = None,
        deferred_tool_results: DeferredToolResults | None = None,
        model: PydanticAIModel | str | None = None,
        run_id: str | None = None,
        persistence: RunHooks | None = None,
        history_totals: RunTotals | None = None,
    ) -> AgentRunResult[Any]:
        """Start the run with `prompt`, or continue it with its history and our decisions; pause or finish.

        Decisions are checked before anything runs (`InvalidDeferredResults`), the approved
        calls are announced to `persistence` before pydantic-ai runs them, and each step is
        handed to it before the next model request. `history_totals` is accepted for the
        worker's sake; pydantic-ai counts its own usage.
        """
        history = list(message_history or [])
        run_id = run_id or uuid.uuid4().hex
        keeper = persistence or NO_HOOKS
        results, approved = self.pydantic_ai_results(history, deferred_tool_results)
        if approved:
            await keeper.before_approved_calls(approved)
        chosen = model or self.agent.model
        if chosen is None:
            raise UserError(f"pydantic-ai agent {self.name!r} has no model: give it one")
        recorder = _StepRecorder(infer_model(chosen), keeper, delivered=len(history))
        try:
            async with self.agent.iter(
                prompt,
                output_type=self._output_type,
                message_history=history or None,
                deferred_tool_results=results,
                model=recorder,
                deps=deps,
            ) as agent_run:
                recorder.state = agent_run.ctx.state
                async for _node in agent_run:
                    pass
        except AgentRunError as exc:
            raise PydanticAIRunError(f"{type(exc).__name__}: {exc}") from exc
        result = agent_run.result
        assert result is not None, "an agent run that ended has a result"
        messages = result.all_messages()
        _check_extends(history, messages)
        output = result.output
        if isinstance(output, pydantic_ai.DeferredToolRequests):
            output = self.pending_calls(output, recorder.definitions)
        usage = result.usage
        return AgentRunResult(
            output=output,
            run_id=run_id,
            usage=Usage(
                requests=usage.requests,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                tool_calls=usage.tool_calls,
            ),
            totals=RunTotals(run_id=run_id, count=len(messages)),
            _messages=cast(list[Any], messages),
            _new_message_index=len(history),
        )

    def pydantic_ai_results(
        self, history: list[Any], results: DeferredToolResults | None
    ) -> tuple[pydantic_ai.DeferredToolResults | None, list[str]]:
        """Our decisions as pydantic-ai's, once they pass our rules; and the ids of the calls to run."""
        tail = as_approvals_messages(since_last_response(history))
        settled = settle(tail, results, tools=self.tools, agent_name=self.name, undescribed=_UNDESCRIBED)
        if settled is None:
            return None, []
        decisions, to_run = settled.decisions, settled.to_run
        approvals: dict[str, bool | pydantic_ai.ToolApproved | pydantic_ai.ToolDenied] = {}
        calls: dict[str, Any] = {}
        for call_id, decision in decisions.items():
            if isinstance(decision, ToolApproved):
                edited = to_run[call_id].dumped_args if decision.override_args is not None else None
                approvals[call_id] = pydantic_ai.ToolApproved(override_args=edited)
            elif isinstance(decision, ToolDenied):
                approvals[call_id] = pydantic_ai.ToolDenied(decision.message)
            elif isinstance(decision, ToolAnswered):
                calls[call_id] = pai.ToolReturn(decision.content, metadata={ANSWERED_MARK: True})
        return pydantic_ai.DeferredToolResults(approvals=approvals, calls=calls), list(to_run)

    def pending_calls(
        self,
        requests: pydantic_ai.DeferredToolRequests,
        seen: Mapping[str, PydanticAIToolDefinition] | None = None,
    ) -> DeferredToolRequests:
        """pydantic-ai's deferred calls as ours: validated arguments, digest, and the definition the
        model saw (`seen`, by tool name; else the tool's own)."""
        seen = seen or {}
        waiting = []
        for part in [*requests.approvals, *requests.calls]:
            definition = seen.get(part.tool_name)
            tool = self.tools.get(part.tool_name) or (_schema_tool(definition) if definition else None)
            if tool is None:
                raise UserError(f"pydantic-ai deferred a call to {part.tool_name!r}, a tool this agent cannot describe")
            call = ToolCallPart(tool_name=part.tool_name, args=part.args, tool_call_id=part.tool_call_id)
            try:
                validated = bind(call, tool, tool.validate_args(part.args))
            except ToolRetryError as exc:
                raise UserError(f"call {part.tool_call_id!r} to {part.tool_name!r}: {exc.message}") from exc
            shown = _our_definition(definition) if definition is not None else tool.tool_def
            reason = _reason(requests.kind(part.tool_call_id), requests.metadata.get(part.tool_call_id))
            waiting.append(deferred_call(validated, shown, reason))
        return DeferredToolRequests(approvals=waiting)


class _StepRecorder(WrapperModel):
    """The agent's model, wrapped: before each request, the steps since the last one go to the store.

    It also keeps the tool definitions each request showed the model, which pending calls store.
    """

    def __init__(self, wrapped: PydanticAIModel, keeper: RunHooks, *, delivered: int) -> None:
        super().__init__(wrapped)
        self.keeper = keeper
        self.delivered = delivered
        self.state: Any = None
        """The run's graph state: pydantic-ai may replace its `message_history` list, so it is read each time."""
        self.definitions: dict[str, PydanticAIToolDefinition] = {}

    async def request(
        self,
        messages: list[pai.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> pai.ModelResponse:
        for definition in model_request_parameters.function_tools:
            self.definitions[definition.name] = definition
        history: list[pai.ModelMessage] = self.state.message_history if self.state is not None else messages
        if len(history) > self.delivered:
            await self.keeper.on_step(cast(list[Any], history[self.delivered :]))
            self.delivered = len(history)
        return await super().request(messages, model_settings, model_request_parameters)


def _function_tool(pai_tool: pydantic_ai.Tool[Any]) -> Tool[Any]:
    """A pydantic-ai function tool as ours, validated by its own validator: edits validate exactly as its calls do."""
    return Tool.from_validator(
        pai_tool.function,
        validator=pai_tool.function_schema.validator,
        json_schema=pai_tool.tool_def.parameters_json_schema,
        name=pai_tool.name,
        description=pai_tool.description,
        takes_ctx=pai_tool.takes_ctx,
        retries=pai_tool.max_retries,
        timeout=None,
        requires_approval=pai_tool.requires_approval,
        strict=pai_tool.strict,
        sequential=pai_tool.sequential,
        metadata=pai_tool.metadata,
        allow_long_description=True,
        **_policies(pai_tool.name, pai_tool.metadata),
    )


def _schema_tool(definition: PydanticAIToolDefinition) -> Tool[Any]:
    """A tool known only by its definition (an external one): validated with `jsonschema`, never run by us."""
    return Tool.from_schema(
        _never_called,
        name=definition.name,
        description=definition.description,
        json_schema=definition.parameters_json_schema,
        strict=definition.strict,
        metadata=definition.metadata,
        allow_long_description=True,
        **_policies(definition.name, definition.metadata),
    )


def _never_called(**_: Any) -> None:
    raise AssertionError("pydantic-ai runs its own tools")


_UNDESCRIBED = Tool.from_schema(
    _never_called, name="undescribed", description=None, json_schema={"type": "object"}, allow_long_description=True
)
"""Stands in for a tool known only while a run runs (a dynamic toolset, an MCP server's): its calls
were validated by pydantic-ai when it deferred them; approving, denying and answering need no more."""


def _policies(name: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Our per-tool policies from `metadata["approvals"]`; an unknown key is a mistake said at once."""
    given = (metadata or {}).get(POLICY_KEY) or {}
    if not isinstance(given, dict) or set(given) - set(_POLICIES):
        raise UserError(f"tool {name!r}: metadata[{POLICY_KEY!r}] takes only {', '.join(_POLICIES)}, not {given!r}")
    return {"idempotent": False, "approvals_required": 1, "approval_ttl": None, **given}


def _our_definition(definition: PydanticAIToolDefinition) -> ToolDefinition:
    return ToolDefinition(
        name=definition.name,
        description=definition.description or "",
        parameters_json_schema=definition.parameters_json_schema,
        strict=definition.strict,
        sequential=definition.sequential,
        metadata=definition.metadata,
    )


def _reason(kind: str, metadata: dict[str, Any] | None) -> str | None:
    """What the inbox says of a call: the tool's own reason, or what answering it means."""
    given = (metadata or {}).get("reason")
    if isinstance(given, str) and given:
        return given
    if kind == "question":
        return "The agent asks a person: answer in the tool's place."
    if kind == "external":
        return "The tool left this call to be done outside the agent: answer with its result, or deny it."
    return None


def _check_extends(stored: list[Any], messages: list[pai.ModelMessage]) -> None:
    """pydantic-ai added to the stored history; `PydanticAIRunError` if it changed what is stored.

    A history ending in a request (a worker died while the model answered it) is sent again:
    pydantic-ai restamps that request, which is the same request as long as its parts are.
    """
    if not stored:
        return
    last, again = stored[-1], messages[len(stored) - 1] if len(messages) >= len(stored) else None
    same = again == last or (
        isinstance(last, pai.ModelRequest) and isinstance(again, pai.ModelRequest) and again.parts == last.parts
    )
    if not same:
        raise PydanticAIRunError("pydantic-ai rewrote the stored history instead of adding to it; nothing stored")


def _with_deferred(output_type: Any) -> Any:
    """The agent's output type, allowing `DeferredToolRequests` (without it pydantic-ai cannot pause)."""
    spec = (
        list(output_type) if isinstance(output_type, Sequence) and not isinstance(output_type, str) else [output_type]
    )
    if pydantic_ai.DeferredToolRequests in spec:
        return output_type
    return [*spec, pydantic_ai.DeferredToolRequests]


def _leaf_toolsets(agent: pydantic_ai.Agent[Any, Any]) -> list[AbstractToolset[Any]]:
    leaves: list[AbstractToolset[Any]] = []
    for toolset in agent.toolsets:
        toolset.apply(leaves.append)
    return leaves
