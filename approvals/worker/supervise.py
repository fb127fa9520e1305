"""Background tasks that are restarted when they die, and report how they are doing.

`approvals serve` runs its worker and webhook delivery beside the web requests. Before,
one of them failing ended it for good while the app kept answering; now each runs under
a `Supervisor`, which logs the failure, waits (longer after each failure in a row) and
starts it again, until the app stops. `/readyz` reads their state from here.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio
from anyio.abc import TaskGroup

from .._outage import Outage
from ..store.errors import describe, is_transient

__all__ = ("Supervisor", "TaskState")

logger = logging.getLogger("approvals.worker.supervise")
STABLE_SECONDS = 60.0
"""A task that ran this long before failing starts over with the shortest wait."""


@dataclass
class TaskState:
    """How one supervised task is doing."""

    name: str
    state: Literal["running", "restarting", "stopped"] = "running"
    restarts: int = 0
    last_failure: str | None = None
    last_failure_at: dt.datetime | None = None
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


class Supervisor:
    """Starts tasks in `group` and restarts each one that ends before `stop` is set."""

    def __init__(self, group: TaskGroup, stop: anyio.Event, *, max_delay: float = 30.0) -> None:
        self.group = group
        self.stop = stop
        self.max_delay = max_delay
        self.tasks: dict[str, TaskState] = {}

    def start(self, name: str, task: Callable[[], Awaitable[None]]) -> TaskState:
        """Run `task()` under supervision; its state is `self.tasks[name]`."""
        state = TaskState(name)
        self.tasks[name] = state
        self.group.start_soon(self._keep_running, state, task, name=f"supervised {name}")
        return state

    async def _keep_running(self, state: TaskState, task: Callable[[], Awaitable[None]]) -> None:
        what = f"background task {state.name!r}"
        failures = Outage(what, logger, max_delay=self.max_delay)
        while not self.stop.is_set():
            state.state = "running"
            state.started_at = dt.datetime.now(dt.UTC)
            try:
                await task()
            except Exception as exc:
                if not is_transient(exc):
                    logger.error("%s died", what, exc_info=exc)
                reason = describe(exc) if is_transient(exc) else f"{type(exc).__name__}: {exc}"
            else:
                if self.stop.is_set():
                    break
                reason = "it returned while the app still runs"
            if (dt.datetime.now(dt.UTC) - state.started_at).total_seconds() > STABLE_SECONDS:
                failures = Outage(what, logger, max_delay=self.max_delay)  # a new failure, not the same one
            state.last_failure, state.last_failure_at = reason, dt.datetime.now(dt.UTC)
            state.state = "restarting"
            state.restarts += 1
            with anyio.move_on_after(failures.failed(reason)):
                await self.stop.wait()
        state.state = "stopped"
