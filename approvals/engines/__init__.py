"""Engines: the kinds of agent that ask for approvals, registered by name (`approvals.calls.engines`).

Resumable engines own a run loop our worker continues from stored history (our own agent
framework, pydantic-ai), through the seam in `seam` (what a new engine's author writes is
said there); gates put approvals in front of an agent that runs elsewhere and waits for the
decision itself. The core never imports an optional engine: the registry
loads one by its import path when it is first needed.

Registered here: "native" (`native`, our `Agent`), the gates ("gate" and one per coding CLI),
and "pydantic_ai" by import path (`approvals.engines.pydantic_ai.engine`). A pydantic-ai agent
can only reach us once pydantic-ai is imported, so that engine is imported to adopt agents or
own messages only then, and for a stored history in its format (1001) whenever one is read.
"""

from __future__ import annotations

import sys

from ..calls.engines import (
    Engine,
    EngineKind,
    HistoryCodec,
    adopting_engines,
    codec_for_format,
    codec_of,
    engine_for_format,
    get_engine,
    register_engine,
    registered_engines,
)
from .gate import HOOK_ENGINES, MCP_ENGINE, GateEngine
from .gate import engine as gate_engine
from .native.engine import engine as native_engine
from .seam import Completed, Paused, ResumableAgent, ResumableEngine, RunHooks, StateKind, Turn

__all__ = (
    "Completed",
    "Engine",
    "EngineKind",
    "GateEngine",
    "HistoryCodec",
    "Paused",
    "ResumableAgent",
    "ResumableEngine",
    "RunHooks",
    "StateKind",
    "Turn",
    "adopting_engines",
    "codec_for_format",
    "codec_of",
    "engine_for_format",
    "gate_engine",
    "get_engine",
    "native_engine",
    "register_engine",
    "registered_engines",
)

register_engine(native_engine)
register_engine(gate_engine)
register_engine(MCP_ENGINE)
for hook_engine in HOOK_ENGINES.values():
    register_engine(hook_engine)
register_engine(
    "approvals.engines.pydantic_ai.engine:engine",
    name="pydantic_ai",
    formats=(1001,),  # approvals.engines.pydantic_ai.engine.PYDANTIC_AI_FORMAT, checked when the engine is loaded
    available=lambda: "pydantic_ai" in sys.modules,
    extra="pydantic-ai",
)
