"""`RunContext`: what a tool (and its hooks) may know about the run that called it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

from typing_extensions import TypeVar

AgentDepsT = TypeVar("AgentDepsT", default=None, covariant=True)


@dataclass(kw_only=True)
class RunContext(Generic[AgentDepsT]):
    """Information about the current run, injected into tools whose first parameter asks for it."""

    deps: AgentDepsT
    """The run's dependencies, as passed to the run."""
    run_id: str = ""
    """The run this call belongs to."""
    tool_name: str | None = None
    """Name of the tool being called, inside a tool or its hooks."""
    tool_call_id: str | None = None
    """The model's id for this call; stable across a pause, so usable as an idempotency key."""
    retry: int = 0
    """How many times in a row this tool has failed so far in this run."""
    max_retries: int = 0
    """How many failures in a row the tool may have before the run fails."""
    run_step: int = 0
    """Number of model requests made so far in this run."""
    approved: bool = False
    """True when a person approved this call before it runs."""

    @property
    def idempotency_key(self) -> str | None:
        """A key unique to this tool call in this run, for APIs that deduplicate requests."""
        if self.tool_call_id is None:
            return None
        return f"{self.run_id}:{self.tool_call_id}" if self.run_id else self.tool_call_id
