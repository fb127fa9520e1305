"""One turn of a LlamaIndex run: start or restore its workflow, send the verdicts, run to a pause or the end.

The workflow runs as LlamaIndex runs it; the turn watches its event stream. Each assistant
message (`AgentOutput`) and tool result (`ToolCallResult`) becomes a stored message; each
`ApprovalRequest` is a call that waits. When the workflow goes idle (`WorkflowIdleEvent`:
nothing left to do but wait) with calls waiting, the context is serialized and the run
stopped: that document is the run's snapshot, and the turn ends `Paused`.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import aclosing, contextmanager
from typing import Any

from llama_index.core.agent.workflow import AgentOutput, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemory
from pydantic.warnings import PydanticDeprecationWarning
from workflows.events import Event, StopEvent, WorkflowIdleEvent
from workflows.handler import WorkflowHandler

from ...calls.tools import DeferredToolRequests
from ...calls.verdicts import Verdict
from ...exceptions import ApprovalsError, UserError
from ..history import pending_tool_calls
from ..native.deferred import ToolAnswered, ToolApproved, ToolDenied, results_from_verdicts
from ..resume_rules import bind, deferred_call, settle
from ..seam import Completed, Paused, RunEnd, RunHooks, Turn
from ..view import ModelResponse, ToolCallPart
from ._approval import ApprovalRequest, ApprovalVerdict, _deps, as_text
from ._history import Outcome, StoredMessage, as_view, tool_message, unwrap
from ._snapshot import memory_of, restore, snapshot
from .agent import LlamaIndexAgent, LlamaIndexWorkflow

__all__ = ("LlamaIndexRunError", "run_turn")


class LlamaIndexRunError(ApprovalsError):
    """LlamaIndex ended the run with an error (a tool's outside a call, the model's, max iterations)."""


async def run_turn(agent: LlamaIndexAgent, turn: Turn, hooks: RunHooks) -> RunEnd:
    token = _deps.set(turn.deps)
    try:
        return await _Turn(agent, turn).run(hooks)
    finally:
        _deps.reset(token)


class _Turn:
    def __init__(self, agent: LlamaIndexAgent, turn: Turn) -> None:
        self.agent = agent
        self.turn = turn
        self.messages: list[Any] = list(turn.history)
        self.verdicts: dict[str, ApprovalVerdict] = {}
        self.asked: dict[str, ApprovalRequest] = {}
        self.settled: set[str] = set()
        self.unsent: list[ApprovalVerdict] = []
        self.results: dict[str, StoredMessage] = {}
        """Tool results of the current step, stored once the step's results are all in (`_flush`)."""

    async def run(self, hooks: RunHooks) -> RunEnd:
        workflow = self.agent.workflow
        if self.turn.snapshot is None:
            if self.turn.history or self.turn.prompt is None:
                raise UserError(f"run {self.turn.run_id}: a LlamaIndex run needs its prompt or its stored state")
            if self.agent.system_prompt:
                self.messages.append(
                    StoredMessage(ChatMessage(role=MessageRole.SYSTEM, content=self.agent.system_prompt))
                )
            self.messages.append(StoredMessage(ChatMessage(role=MessageRole.USER, content=self.turn.prompt)))
            return await self._watch(_start(workflow, user_msg=self.turn.prompt))
        with _quiet():
            ctx, memory = restore(workflow, self.turn.snapshot)
        approved = self._settle(self.turn.verdicts)
        if approved:
            await hooks.before_approved_calls(approved)
        handler = _start(workflow, ctx=ctx)
        try:
            await handler.ctx.store.set("memory", memory_of(memory, self.agent.agents[0].llm))
        except BaseException:
            await handler.cancel_run()
            raise
        self.unsent = list(self.verdicts.values())  # sent once the restored steps wait again (`_watch`)
        return await self._watch(handler)

    def _settle(self, verdicts: Mapping[str, Verdict]) -> list[str]:
        """The verdicts checked by the rules every engine shares, as events; the ids of the calls to run."""
        settled = settle(
            as_view(self.messages),
            results_from_verdicts(verdicts) if verdicts else None,
            tools=self.agent.tools,
            agent_name=self.agent.name,
        )
        if settled is None:
            raise UserError(f"run {self.turn.run_id} waits on no call: it has nothing to continue with")
        for call_id, decision in settled.decisions.items():
            if isinstance(decision, ToolApproved):
                args = settled.to_run[call_id].dumped_args
                self.verdicts[call_id] = ApprovalVerdict(tool_call_id=call_id, verdict="approve", args=args)
            elif isinstance(decision, ToolDenied):
                self.verdicts[call_id] = ApprovalVerdict(tool_call_id=call_id, verdict="deny", text=decision.message)
            elif isinstance(decision, ToolAnswered):
                text = as_text(decision.content)
                self.verdicts[call_id] = ApprovalVerdict(tool_call_id=call_id, verdict="answer", text=text)
        return list(settled.to_run)

    async def _watch(self, handler: WorkflowHandler) -> RunEnd:
        """Follow the workflow's events until it pauses on our calls or stops."""
        try:
            async with aclosing(_events(handler)) as events:
                async for event in events:
                    if isinstance(event, AgentOutput):
                        self._flush()
                        self.messages.append(StoredMessage(event.response.model_copy(deep=True)))
                    elif isinstance(event, ToolCallResult):
                        self._record(event)
                    elif isinstance(event, ApprovalRequest) and event.tool_call_id not in self.verdicts:
                        self.asked[event.tool_call_id] = event
                    elif isinstance(event, WorkflowIdleEvent) and self.unsent:
                        # A restored workflow first runs each waiting step again, up to its `wait_for_event`:
                        # only then does a waiter know which call it waits for (LlamaIndex does not store that).
                        for verdict in self.unsent:
                            await handler.send_event(verdict)
                        self.unsent = []
                    elif isinstance(event, WorkflowIdleEvent) and self._paused():
                        return await self._pause(handler)
                    elif isinstance(event, StopEvent):
                        break
            result: Any = await handler
        except ApprovalsError:
            raise
        except Exception as exc:
            raise LlamaIndexRunError(f"LlamaIndex: {type(exc).__name__}: {exc}") from exc
        finally:
            if not handler.is_done():
                await handler.cancel_run()
        self._flush()
        memory: BaseMemory | None = await handler.ctx.store.get("memory", default=None)
        end = await snapshot(handler.ctx, memory)
        output: Any = result
        if isinstance(result, AgentOutput):
            output = result.structured_response if result.structured_response is not None else result.response.content
        return Completed(output=output, messages=self.messages, snapshot=end)

    def _record(self, event: ToolCallResult) -> None:
        """A tool result as the model reads it, marked with what it is (the stored copy only)."""
        verdict = self.verdicts.get(event.tool_id)
        outcome: Outcome = "result"
        reason = None
        if event.tool_output.is_error:
            outcome = "error"
        elif verdict is not None and verdict.verdict == "deny":
            outcome, reason = "denied", verdict.text
        elif verdict is not None and verdict.verdict == "answer":
            outcome = "answered"
        self.settled.add(event.tool_id)
        self.asked.pop(event.tool_id, None)
        self.results[event.tool_id] = tool_message(
            event.tool_id, event.tool_name, event.tool_output.blocks, outcome, reason
        )

    def _flush(self) -> None:
        """The results gathered since the last assistant message, in the order it made the calls.

        Parallel calls finish in any order; the history lists them as the model asked for them.
        """
        order = {call.tool_call_id: index for index, call in enumerate(_last_calls(self.messages))}
        for call_id in sorted(self.results, key=lambda call_id: order.get(call_id, len(order))):
            self.messages.append(self.results[call_id])
        self.results.clear()

    def _paused(self) -> bool:
        """Idle, with every verdict's call settled and some calls waiting: a pause. Idle waiting on nothing of
        ours is a workflow that waits for an event nobody will send."""
        if set(self.verdicts) - self.settled:
            return False  # the verdicts sent are still on their way to their steps
        if not self.asked:
            raise LlamaIndexRunError(
                "LlamaIndex: the workflow waits for an event that is not a person's verdict on a call"
            )
        return True

    async def _pause(self, handler: WorkflowHandler) -> Paused:
        self._flush()
        memory: BaseMemory | None = await handler.ctx.store.get("memory", default=None)
        state = await snapshot(handler.ctx, memory)
        await handler.cancel_run()
        return Paused(requests=self._requests(), messages=self.messages, snapshot=state)

    def _requests(self) -> DeferredToolRequests:
        """The waiting calls, as their tools' own schemas validate them, in the order the model made them."""
        calls = pending_tool_calls(as_view(self.messages))
        waiting = []
        for call_id, call in calls.items():
            asked = self.asked.get(call_id)
            if asked is None:
                raise LlamaIndexRunError(
                    f"LlamaIndex: call {call_id!r} to {call.tool_name!r} has neither a result nor a request"
                )
            tool = self.agent.tools[asked.tool_name]
            validated = bind(call, tool, tool.validate_args(asked.args))
            approval = self.agent.approval_tools[asked.tool_name]
            waiting.append(deferred_call(validated, tool.tool_def, approval.reason))
        return DeferredToolRequests(approvals=waiting)


def _last_calls(messages: list[Any]) -> list[ToolCallPart]:
    """The tool calls of the history's last assistant message."""
    for message in reversed(messages):
        if isinstance(message, StoredMessage | ChatMessage) and unwrap(message).role == MessageRole.ASSISTANT:
            view = as_view([message])[0]
            return view.tool_calls if isinstance(view, ModelResponse) else []
    return []


def _start(workflow: LlamaIndexWorkflow, **arguments: Any) -> WorkflowHandler:
    """`workflow.run(...)`: it only schedules the run, so silencing warnings here touches no other run."""
    with _quiet():
        return workflow.run(**arguments)


@contextmanager
def _quiet() -> Iterator[None]:
    """LlamaIndex's workflows inspect an agent (a pydantic model) and touch its deprecated attributes:
    pydantic's deprecation warnings are LlamaIndex's to fix, and noise (under `-W error`, failures) for our users."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PydanticDeprecationWarning)
        yield


async def _events(handler: WorkflowHandler) -> AsyncGenerator[Event, None]:
    """The workflow's events, internal ones included, until its stop event; its error if it dies first.

    A workflow whose runtime fails outside any step never writes its stop event to the stream:
    without watching its result too, the turn would wait for the next event forever. LlamaIndex
    streams a run's events to one task only, so one task reads them into a queue.
    """
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in handler.stream_events(expose_internal=True):
                queue.put_nowait(event)
        finally:
            queue.put_nowait(None)

    reader = asyncio.ensure_future(pump())
    outcome: asyncio.Future[StopEvent] = asyncio.ensure_future(handler.stop_event_result())
    outcome.add_done_callback(_retrieved)  # a run stopped at a pause ends cancelled: nobody's error
    ended: asyncio.Future[StopEvent] | None = outcome
    try:
        while True:
            following = asyncio.ensure_future(queue.get())
            if ended is not None:
                either: list[asyncio.Future[Any]] = [following, ended]
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if ended.done() and not following.done():
                    if ended.exception() is not None:
                        following.cancel()
                        ended.result()  # raises the workflow's error
                    ended = None  # it ended well: its last events are in the stream
            event = await following
            if event is None:
                if outcome.done() and outcome.exception() is not None:
                    outcome.result()  # the run died before its events could be read: its error, not the stream's
                reader.result()  # the stream's own error, if it had one
                return
            yield event
    finally:
        for task in (reader, ended):
            if task is not None and not task.done():
                task.cancel()


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
