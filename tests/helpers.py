"""Small helpers shared by tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Call:
    """A model's tool call, as the tool manager sees it."""

    tool_name: str
    args: str | dict[str, Any] | None = None
    tool_call_id: str = "call-1"
