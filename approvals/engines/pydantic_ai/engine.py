"""pydantic-ai as an engine: its agents run on our worker, its messages stored in its own JSON.

Registered by import path in `approvals.engines` (as "pydantic_ai", format `PYDANTIC_AI_FORMAT`),
so the core imports none of this until a pydantic-ai agent or history is met: an agent can
only be a `pydantic_ai.Agent` once pydantic-ai is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pydantic_ai

from ..base import HistoryCodec
from ..history_engine import HistoryEngine
from ..view import ModelRequest, ModelResponse
from . import _history
from ._history import PYDANTIC_AI_FORMAT
from .agent import PydanticAIAgent

__all__ = ("PYDANTIC_AI_FORMAT", "PydanticAICodec", "PydanticAIEngine", "engine")


class PydanticAICodec:
    """pydantic-ai's messages as `ModelMessagesTypeAdapter` writes them, read through our types (`_history`)."""

    format_version = PYDANTIC_AI_FORMAT

    def dump_message(self, message: Any) -> dict[str, Any]:
        return _history.dump_message(message)

    def load_array(self, array: str | bytes) -> list[Any]:
        return _history.load_array(array)

    def load_message(self, data: dict[str, Any] | str | bytes) -> Any:
        return _history.load_message(data)

    def view(self, messages: Iterable[Any]) -> list[ModelRequest | ModelResponse]:
        return _history.as_approvals_messages(messages)

    def owns(self, message: object) -> bool:
        return _history.is_pydantic_ai_message(message)


class PydanticAIEngine(HistoryEngine):
    """pydantic-ai agents, wrapped in `PydanticAIAgent`: resumable by our worker from the stored history."""

    name = "pydantic_ai"
    codec: HistoryCodec = PydanticAICodec()

    def adopt(self, candidate: object, *, name: str | None = None) -> PydanticAIAgent | None:
        """A `PydanticAIAgent` as it is; a `pydantic_ai.Agent` wrapped (named `name`, else its own name)."""
        if isinstance(candidate, PydanticAIAgent):
            return candidate
        if isinstance(candidate, pydantic_ai.Agent):
            return PydanticAIAgent(candidate, name=name)
        return None


engine = PydanticAIEngine()
