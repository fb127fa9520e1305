"""The histories of runs a worker paused, so resuming one reads and counts only what is new.

A run's history is append-only, so the messages a worker holds of it never go stale: a
claim told how many it holds (`store.runs.claim(known=...)`) sends only those after them. The
worker holds the history's tally too (`approvals.engines.seam.Tally`, made by its engine: our
agent's usage and tool call ids), and counts only the new messages into it. With one worker
per run for most of its life, a resume then costs the same at any history length.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.seam import Tally

__all__ = ("HistoryCache", "MessageCount")

Message = Any
"""A stored message, in its engine's own types."""


class HistoryCache:
    """Per run, the messages this process stored last and their totals; the least recently used runs drop out first."""

    def __init__(self, max_runs: int = 64) -> None:
        self.max_runs = max_runs
        """Bounds both the memory held and the `known` map every claim sends."""
        self._runs: OrderedDict[str, tuple[list[Message], Tally]] = OrderedDict()

    def known(self) -> dict[str, int]:
        """How many messages of which runs this process holds, for `store.runs.claim`."""
        return {run_id: totals.count for run_id, (_, totals) in self._runs.items()}

    def take(self, run_id: str, history_from: int, newer: Sequence[Message]) -> tuple[list[Message], Tally] | None:
        """The whole history (the held messages, then `newer`) and its totals; None unless exactly those are held.

        The run leaves the cache: its resume appends to the list and counts on in the totals,
        and `keep`s them once it stored its last write. Only `newer` is counted here.
        """
        held = self._runs.pop(run_id, None)
        if held is None or held[1].count != history_from or history_from == 0:
            return None  # never held, dropped since the claim, or the claim sent it all: read and count it whole
        messages, totals = held
        messages.extend(newer)
        totals.add_all(newer)
        return messages, totals

    def keep(self, run_id: str, messages: list[Message], totals: Tally) -> None:
        """Hold a run's stored history (all of it, handed over: not copied) and its totals for its next resume."""
        if totals.count != len(messages) or totals.run_id != run_id:
            raise ValueError(f"totals of {totals.count} messages of run {totals.run_id!r} kept with {len(messages)}")
        self._runs[run_id] = (messages, totals)
        self._runs.move_to_end(run_id)
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)


@dataclass
class MessageCount:
    """The tally of a history whose engine counts nothing but its messages: a `SNAPSHOT` engine, whose framework
    keeps its totals in its own document. Holding its history saves the claim reading and parsing it again."""

    run_id: str
    count: int

    def add_all(self, messages: Sequence[Message]) -> None:
        self.count += len(messages)
