"""The engines the conformance suite runs: every test runs once for each harness listed here."""

from __future__ import annotations

from .harnesses import Harness
from .harnesses.langgraph import LangGraphHarness
from .harnesses.llamaindex import LlamaIndexHarness
from .harnesses.native import NativeHarness
from .harnesses.openai_agents import OpenAIAgentsHarness
from .harnesses.pydantic_ai import PydanticAIHarness

__all__ = ("HARNESSES",)

HARNESSES: dict[str, Harness] = {
    "native": NativeHarness(),
    "pydantic_ai": PydanticAIHarness(),
    "langgraph": LangGraphHarness(),
    "openai_agents": OpenAIAgentsHarness(),
    "llamaindex": LlamaIndexHarness(),
}
"""A new engine adds its harness here: one line."""
