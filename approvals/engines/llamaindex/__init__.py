"""Run LlamaIndex agents on our store, inbox and worker (the `approvals[llamaindex]` extra).

Mark the tools that need a person with `requires_approval`, and register the `FunctionAgent`
(or `AgentWorkflow`) like one of ours (`AgentRegistry.register`, `--agent module:agent`); it is
wrapped in `LlamaIndexAgent`. Wrap it yourself to give it a name or a `deps_factory`. Tools read
their run's deps with `run_deps()`.
"""

from __future__ import annotations

from ._approval import DENIED_PREFIX, ApprovalRequest, ApprovalTool, ApprovalVerdict, requires_approval, run_deps
from ._turn import LlamaIndexRunError
from .agent import LlamaIndexAgent

__all__ = (
    "DENIED_PREFIX",
    "ApprovalRequest",
    "ApprovalTool",
    "ApprovalVerdict",
    "LlamaIndexAgent",
    "LlamaIndexRunError",
    "requires_approval",
    "run_deps",
)
