"""A LlamaIndex tool that waits for a person, with LlamaIndex's own human-in-the-loop events.

`requires_approval(tool)` wraps a tool of a LlamaIndex agent. When the model calls it, the
wrapper checks the arguments against the tool's own schema (`metadata.fn_schema`): invalid
ones raise, so LlamaIndex hands the model a tool error in the same turn and asks it again. Valid
ones wait on `ctx.wait_for_event(ApprovalVerdict, waiter_event=ApprovalRequest(...))`: the
workflow writes the request to its event stream and can be serialized (`Context.to_dict`) and
stopped there. The engine (`engine.py`) restores the context later and sends the verdict, and the
wrapper runs the tool (approved, maybe with edited arguments) or tells the model what a person
said instead (denied, answered).

This module does not use `from __future__ import annotations`: LlamaIndex finds the parameter
that receives the workflow `Context` by comparing the real annotation with `Context`.
"""

import contextvars
import json
from typing import Any, Literal

from llama_index.core.tools import AsyncBaseTool, BaseTool, FunctionTool, ToolOutput, adapt_to_async_tool
from pydantic import BaseModel, TypeAdapter
from workflows import Context
from workflows.events import HumanResponseEvent, InputRequiredEvent

from ...exceptions import ToolRetryError, UserError
from ..native.tools import Tool

__all__ = (
    "DENIED_PREFIX",
    "ApprovalRequest",
    "ApprovalTool",
    "ApprovalVerdict",
    "InvalidToolArguments",
    "as_our_tool",
    "requires_approval",
    "run_deps",
)

DENIED_PREFIX = "Denied by a person: "
"""How the model reads a denial: LlamaIndex hands a tool's output to the model as text only."""
CONTEXT_PARAM = "approvals_context"
"""The parameter LlamaIndex fills with the workflow `Context` (named so no tool's own argument clashes)."""

_deps: contextvars.ContextVar[Any] = contextvars.ContextVar("approvals_llamaindex_deps", default=None)


def run_deps() -> Any:
    """The deps of the run a tool is called in (the worker builds them from the run's stored deps).

    They are not kept in the workflow's state, so they may hold clients and connections, and are
    never stored with the run's snapshot.
    """
    return _deps.get()


class ApprovalRequest(InputRequiredEvent):
    """Written to the workflow's event stream when a call waits for a person: its validated arguments."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]


class ApprovalVerdict(HumanResponseEvent):
    """A person's verdict on one call, sent into the restored workflow."""

    tool_call_id: str
    verdict: Literal["approve", "deny", "answer"]
    args: dict[str, Any] | None = None
    """Approve: the arguments to run with (edited or not)."""
    text: str = ""
    """Deny: the reason; answer: the tool's result, as the model reads it."""


class InvalidToolArguments(ValueError):
    """The model's arguments fail the tool's own schema: LlamaIndex tells the model, which tries again."""


class ApprovalTool(FunctionTool):
    """A LlamaIndex tool whose calls wait for a person (`requires_approval`); the policies are ours."""

    def __init__(
        self,
        tool: BaseTool,
        *,
        reason: str | None = None,
        approvals_required: int = 1,
        approval_ttl: float | None = None,
        idempotent: bool = False,
    ) -> None:
        super().__init__(async_fn=_gate, metadata=tool.metadata)
        self.wrapped: AsyncBaseTool = adapt_to_async_tool(tool)
        self.reason = reason
        self.validator = as_our_tool(
            tool, approvals_required=approvals_required, approval_ttl=approval_ttl, idempotent=idempotent
        )

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        raise UserError(f"tool {self.metadata.name!r} waits for a person: run it in a LlamaIndex agent's workflow")

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Validate the model's arguments, wait for a verdict, then run the tool or say what the person said."""
        ctx = kwargs.pop(CONTEXT_PARAM, None)
        if not isinstance(ctx, Context):
            raise UserError(f"tool {self.metadata.name!r} waits for a person: run it in a LlamaIndex agent's workflow")
        name = self.metadata.get_name()
        validated = self._validated(kwargs)
        call_id = _current_tool_call_id(name)
        verdict = await ctx.wait_for_event(
            ApprovalVerdict,
            waiter_event=ApprovalRequest(
                tool_call_id=call_id, tool_name=name, args=self.validator.dump_args(validated)
            ),
            waiter_id=f"approvals:{call_id}",
            requirements={"tool_call_id": call_id},
            timeout=None,
        )
        if verdict.verdict == "deny":
            return ToolOutput(content=DENIED_PREFIX + verdict.text, tool_name=name, raw_input=kwargs)
        if verdict.verdict == "answer":
            return ToolOutput(content=verdict.text, tool_name=name, raw_input=kwargs, raw_output=verdict.text)
        if verdict.args is not None:
            validated = self._validated(verdict.args)
        arguments = dict(validated)
        inner = self.wrapped
        if isinstance(inner, FunctionTool) and inner.requires_context and inner.ctx_param_name:
            arguments[inner.ctx_param_name] = ctx
        return await inner.acall(**arguments)

    def _validated(self, arguments: dict[str, Any]) -> Any:
        try:
            return self.validator.validate_args(arguments)
        except ToolRetryError as exc:
            raise InvalidToolArguments(exc.message) from None


async def _gate(approvals_context: Context, **kwargs: Any) -> None:
    """Never called (`ApprovalTool.acall` replaces it): its signature makes LlamaIndex pass the `Context`."""
    raise AssertionError("ApprovalTool.acall handles its calls")


def requires_approval(
    tool: BaseTool | Any,
    *,
    reason: str | None = None,
    approvals_required: int = 1,
    approval_ttl: float | None = None,
    idempotent: bool = False,
) -> ApprovalTool:
    """`tool` (a LlamaIndex tool, or a function as `FunctionTool.from_defaults` takes it) waiting for a person.

    `reason` is shown in the inbox; `approvals_required` distinct people approve it,
    `approval_ttl` seconds before it expires as a denial; `idempotent` lets a crash mid-call retry it.
    """
    if isinstance(tool, ApprovalTool):
        return tool
    if not isinstance(tool, BaseTool):
        if not callable(tool):
            raise UserError(f"requires_approval takes a LlamaIndex tool or a function, not {type(tool).__name__}")
        tool = FunctionTool.from_defaults(tool)
    return ApprovalTool(
        tool, reason=reason, approvals_required=approvals_required, approval_ttl=approval_ttl, idempotent=idempotent
    )


def as_our_tool(
    tool: BaseTool, *, approvals_required: int = 1, approval_ttl: float | None = None, idempotent: bool = False
) -> Tool[Any]:
    """A LlamaIndex tool as ours: validated by its own `fn_schema`, described as LlamaIndex shows it to the model."""
    metadata = tool.metadata
    schema = metadata.fn_schema
    options: dict[str, Any] = {
        "name": metadata.get_name(),
        "description": metadata.description,
        "json_schema": metadata.get_parameters_dict(),
        "approvals_required": approvals_required,
        "approval_ttl": approval_ttl,
        "idempotent": idempotent,
        "requires_approval": isinstance(tool, ApprovalTool),
        "allow_long_description": True,
    }
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return Tool.from_validator(_never_called, validator=TypeAdapter(schema), **options)
    return Tool.from_schema(_never_called, **options)


def _never_called(**_: Any) -> None:
    raise AssertionError("LlamaIndex runs its own tools")


def _current_tool_call_id(tool_name: str) -> str:
    """The id of the call being run: the `ToolCall` event of the LlamaIndex step that calls the tool.

    LlamaIndex does not hand a tool its call id; the step's event does, read through the
    workflows runtime's step context (llama-index-workflows 2.x).
    """
    from workflows.runtime.types.results import StepWorkerStateContextVar

    try:
        event = StepWorkerStateContextVar.get().event
    except LookupError:
        event = None
    call_id = getattr(event, "tool_id", None)
    if not isinstance(call_id, str) or not call_id:
        raise UserError(f"tool {tool_name!r} waits for a person: it runs only as a LlamaIndex agent's tool call")
    return call_id


def as_text(content: Any) -> str:
    """A person's answer as the model reads it."""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, sort_keys=True)
