"""LlamaIndex as an engine: its agents run on our worker, paused and resumed with its own context.

Registered by import path in `approvals.engines` (as "llamaindex", format `LLAMAINDEX_FORMAT`),
so nothing of LlamaIndex is imported until a LlamaIndex agent or history is met. A run's state is
a `StateKind.SNAPSHOT`: LlamaIndex's serialized workflow `Context` (`_snapshot`), beside a
per-message history of its `ChatMessage`s (`_history`) that the run page, the audit and the
worker read. Tools that need a person are marked with `requires_approval` (`_approval`) and wait
with LlamaIndex's own `wait_for_event`; a turn is run by `_turn`.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent

from ...calls.engines import HistoryCodec
from ..history_engine import FunctionCodec
from ..seam import RunEnd, RunHooks, Turn
from ..snapshot_engine import SnapshotEngine
from . import _history
from ._history import LLAMAINDEX_FORMAT
from ._turn import run_turn
from .agent import LlamaIndexAgent

__all__ = ("LLAMAINDEX_FORMAT", "LlamaIndexEngine", "engine")


class LlamaIndexEngine(SnapshotEngine):
    """LlamaIndex agents (`FunctionAgent`, `AgentWorkflow`) wrapped in `LlamaIndexAgent`, resumed from their context."""

    name = "llamaindex"
    codec: HistoryCodec = FunctionCodec(
        LLAMAINDEX_FORMAT,
        _history.dump_message,
        _history.load_array,
        _history.load_message,
        _history.as_view,
        _history.is_llamaindex_message,
    )

    def adopt(self, candidate: object, *, name: str | None = None) -> LlamaIndexAgent | None:
        """A `LlamaIndexAgent` as it is; a LlamaIndex agent or agent workflow wrapped (named `name`, else its own)."""
        if isinstance(candidate, LlamaIndexAgent):
            return candidate
        if isinstance(candidate, BaseWorkflowAgent | AgentWorkflow):
            return LlamaIndexAgent(candidate, name=name)
        return None

    async def resume(self, agent: Any, turn: Turn, hooks: RunHooks) -> RunEnd:
        return await run_turn(agent, turn, hooks)


engine = LlamaIndexEngine()
