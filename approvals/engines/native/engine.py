"""Our own agent framework as an engine: `approvals.agent.Agent` runs, stored in our message format.

Its codec is `approvals.engines.native.messages` itself (format `MESSAGE_FORMAT_VERSION`): the worker and the
run page read these messages as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..base import HistoryCodec
from ..history_engine import HistoryEngine
from . import messages
from .agent import Agent
from .messages import MESSAGE_FORMAT_VERSION, ModelRequest, ModelResponse

__all__ = ("NativeCodec", "NativeEngine", "engine")


class NativeCodec:
    """Our messages, in our JSON (`approvals.engines.native.messages`)."""

    format_version = MESSAGE_FORMAT_VERSION

    def dump_message(self, message: Any) -> dict[str, Any]:
        return messages.dump_message(message)

    def load_array(self, array: str | bytes) -> list[Any]:
        return messages.load_message_array(array)

    def load_message(self, data: dict[str, Any] | str | bytes) -> Any:
        return messages.load_message(data)

    def view(self, history: Iterable[Any]) -> list[ModelRequest | ModelResponse]:
        return list(history)

    def owns(self, message: object) -> bool:
        return isinstance(message, ModelRequest | ModelResponse)


class NativeEngine(HistoryEngine):
    """Runs of our `Agent`: resumable by our worker from the stored history (`HistoryEngine` does the rest)."""

    name = "native"
    codec: HistoryCodec = NativeCodec()

    def adopt(self, candidate: object, *, name: str | None = None) -> Agent[Any, Any] | None:
        """Our `Agent` as it is (it has its own name); anything else is not ours."""
        return candidate if isinstance(candidate, Agent) else None


engine = NativeEngine()
