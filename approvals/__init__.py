"""approvals: a human-in-the-loop approval workflow for LLM agents.

Tools are plain functions; risky calls pause until a person approves, denies or edits them.
"""

from .engines.native._run_context import RunContext
from .engines.native.agent import Agent, AgentRunResult
from .engines.native.deferred import (
    DeferredToolCall,
    DeferredToolRequests,
    DeferredToolResults,
    ToolAnswered,
    ToolApproved,
    ToolDenied,
)
from .engines.native.tools import INHERIT, Tool, ToolDefinition, ToolReturn, tool
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
