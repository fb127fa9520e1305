"""Exceptions raised by approvals, and the ones a tool raises to steer a run.

The tree::

    ApprovalsError                  base of everything the library raises
    ├── UserError                   the library was used wrongly (a bug in the caller's code)
    │   └── ToolDefinitionError     one or more problems in tool definitions, all listed at once
    ├── UnexpectedModelBehavior     the model kept doing something we cannot work with
    │   └── ToolRetriesExceeded     a tool's retry budget ran out
    ├── ToolExecutionError          a tool raised an exception that is not a retry
    ├── UsageLimitExceeded          a run hit its cap on requests, tool calls or tokens
    ├── InvalidDeferredResults      decisions given to resume a run do not fit its pending calls
    └── ModelAPIError               the provider could not be reached or answered with an error
        └── ModelHTTPError          ... with an HTTP error status

    ModelRetry                      raised by a tool: "tell the model this and let it try again"
    ApprovalRequired                raised by a tool: "a person must approve this call first"
    ToolRetryError                  a retry prompt ready for the model (bad args, ModelRetry, timeout)

`ModelRetry` and `ApprovalRequired` are control flow for tool authors, so they do not
derive from `ApprovalsError`: catching `ApprovalsError` never swallows them.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = (
    "ApprovalRequired",
    "ApprovalsError",
    "Conflict",
    "Forbidden",
    "InvalidDeferredResults",
    "InvalidArguments",
    "InvalidEdit",
    "LeaseLost",
    "ModelAPIError",
    "ModelHTTPError",
    "ModelRetry",
    "NotFound",
    "ToolDefinitionError",
    "ToolExecutionError",
    "ToolRetriesExceeded",
    "ToolRetryError",
    "UnexpectedModelBehavior",
    "UsageLimitExceeded",
    "UserError",
)


class ApprovalsError(Exception):
    """Base class of the errors approvals raises."""


class UserError(ApprovalsError):
    """The library was called in a way that cannot work; the message says how to fix it."""


class ToolDefinitionError(UserError):
    """A tool or toolset definition has problems; every problem found is listed."""

    def __init__(self, subject: str, problems: Sequence[str]) -> None:
        self.subject = subject
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        return f"Invalid {self.subject}:\n{lines}"


class UnexpectedModelBehavior(ApprovalsError):
    """The model kept producing output the run cannot use."""


class ToolRetriesExceeded(UnexpectedModelBehavior):
    """A tool failed more often in a row than its `retries` budget allows."""

    def __init__(self, tool_name: str, max_retries: int, last_message: str) -> None:
        self.tool_name = tool_name
        self.max_retries = max_retries
        self.last_message = last_message
        super().__init__(f"Tool {tool_name!r} exceeded its retry limit of {max_retries}; last problem: {last_message}")


class ToolExecutionError(ApprovalsError):
    """A tool raised an exception other than `ModelRetry` or `ApprovalRequired`.

    The original exception is the `__cause__`.
    """

    def __init__(self, tool_name: str, tool_call_id: str | None, error: BaseException) -> None:
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.error = error
        call = f" (call {tool_call_id})" if tool_call_id else ""
        super().__init__(f"Tool {tool_name!r}{call} raised {type(error).__name__}: {error}")


class UsageLimitExceeded(ApprovalsError):
    """A run would go past one of its usage limits (model requests, tool calls, tokens)."""


class InvalidDeferredResults(UserError):
    """The decisions passed to resume a run do not match its pending calls; nothing was changed."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"Cannot resume the run with these decisions:\n{lines}")


class NotFound(ApprovalsError):
    """The run, call, user or token does not exist."""


class Conflict(ApprovalsError):
    """The request lost a race or came too late: the state it expected has changed."""

    def __init__(self, message: str, *, status: str | None = None, decided_by: str | None = None) -> None:
        self.status = status
        self.decided_by = decided_by
        super().__init__(message)


class Forbidden(ApprovalsError):
    """The actor is not allowed to do this."""


class InvalidArguments(ApprovalsError):
    """A call's arguments failed validation (the tool's validator, or the JSON Schema a gate was given)."""

    def __init__(self, tool_name: str, errors: Sequence[tuple[str, str]], message: str) -> None:
        self.tool_name = tool_name
        self.errors = list(errors)
        """(argument location, message) pairs, to show next to the form fields."""
        super().__init__(message)


class InvalidEdit(InvalidArguments):
    """A reviewer's edited arguments failed validation; nothing was saved."""


class LeaseLost(ApprovalsError):
    """This worker no longer holds the run: its lease expired and another worker took it, or an admin cancelled it."""

    def __init__(self, message: str, *, status: str | None = None) -> None:
        self.status = status
        """The run's status when the write was refused: `cancelled` when an admin stopped it."""
        super().__init__(message)


class ModelAPIError(ApprovalsError):
    """The model provider could not be reached, or answered with something unusable."""

    def __init__(self, model_name: str, message: str) -> None:
        self.model_name = model_name
        self.message = message
        super().__init__(f"Model {model_name!r}: {message}")


class ModelHTTPError(ModelAPIError):
    """The model provider answered with an HTTP error status."""

    def __init__(self, model_name: str, status_code: int, body: object = None, *, hint: str | None = None) -> None:
        self.status_code = status_code
        self.body = body
        self.hint = hint
        """What the adapter knows about the likely cause, e.g. a setting the server refuses."""
        super().__init__(model_name, f"HTTP {status_code}: {body}" + (f" ({hint})" if hint else ""))


class ModelRetry(Exception):
    """Raise from a tool to send `message` back to the model and let it try again."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class ApprovalRequired(Exception):
    """Raise from a tool to stop this call until a person approves it.

    The call is deferred exactly as if the tool's approval policy had said yes;
    when it is approved, the tool runs again with the same arguments and
    `ctx.approved` set, so it does not raise a second time.
    """

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        super().__init__(reason or "approval required")


class ToolRetryError(Exception):
    """A message for the model asking it to call `tool_name` again, done better.

    Produced by argument validation, `ModelRetry` and timeouts; the run loop turns it
    into a retry prompt and counts it against the tool's retry budget.
    """

    def __init__(self, tool_name: str, message: str, errors: Sequence[tuple[str, str]] = ()) -> None:
        self.tool_name = tool_name
        self.message = message
        self.errors = list(errors)
        """(location, message) per invalid argument, for showing errors next to form fields."""
        super().__init__(message)
