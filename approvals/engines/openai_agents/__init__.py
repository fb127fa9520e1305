"""Run OpenAI Agents SDK agents on our store, inbox and worker (the `approvals[openai-agents]` extra).

Register an `agents.Agent` like one of ours (`AgentRegistry.register`, `--agent module:agent`);
it is wrapped in `OpenAIAgentsAgent`. Wrap it yourself to give it a name, a `deps_factory`, a
`RunConfig` or our per-tool policies.
"""

from __future__ import annotations

from .agent import OpenAIAgentsAgent
from .engine import EditNotSupported, OpenAIAgentsRunError

__all__ = ("EditNotSupported", "OpenAIAgentsAgent", "OpenAIAgentsRunError")
