"""approvals: a human-in-the-loop approval workflow for LLM agents.

Tools are plain functions; risky calls pause until a person approves, denies or edits them.
"""

from ._run_context import RunContext
from .exceptions import (
    ApprovalRequired,
    ApprovalsError,
    ModelRetry,
    ToolDefinitionError,
    ToolExecutionError,
    ToolRetriesExceeded,
    ToolRetryError,
    UnexpectedModelBehavior,
    UserError,
)
from .tools import INHERIT, Tool, ToolDefinition, ToolReturn, tool
from .toolsets import FunctionToolset

__all__ = (
    "INHERIT",
    "ApprovalRequired",
    "ApprovalsError",
    "FunctionToolset",
    "ModelRetry",
    "RunContext",
    "Tool",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolExecutionError",
    "ToolRetriesExceeded",
    "ToolRetryError",
    "ToolReturn",
    "UnexpectedModelBehavior",
    "UserError",
    "tool",
)
