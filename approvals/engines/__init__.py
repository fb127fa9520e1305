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
register_engine(
    "approvals.engines.langgraph.engine:engine",
    name="langgraph",
    formats=(1002,),  # approvals.engines.langgraph.engine.LANGGRAPH_FORMAT, checked when the engine is loaded
    available=lambda: "langgraph" in sys.modules,
    extra="langgraph",
)
register_engine(
    "approvals.engines.openai_agents.engine:engine",
    name="openai_agents",
    formats=(1003,),  # approvals.engines.openai_agents.engine.OPENAI_AGENTS_FORMAT
    available=lambda: "agents.run_state" in sys.modules,  # the SDK's own module: an app's `agents.py` is not it
    extra="openai-agents",
    cannot_edit=(  # equal to approvals.engines.openai_agents.engine.CANNOT_EDIT (tests/engines/openai_agents holds it)
        "The OpenAI Agents SDK runs an approved call with the arguments its model sent "
        "(RunState.approve takes no arguments), so a call cannot run with edited ones."
    ),
)
register_engine(
    "approvals.engines.llamaindex.engine:engine",
    name="llamaindex",
    formats=(1004,),  # approvals.engines.llamaindex.engine.LLAMAINDEX_FORMAT
    available=lambda: "llama_index.core" in sys.modules,
    extra="llamaindex",
)
