"""The shared base of the engines that keep a per-message history and run with `Agent.run`'s contract.

Our `Agent` and pydantic-ai's wrapped agent both start or continue a run with
`run(prompt, deps=, message_history=, deferred_tool_results=, run_id=, persistence=,
history_totals=)` and end with an `AgentRunResult`; `HistoryEngine` turns that into the seam
(`approvals.engines.seam.ResumableEngine`): verdicts become the deferred results the agent
resumes with, the result becomes `Paused` or `Completed`, and the history is read through the
engine's codec into the view model for the calls that wait and the outcomes of those that ran.
An engine of this kind writes only its `name`, `codec` (most are a `FunctionCodec` of its own
functions) and `adopt`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import pydantic_core

from ..calls.engines import EngineKind, HistoryCodec
from ..calls.tools import ArgsValidator, DeferredToolRequests
from .history import call_outcomes, pending_tool_calls, since_last_response
from .native.agent import AgentRunResult
from .native.deferred import DeferredToolResults, results_from_verdicts
from .native.usage import RunTotals
from .seam import CallOutcomes, Completed, Paused, RunEnd, RunHooks, StateKind, Turn
from .view import ModelRequest, ModelResponse

__all__ = ("AgentRuns", "FunctionCodec", "HistoryEngine")


@dataclass(frozen=True)
class FunctionCodec:
    """A `HistoryCodec` made of an engine's own functions (see `HistoryCodec` for what each does)."""

    format_version: int
    dump_message: Callable[[Any], dict[str, Any]]
    load_array: Callable[[str | bytes], list[Any]]
    load_message: Callable[[dict[str, Any] | str | bytes], Any]
    view: Callable[[Iterable[Any]], list[ModelRequest | ModelResponse]]
    owns: Callable[[object], bool]


class AgentRuns(Protocol):
    """An agent with `Agent.run`'s contract: ours, or pydantic-ai's wrapped (`PydanticAIAgent`)."""

    @property
    def name(self) -> str: ...

    @property
    def tools(self) -> Mapping[str, ArgsValidator]: ...

    async def run(
        self,
        prompt: str | None = None,
        *,
        deps: Any = None,
        message_history: Any = None,
        deferred_tool_results: DeferredToolResults | None = None,
        run_id: str | None = None,
        persistence: RunHooks | None = None,
        history_totals: RunTotals | None = None,
    ) -> AgentRunResult[Any]: ...


class HistoryEngine:
    """A resumable engine whose runs keep one stored message a row; subclasses give `name`, `codec` and `adopt`."""

    name: str
    codec: HistoryCodec
    kind = EngineKind.RESUMABLE
    state = StateKind.HISTORY

    def adopt(self, candidate: object, *, name: str | None = None) -> AgentRuns | None:
        """`candidate` as an agent this engine runs, when it is one of its kind; else None."""
        raise NotImplementedError

    def waiting_on(self, history: Sequence[Any]) -> list[str]:
        """The calls of the history's last response without a result yet, read in the view model."""
        return list(pending_tool_calls(self.codec.view(since_last_response(history))))

    def outcomes(self, messages: Sequence[Any], executing: Collection[str]) -> CallOutcomes:
        if not executing or not messages:
            return {}  # the usual step: no approved call ran before it, nothing to read
        return call_outcomes(self.codec.view(messages), executing)

    async def resume(self, agent: Any, turn: Turn, hooks: RunHooks) -> RunEnd:
        runs = cast(AgentRuns, agent)
        result = await runs.run(
            None if turn.history else turn.prompt,
            deps=turn.deps,
            message_history=turn.history,
            deferred_tool_results=results_from_verdicts(turn.verdicts) if turn.verdicts else None,
            run_id=turn.run_id,
            persistence=hooks,
            history_totals=cast(RunTotals | None, turn.tally),
        )
        messages: list[Any] = result.all_messages()
        if isinstance(result.output, DeferredToolRequests):
            return Paused(requests=result.output, messages=messages, tally=result.totals)
        return Completed(output=pydantic_core.to_jsonable_python(result.output), messages=messages)
