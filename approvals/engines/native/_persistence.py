"""What a run tells whoever keeps it, at the two moments a store's crash-safety depends on.

A run in memory needs neither; a stored run (`approvals.worker.resumer`) must mark approved calls
as executing, durably, before any of them runs (so a crash never runs one twice
unnoticed), and append each step as it completes (so a crash loses at most one step).
"""

from __future__ import annotations

from typing import Protocol

from .messages import ModelRequest, ModelResponse

__all__ = ("NO_PERSISTENCE", "NoPersistence", "RunPersistence")


class RunPersistence(Protocol):
    """Hooks `Agent.run` awaits while it runs; an exception from either stops the run there."""

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        """Awaited once every decision is checked and before any approved call runs; only when some are approved."""

    async def on_step(self, messages: list[ModelRequest | ModelResponse]) -> None:
        """Awaited before each model request with the messages added since the last call.

        The messages of the run's last step are not delivered: they are only in the result.
        """


class NoPersistence:
    """The default: nothing outside the run's result is kept."""

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        return None

    async def on_step(self, messages: list[ModelRequest | ModelResponse]) -> None:
        return None


NO_PERSISTENCE: RunPersistence = NoPersistence()
