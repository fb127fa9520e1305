"""The engines the conformance suite runs: every test runs once for each harness listed here."""

from __future__ import annotations

from .harnesses import Harness
from .harnesses.native import NativeHarness
from .harnesses.pydantic_ai import PydanticAIHarness

__all__ = ("HARNESSES",)

HARNESSES: dict[str, Harness] = {
    "native": NativeHarness(),
    "pydantic_ai": PydanticAIHarness(),
}
"""A new engine adds its harness here: one line."""
