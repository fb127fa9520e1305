"""What a run may use and what it has used: the caps of `UsageLimits`, and usage read back from a history.

A paused run continues in another call to `run`, maybe in another process, so its usage is
counted from its stored messages rather than kept in memory: a resumed run keeps counting
toward the same limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .exceptions import UsageLimitExceeded
from .messages import ModelRequest, ModelResponse, ToolReturnPart, Usage

__all__ = ("UsageLimits", "usage_of_run")


@dataclass(kw_only=True)
class UsageLimits:
    """Caps for one run; going past one fails the run with `UsageLimitExceeded`."""

    request_limit: int | None = 50
    """Model requests per run."""
    tool_calls_limit: int | None = None
    """Tool executions per run."""
    total_tokens_limit: int | None = None
    """Input plus output tokens per run, as the provider reports them."""

    def check_before_request(self, usage: Usage) -> None:
        if self.request_limit is not None and usage.requests >= self.request_limit:
            raise UsageLimitExceeded(f"The next model request would exceed the request limit of {self.request_limit}")

    def check_tokens(self, usage: Usage) -> None:
        if self.total_tokens_limit is not None and usage.total_tokens > self.total_tokens_limit:
            raise UsageLimitExceeded(
                f"Used {usage.total_tokens} tokens, over the total_tokens_limit of {self.total_tokens_limit}"
            )

    def check_before_tool_calls(self, usage: Usage, count: int) -> None:
        if self.tool_calls_limit is not None and usage.tool_calls + count > self.tool_calls_limit:
            raise UsageLimitExceeded(
                f"Running {count} more tool call(s) would exceed the tool_calls_limit of {self.tool_calls_limit}"
            )


def add_response(usage: Usage, response: ModelResponse) -> None:
    """Count one model response: its reported usage, and one request when the model reports none."""
    usage.incr(response.usage)
    if not response.usage.requests:
        usage.requests += 1


def usage_of_run(messages: Sequence[ModelRequest | ModelResponse], run_id: str) -> Usage:
    """Usage so far of this run, read from its history, so a resumed run keeps counting toward its limits."""
    usage = Usage()
    for message in messages:
        if message.run_id != run_id:
            continue
        if isinstance(message, ModelResponse):
            add_response(usage, message)
        else:
            usage.tool_calls += sum(1 for p in message.parts if isinstance(p, ToolReturnPart) and p.source == "tool")
    return usage
