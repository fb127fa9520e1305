"""Run pydantic-ai agents on our store, inbox and worker (the `approvals[pydantic-ai]` extra).

Register a `pydantic_ai.Agent` like one of ours (`AgentRegistry.register`, `--agent
module:agent`); it is wrapped in `PydanticAIAgent`. Wrap it yourself to give it a name or a
`deps_factory`. `SQLConversationStore` keeps pydantic-ai conversations in our database.
"""

from __future__ import annotations

from .agent import POLICY_KEY, PydanticAIAgent, PydanticAIRunError
from .conversations import SQLConversationStore

__all__ = ("POLICY_KEY", "PydanticAIAgent", "PydanticAIRunError", "SQLConversationStore")
