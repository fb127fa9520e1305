"""LangGraph as a `SNAPSHOT` engine: a compiled graph's interrupts wait in our inbox and resume on our workers.

A turn runs the graph (`LangGraphAgent`) with a checkpointer seeded from the run's document
and ends with that checkpointer's latest checkpoint as the next document (`_snapshot`); the
thread id is the run id. The graph pauses where `HumanInTheLoopMiddleware` interrupts
(`_asks`); each call it asks about is validated with the tool's own schema first (`_tools`).
Refused arguments are rejected back to the model at once, in `ToolNode`'s words, and the graph
goes on within the same turn; valid calls become our `DeferredToolRequests`. The people's
verdicts resume it by interrupt id: approve, edit (`edited_action`), reject (the reason), and
respond (a person's answer in the tool's place). The history, the graph's `messages` in
LangChain's JSON (`_history`), is what the run page, the audit and the worker read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pydantic_core
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from ...calls.engines import HistoryCodec
from ...calls.tools import DeferredToolRequests
from ...calls.verdicts import Approve, EditAndApprove
from ...exceptions import ApprovalsError, ToolRetryError, UserError
from ..history import pending_tool_calls
from ..history_engine import FunctionCodec
from ..resume_rules import bind, deferred_call
from ..seam import Completed, Paused, RunEnd, RunHooks, Turn
from ..snapshot_engine import SnapshotEngine
from ..view import ToolCallPart
from . import _history
from ._asks import Ask, asks_of, resume_map
from ._history import LANGGRAPH_FORMAT, StoredMessage, unwrap
from ._snapshot import SnapshotSaver
from ._tools import retry_text
from .agent import LangGraphAgent

__all__ = ("LANGGRAPH_FORMAT", "LangGraphEngine", "LangGraphRunError", "engine")

MAX_RETRIES_PER_TURN = 25
"""Rounds of refused arguments sent back to the model in one turn before the run fails."""
_RETRY_ID = "approvals-retry-"
ASKED = "approvals_asked"
"""Key in a stored pause's AI message `additional_kwargs`: the ids of the calls it asked about (never sent on)."""


class LangGraphRunError(ApprovalsError):
    """The graph raised (a tool's error, a recursion limit): the run fails with its words."""


class LangGraphEngine(SnapshotEngine):
    """Compiled LangGraph graphs, wrapped in `LangGraphAgent`, resumed from the run's checkpoint document."""

    name = "langgraph"
    codec: HistoryCodec = FunctionCodec(
        LANGGRAPH_FORMAT,
        _history.dump_message,
        _history.load_array,
        _history.load_message,
        _history.view,
        _history.is_langchain_message,
    )

    def adopt(self, candidate: object, *, name: str | None = None) -> LangGraphAgent | None:
        """A `LangGraphAgent` as it is; a compiled graph (`create_agent`'s) wrapped, named `name` or its own name."""
        if isinstance(candidate, LangGraphAgent):
            return candidate
        if isinstance(candidate, CompiledStateGraph):
            return LangGraphAgent(candidate, name=name)
        return None

    def waiting_on(self, history: Sequence[Any]) -> list[str]:
        """The calls the last AI message's pause asked about (its `ASKED` mark) that have no answer yet."""
        start = next((i for i in range(len(history) - 1, -1, -1) if isinstance(unwrap(history[i]), AIMessage)), None)
        if start is None:
            return []
        pending = pending_tool_calls(self.codec.view(history[start:]))
        asked = unwrap(history[start]).additional_kwargs.get(ASKED)
        return [call_id for call_id in pending if not isinstance(asked, list) or call_id in asked]

    async def resume(self, agent: Any, turn: Turn, hooks: RunHooks) -> RunEnd:
        graph_agent = cast(LangGraphAgent, agent)
        saver = SnapshotSaver()
        if turn.snapshot is None:
            if turn.history or turn.prompt is None:
                raise UserError(f"Run {turn.run_id!r} has no LangGraph checkpoint to continue from")
            command: Any = {"messages": [HumanMessage(turn.prompt)]}
        else:
            notes = saver.seed(turn.run_id, turn.snapshot)
            asks = cast(list[Ask], notes.get("asks") or [])
            command = Command(resume=resume_map(asks, turn.verdicts))
            approved = [i for i, v in turn.verdicts.items() if isinstance(v, Approve | EditAndApprove)]
            if approved:
                await hooks.before_approved_calls(approved)
        graph = graph_agent.graph.copy(update={"checkpointer": saver})
        config: Any = {"configurable": {"thread_id": turn.run_id}}
        for _ in range(MAX_RETRIES_PER_TURN + 1):
            try:
                await graph.ainvoke(command, config, context=turn.deps)
            except GraphRecursionError as exc:
                raise LangGraphRunError(f"The graph reached its recursion limit: {exc}") from exc
            except ApprovalsError:
                raise
            except Exception as exc:
                raise LangGraphRunError(f"The graph raised {type(exc).__name__}: {exc}") from exc
            state = await graph.aget_state(config)
            messages: list[BaseMessage] = list(state.values.get("messages") or [])
            if not state.interrupts:
                return Completed(
                    output=_output(state.values, messages),
                    messages=_history_of(turn.history, messages, []),
                    snapshot=saver.document(turn.run_id, {"asks": []}),
                )
            asks = asks_of(state.interrupts, messages)
            requests, retries = _check(graph_agent, asks)
            if requests.approvals:
                return Paused(
                    requests=requests,
                    messages=_history_of(turn.history, messages, retries, asks),
                    snapshot=saver.document(turn.run_id, {"asks": asks}),
                )
            command = Command(resume=resume_map(asks, {}))  # every call refused: the model tries again
        raise LangGraphRunError(f"The model sent invalid arguments {MAX_RETRIES_PER_TURN} times in a row")


def _check(agent: LangGraphAgent, asks: list[Ask]) -> tuple[DeferredToolRequests, list[ToolMessage]]:
    """Validate each asked call with its tool's own schema: the valid ones wait for people, the others are retried.

    A refused call's decision is fixed in its ask (a reject with `ToolNode`'s retry text), and
    its retry is returned as a tool message for the history, so the run does not wait on it.
    """
    requests = DeferredToolRequests()
    retries: list[ToolMessage] = []
    for ask in asks:
        for asked in ask["calls"]:
            tool = agent.tools.get(asked["name"])
            if tool is None:
                raise UserError(
                    f"The graph asks about a call to {asked['name']!r}, a tool {agent.name!r} does not have"
                )
            call = ToolCallPart(tool_name=asked["name"], args=asked["args"], tool_call_id=asked["id"])
            try:
                validated = bind(call, tool, tool.validate_args(asked["args"]))
            except ToolRetryError as exc:
                if asked["allowed"] is not None and "reject" not in asked["allowed"]:
                    raise UserError(
                        f"Call {asked['id']!r} to {asked['name']!r} has invalid arguments, and its "
                        "HumanInTheLoopMiddleware does not allow rejecting it back to the model"
                    ) from exc
                text = retry_text(exc, asked["args"])
                asked["fixed"] = {"type": "reject", "message": text}
                retries.append(
                    ToolMessage(
                        content=text,
                        name=asked["name"],
                        tool_call_id=asked["id"],
                        status="error",
                        id=_RETRY_ID + asked["id"],
                    )
                )
                continue
            requests.approvals.append(deferred_call(validated, tool.tool_def, _reason(asked)))
    return requests, retries


def _reason(asked: Any) -> str | None:
    """The middleware's description of a call, unless it is its default (a prefix, the tool and its args)."""
    description = asked["description"]
    if not description or f"\n\nTool: {asked['name']}\nArgs: " in description:
        return None
    return str(description)


def _history_of(
    stored: list[Any], messages: list[BaseMessage], retries: list[ToolMessage], asks: list[Ask] | None = None
) -> list[Any]:
    """The stored history, then the graph's messages it does not hold yet, then this pause's retries.

    A pause's AI message is stored with the ids of the calls it asked about (`ASKED`): the
    others of its calls (tools that need nobody) have not run yet, and nobody decides them.

    A message is known by its id (the middleware re-sends the AI message it paused on); a
    call the history already answered with a retry is not answered again when the graph
    writes the middleware's message for it.
    """
    held = [unwrap(m) for m in stored]
    ids = {m.id for m in held}
    answered = {m.tool_call_id for m in held if isinstance(m, ToolMessage)}
    new = [m for m in messages if m.id not in ids and not (isinstance(m, ToolMessage) and m.tool_call_id in answered)]
    if asks is not None:
        asked = [call["id"] for ask in asks for call in ask["calls"]]
        new = [_marked(m, asked) if isinstance(m, AIMessage) and m is _last_ai(messages) else m for m in new]
    return [*stored, *(StoredMessage(m) for m in [*new, *retries])]


def _last_ai(messages: list[BaseMessage]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def _marked(message: AIMessage, asked: list[str]) -> AIMessage:
    """A copy of the paused AI message for the history, marked with the calls it asks people about."""
    return message.model_copy(update={"additional_kwargs": {**message.additional_kwargs, ASKED: asked}})


def _output(values: dict[str, Any], messages: list[BaseMessage]) -> Any:
    """The run's output: the agent's structured response when it has one, else its last AI message's text."""
    structured = values.get("structured_response")
    if structured is not None:
        return pydantic_core.to_jsonable_python(structured, fallback=str)
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    return str(last.text) if last is not None else None


engine = LangGraphEngine()
