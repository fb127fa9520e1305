"""Run LangGraph graphs on our store, inbox and worker (the `approvals[langgraph]` extra).

Register a `langchain.agents.create_agent` agent with `HumanInTheLoopMiddleware` like one of
ours (`AgentRegistry.register`, `--agent module:agent`); it is wrapped in `LangGraphAgent`.
Wrap it yourself to give it a name or a `deps_factory`; the run's deps reach its tools as
LangGraph's runtime `context`.
"""

from __future__ import annotations

from ._tools import POLICY_KEY
from .agent import LangGraphAgent
from .engine import LANGGRAPH_FORMAT, LangGraphRunError

__all__ = ("LANGGRAPH_FORMAT", "POLICY_KEY", "LangGraphAgent", "LangGraphRunError")
