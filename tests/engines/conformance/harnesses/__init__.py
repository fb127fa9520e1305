"""Every resumable engine the conformance suite runs: one harness each, registered here by one line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..script import Turn
from .native import NativeHarness
from .pydantic_ai import PydanticAIHarness

__all__ = ("HARNESSES", "Harness")


class Harness(Protocol):
    """Builds one engine's agent for a scripted scenario, with the suite's two tools."""

    @property
    def engine(self) -> str:
        """The engine's registered name, as stored with its runs."""
        ...

    def agent(self, name: str, turns: Sequence[Turn]) -> object:
        """An agent of this engine named `name` whose model makes `turns`, then reports what it was told.

        Its tools: `lookup_order(order_id: str)`, safe, and `refund(order_id: str, amount: int > 0)`,
        which needs a person; both take `dict` deps (`script.refund_body`).
        """
        ...


HARNESSES: dict[str, Harness] = {
    "native": NativeHarness(),
    "pydantic_ai": PydanticAIHarness(),
}
"""The engines the suite runs; a new engine adds its harness here."""
