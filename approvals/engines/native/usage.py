"""What a run may use and what it has used: the caps of `UsageLimits`, and the `RunTotals` of a history.

A paused run continues in another call to `run`, maybe in another process, so its usage is
counted from its stored messages rather than kept in memory: a resumed run keeps counting
toward the same limits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ...exceptions import UsageLimitExceeded
from .messages import ModelRequest, ModelResponse, Usage

__all__ = ("RunTotals", "UsageLimits")


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


@dataclass(kw_only=True)
class RunTotals:
    """What a run's history adds up to: the run's usage, and the tool call ids the history used.

    One rule (`add_all`) counts them, message by message: over a whole history when a run is
    read back, and over each message a run appends. So a worker that holds a run's history
    holds its totals too, and a resume counts only the new messages, not the whole history.
    """

    run_id: str
    """The run whose usage counts: a history may begin with another run's messages."""
    usage: Usage = field(default_factory=Usage)
    tool_call_ids: set[str] = field(default_factory=set)
    """Every call id in the history, whichever run made it: a new call must not reuse one."""
    count: int = 0
    """How many messages are counted."""

    @classmethod
    def of(cls, messages: Iterable[ModelRequest | ModelResponse], run_id: str) -> RunTotals:
        """The totals of a whole history."""
        totals = cls(run_id=run_id)
        totals.add_all(messages)
        return totals

    def add(self, message: ModelRequest | ModelResponse) -> None:
        """Count one more message."""
        self.add_all((message,))

    def add_all(self, messages: Iterable[ModelRequest | ModelResponse]) -> None:
        """Count more messages; a response the model reports no usage for counts as one request."""
        usage, ids, run_id = self.usage, self.tool_call_ids, self.run_id
        for message in messages:
            self.count += 1
            if isinstance(message, ModelResponse):
                for part in message.parts:
                    if part.part_kind == "tool-call":
                        ids.add(part.tool_call_id)
                if message.run_id == run_id:
                    usage.incr(message.usage)
                    if not message.usage.requests:
                        usage.requests += 1
            elif message.run_id == run_id:
                for request_part in message.parts:
                    if request_part.part_kind == "tool-return" and request_part.source == "tool":
                        usage.tool_calls += 1
