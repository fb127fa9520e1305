"""pydantic-ai as an engine: its agents run on our worker, its messages stored in its own JSON.

Registered by import path in `approvals.engines` (as "pydantic_ai", format `PYDANTIC_AI_FORMAT`),
so the core imports none of this until a pydantic-ai agent or history is met: an agent can
only be a `pydantic_ai.Agent` once pydantic-ai is imported. Its codec stores pydantic-ai's
messages as `ModelMessagesTypeAdapter` writes them and reads them into the view model (`_history`).
"""

from __future__ import annotations

import pydantic_ai

from ...calls.engines import HistoryCodec
from ..history_engine import FunctionCodec, HistoryEngine
from . import _history
from ._history import PYDANTIC_AI_FORMAT
from .agent import PydanticAIAgent

__all__ = ("PYDANTIC_AI_FORMAT", "PydanticAIEngine", "engine")


class PydanticAIEngine(HistoryEngine):
    """pydantic-ai agents, wrapped in `PydanticAIAgent`: resumable by our worker from the stored history."""

    name = "pydantic_ai"
    codec: HistoryCodec = FunctionCodec(
        PYDANTIC_AI_FORMAT,
        _history.dump_message,
        _history.load_array,
        _history.load_message,
        _history.as_approvals_messages,
        _history.is_pydantic_ai_message,
    )

    def adopt(self, candidate: object, *, name: str | None = None) -> PydanticAIAgent | None:
        """A `PydanticAIAgent` as it is; a `pydantic_ai.Agent` wrapped (named `name`, else its own name)."""
        if isinstance(candidate, PydanticAIAgent):
            return candidate
        if isinstance(candidate, pydantic_ai.Agent):
            return PydanticAIAgent(candidate, name=name)
        return None


engine = PydanticAIEngine()
