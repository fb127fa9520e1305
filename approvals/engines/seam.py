"""The seam between the worker and a resumable engine, in neutral types only.

A resumable engine runs an agent framework's own loop on our worker. Through this seam, and
nothing else, it

- is given a `Turn`: the run's prompt (its first turn) or its kept state, the run's deps, and
  the core's `Verdict`s (`approvals.calls.verdicts`) on the calls the run waits on;
- tells the store, through the `RunHooks` the worker provides over it, which approved calls
  are about to run and each step as it completes, and what the calls that ran came to
  (`outcomes`);
- ends `Paused` with the calls it asks about (`approvals.calls.tools.DeferredToolRequests`:
  tool name, call id, validated arguments and their digest, the definition the model saw) or
  `Completed` with its output; or raises `approvals.exceptions.ApprovalsError`, and the run
  fails with its words (`ToolExecutionError` names the call that failed);
- keeps its state in one of three ways (`StateKind`): a per-message history (one stored row a
  message, read and written by its `HistoryCodec`), one versioned snapshot document (an
  OpenAI Agents `RunState`, a LangGraph checkpoint, a LlamaIndex context) beside that history,
  or a reference to the engine's own checkpointer. The store keeps the first two; the third is
  declared, and refused in words until an engine needs it.

A `SNAPSHOT` engine keeps a history too, for the run page, the audit and the worker's reading
of which calls wait and what they came to; its framework resumes from the document. Its turn
is given the stored history and the latest `Snapshot`; it calls `before_approved_calls` before
any approved call runs, never `on_step`, and ends with the whole history (stored messages
first, then the turn's) and the new `Snapshot`. The worker stores both in the one transaction
that pauses or ends the run, so a worker that dies mid-turn leaves the run where its last
document and history agree, and the next worker redoes the turn from there (an approved call
it had started is `outcome_unknown` for a person, never run twice).

The read-only view of a run (the run page, the API) is `approvals.engines.view`: our native
engine's message classes, declared the neutral view model, into which each `HistoryCodec.view`
reads its engine's messages. The page renders prompts, text, tool calls, results, retries and
denials, which every framework we run has; one view model keeps one renderer and one set of
history readers (`approvals.engines.history`) for every engine, and an engine whose messages
are ours (native) needs no conversion.

What a new engine's author writes, and nothing else they touch:

1. `approvals/engines/<name>/engine.py`: the engine. For a per-message history, a
   `HistoryEngine` subclass (`approvals.engines.history_engine`: `name`, `codec`, `adopt`);
   for a snapshot, a `SnapshotEngine` subclass (`approvals.engines.snapshot_engine`: `name`,
   `codec`, `adopt`, `resume`), as LangGraph, OpenAI Agents and LlamaIndex are.
2. `approvals/engines/<name>/_history.py`: its `HistoryCodec` (its messages as JSON under its
   own format id, and read into the view model).
3. `approvals/engines/<name>/agent.py`, when the framework's agent needs a wrapper to run with
   `Agent.run`'s contract (ours, pydantic-ai's `PydanticAIAgent`).
4. One `register_engine(...)` line in `approvals/engines/__init__.py`, and one harness in
   `tests/engines/conformance/` with its one line in the suite's list of engines.

Not the worker, the store, the web app, nor the other engines.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeAlias, cast

from ..calls.engine_state import Snapshot
from ..calls.engines import Engine, EngineKind, HistoryCodec
from ..calls.states import CallStatus
from ..calls.tools import ArgsValidator, DeferredToolRequests
from ..calls.verdicts import Verdict
from ..exceptions import UserError

__all__ = (
    "CallOutcomes",
    "NO_HOOKS",
    "CheckpointRef",
    "Completed",
    "NoHooks",
    "Paused",
    "ResumableAgent",
    "ResumableEngine",
    "RunEnd",
    "RunHooks",
    "Snapshot",
    "StateKind",
    "Tally",
    "Turn",
    "TurnEnd",
    "history_codec",
    "resumable",
)

CallOutcomes: TypeAlias = dict[str, tuple[CallStatus, Any]]
"""What approved calls came to, by tool call id: succeeded with the tool's result, or failed with its error."""


class StateKind(StrEnum):
    """How a resumable engine's run state is kept between turns."""

    HISTORY = "history"
    """One stored row a message, appended step by step (`HistoryCodec`): ours, pydantic-ai."""
    SNAPSHOT = "snapshot"
    """One versioned document (`Snapshot`) beside the history, replaced at each pause: an OpenAI Agents
    `RunState`, a LangGraph checkpoint, a LlamaIndex workflow context."""
    CHECKPOINTER = "checkpointer"
    """The engine's own checkpointer holds it; the store keeps a reference (`CheckpointRef`): a LangGraph thread."""


@dataclass(frozen=True, kw_only=True)
class CheckpointRef:
    """Where an engine's own checkpointer keeps a run (a thread id), and which checkpoint it is at."""

    thread: str
    checkpoint: str | None = None


class Tally(Protocol):
    """What a worker holds with a run's history between turns, so a turn counts only new messages.

    The engine makes it (`Paused.tally`); the worker only reads `run_id` and `count` and
    counts newly read messages into it (`add_all`). Our `RunTotals` is one.
    """

    @property
    def run_id(self) -> str: ...

    @property
    def count(self) -> int:
        """How many of the history's messages are counted."""
        ...

    def add_all(self, messages: Sequence[Any]) -> None:
        """Count more messages of the history."""
        ...


class RunHooks(Protocol):
    """What a running engine tells whoever keeps the run, at the two moments crash-safety depends on.

    The worker implements them over the store; an exception from either stops the run there.
    """

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        """Awaited once every verdict is checked and before any approved call runs; only when some are approved."""
        ...

    async def on_step(self, messages: list[Any]) -> None:
        """Awaited with each completed step's messages (the engine's own), before the next model request.

        The messages of the run's last step are not delivered: they come with its end.
        """
        ...


class NoHooks:
    """Nobody keeps the run: a run in memory, outside any store."""

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        return None

    async def on_step(self, messages: list[Any]) -> None:
        return None


NO_HOOKS: RunHooks = NoHooks()


@dataclass(frozen=True, kw_only=True)
class Turn:
    """What an engine is given to start or continue a run."""

    run_id: str
    prompt: str | None
    """The prompt of a run's first turn; None once the run has state."""
    deps: Any
    """The run's dependencies, built from its stored data by the agent's deps factory."""
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)
    """The core's verdicts on the calls the run waits on (`ResumableEngine.waiting_on`), by tool call id."""
    history: list[Any] = field(default_factory=list)
    """`StateKind.HISTORY`: the stored messages, the engine's own, oldest first; the engine appends to it."""
    tally: Tally | None = None
    """`StateKind.HISTORY`: what the worker held of `history` (`Paused.tally`); None: count it whole."""
    snapshot: Snapshot | None = None
    """`StateKind.SNAPSHOT`: the run's latest document; None on its first turn."""
    checkpoint: CheckpointRef | None = None
    """`StateKind.CHECKPOINTER`: where the engine's checkpointer keeps the run; None on its first turn."""


@dataclass(frozen=True, kw_only=True)
class TurnEnd:
    """The run's state at the end of a turn, in the engine's `StateKind`: what the worker stores."""

    messages: list[Any] = field(default_factory=list)
    """`StateKind.HISTORY`: the whole history, the stored messages first."""
    snapshot: Snapshot | None = None
    checkpoint: CheckpointRef | None = None


@dataclass(frozen=True, kw_only=True)
class Paused(TurnEnd):
    """The run waits for people on `requests`."""

    requests: DeferredToolRequests
    tally: Tally | None = None
    """`StateKind.HISTORY`: the totals of `messages`, for the worker to hold for the next turn."""


@dataclass(frozen=True, kw_only=True)
class Completed(TurnEnd):
    """The run ended with `output` (JSON-compatible data)."""

    output: Any


RunEnd: TypeAlias = Paused | Completed


class ResumableAgent(Protocol):
    """An agent as the worker holds it: its name, and its tools as the validators of reviewers' edits."""

    @property
    def name(self) -> str: ...

    @property
    def tools(self) -> Mapping[str, ArgsValidator]:
        """Its tools by name."""
        ...


class ResumableEngine(Engine, Protocol):
    """An engine whose runs our worker continues: the whole contract between the worker and it."""

    @property
    def state(self) -> StateKind:
        """How its runs' state is kept between turns."""
        ...

    def waiting_on(self, history: Sequence[Any]) -> list[str]:
        """The ids of the calls a run with this stored `history` waits on: each needs a verdict to continue."""
        ...

    def outcomes(self, messages: Sequence[Any], executing: Collection[str]) -> CallOutcomes:
        """What the approved calls of `executing` came to, as far as `messages` (its own) say."""
        ...

    async def resume(self, agent: Any, turn: Turn, hooks: RunHooks) -> RunEnd:
        """Run `agent` (as this engine adopted it) from `turn` until it pauses or ends, telling `hooks` as it goes."""
        ...


def resumable(engine: Engine) -> ResumableEngine:
    """`engine` as the worker continues its runs; a `UserError` for an engine whose runs continue elsewhere."""
    if engine.kind is not EngineKind.RESUMABLE:
        raise UserError(f"The {engine.name!r} engine's runs are continued by its own agent, not by a worker")
    return cast(ResumableEngine, engine)


def history_codec(engine: ResumableEngine) -> HistoryCodec:
    """The codec of an engine's per-message history: a `HISTORY` engine's state, a `SNAPSHOT` engine's view of it."""
    if engine.state is StateKind.CHECKPOINTER or engine.codec is None:
        raise UserError(f"The {engine.name!r} engine keeps its state as a {engine.state}, which this store cannot keep")
    return engine.codec
