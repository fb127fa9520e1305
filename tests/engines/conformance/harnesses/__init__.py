"""One harness a resumable engine: it builds that engine's agent for a scripted scenario.

A harness module imports its own engine and nothing of the others', so a worker process
started for one engine loads only that one (`worker_process`). The engines the suite runs
are listed in `registry.HARNESSES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..script import Turn

__all__ = ("Harness",)


class Harness(Protocol):
    """Builds one engine's agent for a scripted scenario, with the suite's two tools."""

    @property
    def engine(self) -> str:
        """The engine's registered name, as stored with its runs."""
        ...

    def agent(self, name: str, turns: Sequence[Turn]) -> object:
        """An agent of this engine named `name` whose model makes `turns`, then reports what it was told.

        Its tools: `lookup_order(order_id: str)`, safe, and `refund(order_id: str, amount: int > 0)`,
        which needs a person; both take `dict` deps and do what `script.lookup_order_body` and
        `script.refund_body` do. The model: `script.Told` says what to report, `script.told_text` how.
        """
        ...
