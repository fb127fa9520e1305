"""The read-only view of a run's history, the same for every engine: what the run page and the API render.

Every history codec reads its engine's messages into these types (`HistoryCodec.view`); the
shared history readers (`approvals.engines.history`) and the web app read nothing else. They
are our native engine's message classes, declared the neutral view model (see
`approvals.engines.seam` for why); readers import them from here, so the view can leave the
native engine one day without its readers changing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .native.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDeniedPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    as_approvals_messages,
)

__all__ = (
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "RetryPromptPart",
    "SystemPromptPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolDeniedPart",
    "ToolReturnPart",
    "Usage",
    "UserPromptPart",
    "as_view",
)


def as_view(messages: Sequence[Any]) -> list[ModelRequest | ModelResponse]:
    """A stored history in the view model, whichever engine's messages it holds (each read by its codec)."""
    return as_approvals_messages(messages)
