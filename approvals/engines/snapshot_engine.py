"""The shared part of the engines whose framework resumes from its own state document (`StateKind.SNAPSHOT`).

Each such engine (LangGraph, OpenAI Agents, LlamaIndex) keeps a per-message history for the
view, in its own codec, beside the document; which calls a run waits on and what approved calls
came to are read from that history in the view model, the same way for all of them. A subclass
gives `name`, `codec`, `adopt` and `resume`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ..calls.engines import EngineKind, HistoryCodec
from .history import call_outcomes, pending_tool_calls
from .seam import CallOutcomes, StateKind

__all__ = ("SnapshotEngine",)


class SnapshotEngine:
    """A resumable engine of kind `SNAPSHOT` (`approvals.engines.seam`); subclasses give the framework's part."""

    name: str
    codec: HistoryCodec
    kind = EngineKind.RESUMABLE
    state = StateKind.SNAPSHOT

    def waiting_on(self, history: Sequence[Any]) -> list[str]:
        """The calls of the history's last response without an outcome yet."""
        return list(pending_tool_calls(self.codec.view(history)))

    def outcomes(self, messages: Sequence[Any], executing: Collection[str]) -> CallOutcomes:
        if not executing or not messages:
            return {}  # no approved call ran before these messages: nothing to read
        return call_outcomes(self.codec.view(messages), executing)
