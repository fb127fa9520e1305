"""The histories of runs a worker paused, so resuming one reads only what is new.

A run's history is append-only, so the messages a worker holds of it never go stale: a
claim told how many it holds (`Store.claim(known=...)`) sends only those after them. With
one worker per run for most of its life, a resume then costs the same at any history length.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .messages import ModelRequest, ModelResponse

__all__ = ("HistoryCache",)

Message = ModelRequest | ModelResponse


class HistoryCache:
    """Per run, the messages this process stored last; the least recently used runs drop out first."""

    def __init__(self, max_runs: int = 64) -> None:
        self.max_runs = max_runs
        """Bounds both the memory held and the `known` map every claim sends."""
        self._runs: OrderedDict[str, list[Message]] = OrderedDict()

    def known(self) -> dict[str, int]:
        """How many messages of which runs this process holds, for `Store.claim`."""
        return {run_id: len(messages) for run_id, messages in self._runs.items()}

    def join(self, run_id: str, history_from: int, newer: Sequence[Message]) -> list[Message] | None:
        """The whole history: the held messages before `history_from`, then `newer`; None if they are not held."""
        if history_from == 0:
            return list(newer)
        held = self._runs.get(run_id)
        if held is None or len(held) < history_from:
            return None  # dropped since the claim (another run pushed it out): read it whole instead
        return [*held[:history_from], *newer]

    def keep(self, run_id: str, messages: Sequence[Message]) -> None:
        """Hold a run's stored history (all of it) for its next resume."""
        self._runs[run_id] = list(messages)
        self._runs.move_to_end(run_id)
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)

    def drop(self, run_id: str) -> None:
        """Forget a run that ended."""
        self._runs.pop(run_id, None)
