"""Our own agent framework as an engine: `approvals.agent.Agent` runs, stored in our message format.

Its codec is `approvals.engines.native.messages` itself (format `MESSAGE_FORMAT_VERSION`): its
messages are the view model (`approvals.engines.view`), so the worker and the run page read them as
they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...calls.engines import HistoryCodec
from ..history_engine import FunctionCodec, HistoryEngine
from . import messages
from .agent import Agent
from .messages import MESSAGE_FORMAT_VERSION, ModelRequest, ModelResponse

__all__ = ("NativeEngine", "engine")


def _as_they_are(history: Iterable[Any]) -> list[ModelRequest | ModelResponse]:
    return list(history)


def _owns(message: object) -> bool:
    return isinstance(message, ModelRequest | ModelResponse)


class NativeEngine(HistoryEngine):
    """Runs of our `Agent`: resumable by our worker from the stored history (`HistoryEngine` does the rest)."""

    name = "native"
    codec: HistoryCodec = FunctionCodec(
        MESSAGE_FORMAT_VERSION,
        messages.dump_message,
        messages.load_message_array,
        messages.load_message,
        _as_they_are,
        _owns,
    )

    def adopt(self, candidate: object, *, name: str | None = None) -> Agent[Any, Any] | None:
        """Our `Agent` as it is (it has its own name); anything else is not ours."""
        return candidate if isinstance(candidate, Agent) else None


engine = NativeEngine()
