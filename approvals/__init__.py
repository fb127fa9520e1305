"""approvals: a human-in-the-loop approval workflow for LLM agents.

Tools are plain functions; risky calls pause until a person approves, denies or edits them.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engines.native.agent import Agent, AgentRunResult
    from .engines.native.deferred import (
        DeferredToolCall,
        DeferredToolRequests,
        DeferredToolResults,
        ToolAnswered,
        ToolApproved,
        ToolDenied,
    )
    from .engines.native.tools import INHERIT, RunContext, Tool, ToolDefinition, ToolReturn, tool
    from .engines.native.toolsets import FunctionToolset
    from .engines.native.usage import UsageLimits
    from .exceptions import (
        ApprovalRequired,
        ApprovalsError,
        Conflict,
        Forbidden,
        InvalidDeferredResults,
        InvalidEdit,
        LeaseLost,
        ModelAPIError,
        ModelHTTPError,
        ModelRetry,
        NotFound,
        ToolDefinitionError,
        ToolExecutionError,
        ToolRetriesExceeded,
        ToolRetryError,
        UnexpectedModelBehavior,
        UsageLimitExceeded,
        UserError,
    )

__all__ = (
    "INHERIT",
    "Agent",
    "AgentRunResult",
    "ApprovalRequired",
    "ApprovalsError",
    "Conflict",
    "DeferredToolCall",
    "DeferredToolRequests",
    "DeferredToolResults",
    "Forbidden",
    "FunctionToolset",
    "InvalidDeferredResults",
    "InvalidEdit",
    "LeaseLost",
    "ModelAPIError",
    "ModelHTTPError",
    "ModelRetry",
    "NotFound",
    "RunContext",
    "Tool",
    "ToolAnswered",
    "ToolApproved",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolDenied",
    "ToolExecutionError",
    "ToolRetriesExceeded",
    "ToolRetryError",
    "ToolReturn",
    "UnexpectedModelBehavior",
    "UsageLimitExceeded",
    "UsageLimits",
    "UserError",
    "tool",
)

_HOMES = {
    "Agent": "approvals.engines.native.agent",
    "AgentRunResult": "approvals.engines.native.agent",
    "ApprovalRequired": "approvals.exceptions",
    "ApprovalsError": "approvals.exceptions",
    "Conflict": "approvals.exceptions",
    "DeferredToolCall": "approvals.engines.native.deferred",
    "DeferredToolRequests": "approvals.engines.native.deferred",
    "DeferredToolResults": "approvals.engines.native.deferred",
    "Forbidden": "approvals.exceptions",
    "FunctionToolset": "approvals.engines.native.toolsets",
    "INHERIT": "approvals.engines.native.tools",
    "InvalidDeferredResults": "approvals.exceptions",
    "InvalidEdit": "approvals.exceptions",
    "LeaseLost": "approvals.exceptions",
    "ModelAPIError": "approvals.exceptions",
    "ModelHTTPError": "approvals.exceptions",
    "ModelRetry": "approvals.exceptions",
    "NotFound": "approvals.exceptions",
    "RunContext": "approvals.engines.native.tools",
    "Tool": "approvals.engines.native.tools",
    "ToolAnswered": "approvals.engines.native.deferred",
    "ToolApproved": "approvals.engines.native.deferred",
    "ToolDefinition": "approvals.engines.native.tools",
    "ToolDefinitionError": "approvals.exceptions",
    "ToolDenied": "approvals.engines.native.deferred",
    "ToolExecutionError": "approvals.exceptions",
    "ToolRetriesExceeded": "approvals.exceptions",
    "ToolRetryError": "approvals.exceptions",
    "ToolReturn": "approvals.engines.native.tools",
    "UnexpectedModelBehavior": "approvals.exceptions",
    "UsageLimitExceeded": "approvals.exceptions",
    "UsageLimits": "approvals.engines.native.usage",
    "UserError": "approvals.exceptions",
    "tool": "approvals.engines.native.tools",
}
"""Where each public name lives: imported on first use, so `import approvals` stays light (a coding
CLI's hook runs `approvals hook` before every tool call)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'approvals' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
