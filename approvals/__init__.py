"""approvals: a human-in-the-loop approval workflow for LLM agents.

Tools are plain functions; risky calls pause until a person approves, denies or edits them.
"""

from ._run_context import RunContext
from .agent import Agent, AgentRunResult
from .deferred import (
    DeferredToolCall,
    DeferredToolRequests,
    DeferredToolResults,
    ToolAnswered,
    ToolApproved,
    ToolDenied,
)
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
from .tools import INHERIT, Tool, ToolDefinition, ToolReturn, tool
from .toolsets import FunctionToolset
from .usage import UsageLimits

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
