"""The OpenAI Agents SDK as an engine: its runs pause on its own approvals and resume from its own `RunState`.

Registered by import path in `approvals.engines` (as "openai_agents", format `OPENAI_AGENTS_FORMAT`).
A turn runs the SDK's loop (`Runner.run`) from the prompt, or from the run's stored
`RunState` (`_snapshot`) with the people's verdicts applied the SDK's way:

- Approve: `RunState.approve`; the SDK runs the call (once: `before_approved_calls` first).
- Deny: `RunState.reject(rejection_message=...)`, which the SDK sends the model verbatim as the
  call's output: our denial wording, the person's reason last.
- Answer: `RunState.reject(rejection_message=answer)`: the model reads the person's answer as
  the call's output and the tool never runs. The SDK has no other way to give a call an
  output without running it; the history's note tells the run page it was a person's answer.
- EditAndApprove: refused (`EditNotSupported`). The SDK runs an approved call with the
  arguments the model sent, and offers no way to change them.

Calls that need approval are validated as the SDK would validate them when it runs them
(`_tools`) before anyone is asked: an invalid one is rejected with the message the SDK gives a
bad call, and the run goes on in the same turn, so the model reads it and tries again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

import agents
import pydantic_core
from agents import FunctionTool, RunContextWrapper, Runner, RunResult, RunState, ToolApprovalItem
from agents.exceptions import AgentsException

from ...calls.engines import HistoryCodec
from ...calls.tools import DeferredToolRequests
from ...calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from ...exceptions import ApprovalsError, InvalidDeferredResults, ToolRetryError, UserError
from ..history_engine import FunctionCodec
from ..native.tools import args_digest
from ..resume_rules import bind, deferred_call
from ..seam import Completed, Paused, RunEnd, RunHooks, Turn
from ..snapshot_engine import SnapshotEngine
from ..view import ToolCallPart
from . import _history
from ._history import OPENAI_AGENTS_FORMAT, AgentsItem
from ._snapshot import dump_state, load_state
from ._tools import AgentsTool, agents_tool
from .agent import OpenAIAgentsAgent

__all__ = (
    "CANNOT_EDIT",
    "OPENAI_AGENTS_FORMAT",
    "EditNotSupported",
    "OpenAIAgentsEngine",
    "OpenAIAgentsRunError",
    "engine",
)

CANNOT_EDIT = (
    "The OpenAI Agents SDK runs an approved call with the arguments its model sent "
    "(RunState.approve takes no arguments), so a call cannot run with edited ones."
)
_SDK_ERROR_PREFIX = "An error occurred while "
"""How the SDK's default tool error function starts: a tool that failed, or arguments it refused."""


class OpenAIAgentsRunError(ApprovalsError):
    """The SDK ended the run with an error (a model's, a guardrail's, too many turns): the run fails with its words."""


class EditNotSupported(ApprovalsError):
    """A reviewer edited a call's arguments: the OpenAI Agents SDK can only run a call as the model sent it."""


class OpenAIAgentsEngine(SnapshotEngine):
    """OpenAI Agents agents, wrapped in `OpenAIAgentsAgent`; their state is the SDK's `RunState` (a snapshot)."""

    name = "openai_agents"
    cannot_edit: str | None = CANNOT_EDIT
    """Read by `approvals.calls.engines.edit_refusal`: the inbox offers approve, deny and answer, never an edit."""
    codec: HistoryCodec = FunctionCodec(
        OPENAI_AGENTS_FORMAT,
        _history.dump_message,
        _history.load_array,
        _history.load_message,
        _history.as_view,
        _history.is_agents_item,
    )

    def adopt(self, candidate: object, *, name: str | None = None) -> OpenAIAgentsAgent | None:
        """An `OpenAIAgentsAgent` as it is; an `agents.Agent` wrapped (named `name`, else its own name)."""
        if isinstance(candidate, OpenAIAgentsAgent):
            return candidate
        if isinstance(candidate, agents.Agent):
            return OpenAIAgentsAgent(candidate, name=name)
        return None

    async def resume(self, agent: Any, turn: Turn, hooks: RunHooks) -> RunEnd:
        wrapped = cast(OpenAIAgentsAgent, agent)
        notes: dict[str, dict[str, Any]] = {}  # by call id: how this turn settled a call without its tool
        context = RunContextWrapper(context=turn.deps)
        try:
            if turn.snapshot is None:
                if turn.history or turn.verdicts:
                    raise UserError(
                        f"Run {turn.run_id!r} has a stored history but no stored OpenAI Agents state to resume from"
                    )
                result = await Runner.run(
                    wrapped.agent, turn.prompt or "", context=turn.deps, run_config=wrapped.run_config
                )
            else:
                state = await load_state(wrapped.agent, turn.snapshot, turn.deps)
                approved = _apply_verdicts(wrapped, state, turn.verdicts, notes)
                if approved:
                    await hooks.before_approved_calls(approved)
                result = await Runner.run(wrapped.agent, state, run_config=wrapped.run_config)
            while True:
                state = result.to_state()
                if not await _send_back_invalid(wrapped, state, result.interruptions, context, notes):
                    break
                result = await Runner.run(wrapped.agent, state, run_config=wrapped.run_config)
        except AgentsException as exc:
            raise OpenAIAgentsRunError(f"{type(exc).__name__}: {exc}") from exc
        messages = _history_of(turn.history, result, notes)
        snapshot = dump_state(state)
        if result.interruptions:
            requests = DeferredToolRequests(approvals=[_waiting(wrapped, item) for item in result.interruptions])
            return Paused(requests=requests, messages=messages, snapshot=snapshot)
        output = pydantic_core.to_jsonable_python(result.final_output, fallback=str)
        return Completed(output=output, messages=messages, snapshot=snapshot)


def _tool_of(wrapped: OpenAIAgentsAgent, item: ToolApprovalItem) -> AgentsTool:
    """The function tool an interrupted call is for, of the agent that made it (the run's, or one it handed off to);
    a `UserError` for an approval we cannot ask a person about."""
    name, owner = item.tool_name or "", item.agent
    tool = None
    if owner is wrapped.agent:
        tool = wrapped.function_tools.get(name)
    elif owner is not None:
        sdk = next((t for t in owner.tools if isinstance(t, FunctionTool) and t.name == name), None)
        tool = agents_tool(sdk) if sdk is not None else None
    if tool is None or item.call_id is None or item.tool_namespace:
        raise UserError(
            f"The OpenAI Agents run asks approval of {item.qualified_name or item.name!r} (call {item.call_id!r}), "
            f"which is no function tool of the agent that called it: only function tools can wait for a person"
        )
    return tool


def _validated(tool: AgentsTool, item: ToolApprovalItem) -> Any:
    call = ToolCallPart(tool_name=tool.sdk.name, args=item.arguments, tool_call_id=str(item.call_id))
    return bind(call, tool.tool, tool.tool.validate_args(item.arguments))


def _waiting(wrapped: OpenAIAgentsAgent, item: ToolApprovalItem) -> Any:
    """A call the run waits on, with its validated arguments, their digest and the definition the model saw."""
    tool = _tool_of(wrapped, item)
    return deferred_call(_validated(tool, item), tool.tool.tool_def, None)


async def _send_back_invalid(
    wrapped: OpenAIAgentsAgent,
    state: RunState[Any, Any],
    interruptions: Iterable[ToolApprovalItem],
    context: RunContextWrapper[Any],
    notes: dict[str, dict[str, Any]],
) -> bool:
    """Reject each interrupted call whose arguments are invalid, with what the SDK tells a bad call; whether any was."""
    sent = False
    for item in interruptions:
        problem = await _tool_of(wrapped, item).problem(item.arguments, context)
        if problem is not None:
            state.reject(item, rejection_message=problem)
            notes[str(item.call_id)] = {"outcome": "retry"}
            sent = True
    return sent


def _apply_verdicts(
    wrapped: OpenAIAgentsAgent,
    state: RunState[Any, Any],
    verdicts: Mapping[str, Verdict],
    notes: dict[str, dict[str, Any]],
) -> list[str]:
    """Every verdict checked first, then applied to `state` the SDK's way; the ids of the approved calls."""
    pending = {str(item.call_id): item for item in state.get_interruptions()}
    problems = [f"no decision for call {call_id!r}" for call_id in pending if call_id not in verdicts]
    problems += [
        f"call {call_id!r} is not one of the calls waiting for a decision"
        for call_id in verdicts
        if call_id not in pending
    ]
    for call_id, verdict in verdicts.items():
        item = pending.get(call_id)
        if item is None:
            continue
        if isinstance(verdict, EditAndApprove):
            raise EditNotSupported(
                f"call {call_id!r} to {item.tool_name!r} was approved with edited arguments, which the OpenAI Agents "
                "SDK cannot run: it runs an approved call with the arguments the model sent. Nothing ran; "
                "deny the call with the arguments you want in the reason, or answer it in the tool's place."
            )
        if isinstance(verdict, Approve) and verdict.args_digest is not None:
            try:
                dumped = _validated(_tool_of(wrapped, item), item).dumped_args
            except ToolRetryError as exc:
                problems.append(f"call {call_id!r}: its stored arguments no longer validate: {exc.message}")
                continue
            if args_digest(dumped) != verdict.args_digest:
                problems.append(f"call {call_id!r}: the approval was given for different arguments (digest mismatch)")
    if problems:
        raise InvalidDeferredResults(problems)
    approved = []
    for call_id, verdict in verdicts.items():
        item = pending[call_id]
        if isinstance(verdict, Approve):
            state.approve(item)
            approved.append(call_id)
        elif isinstance(verdict, Deny):
            state.reject(item, rejection_message=_denial(str(item.tool_name), verdict.reason))
            notes[call_id] = {"outcome": "denied", "reason": verdict.reason}
        elif isinstance(verdict, Answer):
            content = pydantic_core.to_jsonable_python(verdict.content, fallback=str)
            told = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            state.reject(item, rejection_message=told)
            notes[call_id] = {"outcome": "answered", "answer": content}
    return approved


def _denial(tool_name: str, reason: str) -> str:
    """What the model reads for a denied call: that a person refused it, then their reason, as they wrote it."""
    return (
        f"DENIED: a person reviewed this call to {tool_name!r} and did not allow it. The call was not executed. "
        "Do not repeat the same call; take the reason into account, and tell the user if you cannot continue "
        f"without it. Reason: {reason}"
    )


def _history_of(stored: list[Any], result: RunResult, notes: Mapping[str, dict[str, Any]]) -> list[Any]:
    """The whole history: the stored items, then the SDK's items this turn added, each output noted.

    `OpenAIAgentsRunError` if the SDK's items do not begin with the stored ones (it rewrote them).
    """
    items = result.to_input_list()
    if len(items) < len(stored) or any(
        _comparable(item) != _comparable(kept.item) for item, kept in zip(items, stored, strict=False)
    ):
        raise OpenAIAgentsRunError("The OpenAI Agents SDK rewrote the stored history instead of adding to it")
    names = {kept.call_id: kept.item.get("name") for kept in stored if kept.item.get("type") == "function_call"}
    added: list[Any] = []
    for raw in items[len(stored) :]:
        item = cast(dict[str, Any], pydantic_core.to_jsonable_python(raw, fallback=str))
        note = None
        if item.get("type") == "function_call":
            names[item.get("call_id")] = item.get("name")
        elif item.get("type") == "function_call_output":
            call_id = str(item.get("call_id"))
            note = {"tool": names.get(call_id) or "", **notes.get(call_id, {"outcome": _outcome(item)})}
        added.append(AgentsItem(item=item, note=note))
    return [*stored, *added]


def _outcome(item: dict[str, Any]) -> str:
    """A tool's own output: its result, or, in the SDK's default words for a failed call, one to redo."""
    output = item.get("output")
    return "retry" if isinstance(output, str) and output.startswith(_SDK_ERROR_PREFIX) else "result"


def _comparable(item: Any) -> Any:
    """An item as JSON with what identifies it, so a stored item and the SDK's copy of it compare equal."""
    data = pydantic_core.to_jsonable_python(item, fallback=str)
    if not isinstance(data, dict):
        return data
    return {key: data.get(key) for key in ("type", "role", "call_id", "name", "arguments", "output", "content")}


engine = OpenAIAgentsEngine()
