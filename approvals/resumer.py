"""Continuing stored runs: turn decisions into deferred results and run the agent on.

`Resumer.resume()` leases one ready run, which commits its approved calls as `executing`
before any runs (a call the run then never starts is released back to approved), rebuilds
its history from the store, hands the people's decisions to the agent, appends each step as
it completes, and records how the run ended: completed, failed, or paused again.
`run_worker` does that in a loop, for several runs at once, woken by PostgreSQL
`LISTEN/NOTIFY` (or in-process events on SQLite) rather than by polling.

Agents are found by name in an `AgentRegistry`; a worker in another process registers
the same agents (an import path like `myapp.agents:support_agent` is enough), so any
worker can continue any stored run.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import pydantic_core

from .agent import Agent, pending_tool_calls
from .deferred import DeferredToolRequests, DeferredToolResults, ToolAnswered, ToolApproved, ToolDenied
from .exceptions import ApprovalsError, LeaseLost, NotFound, ToolExecutionError, UserError
from .messages import ModelRequest, ModelResponse
from .store import READY_CHANNEL, ClaimedRun, DecidedCall, Store

__all__ = ("DEFAULT_WORKER_CONCURRENCY", "AgentRegistry", "RegisteredAgent", "Resumer", "run_worker")

logger = logging.getLogger("approvals.resumer")
DepsFactory = Callable[[Any], Any | Awaitable[Any]]
DEFAULT_WORKER_CONCURRENCY = 4
"""Runs a worker process continues at once, unless told otherwise (`approvals worker --concurrency`)."""


@dataclass(frozen=True)
class RegisteredAgent:
    """An agent and how to build its run dependencies from stored data."""

    agent: Agent[Any, Any]
    deps_factory: DepsFactory | None = None

    async def make_deps(self, data: Any) -> Any:
        """Stored deps data -> the deps object (clients, connections) the tools use."""
        if self.deps_factory is None:
            return data
        deps = self.deps_factory(data)
        return await deps if inspect.isawaitable(deps) else deps


class AgentRegistry:
    """Agents by name, so a stored run finds its agent in any process."""

    def __init__(self, agents: Iterable[Agent[Any, Any]] = ()) -> None:
        self._agents: dict[str, RegisteredAgent] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent[Any, Any], *, deps_factory: DepsFactory | None = None) -> None:
        """Add an agent under its `name`; two different agents may not share a name."""
        existing = self._agents.get(agent.name)
        if existing is not None and existing.agent is not agent:
            raise UserError(f"Another agent is already registered as {agent.name!r}")
        self._agents[agent.name] = RegisteredAgent(agent, deps_factory)

    def load(self, import_path: str) -> Agent[Any, Any]:
        """Import `module:attribute` and register the agent found there."""
        module_name, _, attribute = import_path.partition(":")
        if not module_name or not attribute:
            raise UserError(f"Agent import path {import_path!r} must look like 'package.module:agent'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"Cannot import {module_name!r} for agent {import_path!r}: {exc}") from exc
        agent = getattr(module, attribute, None)
        if not isinstance(agent, Agent):
            raise UserError(f"{import_path!r} is not an Agent (found {type(agent).__name__})")
        self.register(agent, deps_factory=getattr(agent, "deps_factory", None))
        return agent

    def get(self, name: str) -> RegisteredAgent:
        try:
            return self._agents[name]
        except KeyError:
            raise NotFound(f"No agent named {name!r} is registered in this process") from None

    @property
    def names(self) -> list[str]:
        return sorted(self._agents)

    def __contains__(self, name: object) -> bool:
        return name in self._agents


def decision_from_row(row: DecidedCall) -> ToolApproved | ToolDenied | ToolAnswered:
    """The deferred result a decided call stands for."""
    if row.status == "approved":
        return ToolApproved(override_args=row.override_args, args_digest=row.args_digest)
    if row.status in ("denied", "expired"):
        return ToolDenied(message=row.denial_reason or "Denied.")
    if row.status == "answered":
        return ToolAnswered(content=row.answer)
    raise UserError(f"Call {row.id!r} is {row.status}, not decided")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Resumer:
    """Claims ready runs and continues them, one at a time."""

    def __init__(
        self, store: Store, registry: AgentRegistry, *, worker_id: str | None = None, lease_seconds: float = 60.0
    ) -> None:
        self.store = store
        self.registry = registry
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = lease_seconds

    async def resume(self, run_id: str | None = None) -> str | None:
        """Continue one ready run (`run_id`, or the oldest); returns its id, or None when none was ready."""
        claimed = await self.claim(run_id)
        if claimed is None:
            return None
        await self.continue_run(claimed)
        return claimed.run_id

    async def claim(self, run_id: str | None = None) -> ClaimedRun | None:
        """Lease one ready run of this registry's agents (`run_id`, or the oldest); None when none is ready."""
        return await self.store.claim(
            self.worker_id, lease_seconds=self.lease_seconds, run_id=run_id, agent_names=self.registry.names
        )

    async def continue_run(self, claimed: ClaimedRun) -> None:
        """Continue a run this worker claimed until it ends or pauses, renewing its lease meanwhile.

        It stops at the first write the store refuses (`LeaseLost`): its lease ran out and
        another worker took the run, or an admin cancelled the run.
        """
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep_lease, claimed.run_id)
                await self._continue(claimed)
                group.cancel_scope.cancel()
        except* LeaseLost as lost:  # from the task group, so in an exception group
            if any(isinstance(error, LeaseLost) and error.status == "cancelled" for error in lost.exceptions):
                logger.warning("run %s was cancelled; this worker stopped and stored nothing more", claimed.run_id)
            else:
                logger.warning("lost the lease on run %s; another worker continues it", claimed.run_id)

    async def _keep_lease(self, run_id: str) -> None:
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            await self.store.renew_lease(run_id, self.worker_id, lease_seconds=self.lease_seconds)

    async def _continue(self, claimed: ClaimedRun) -> None:
        run_id, worker = claimed.run_id, self.worker_id
        history = claimed.history
        stored = len(history)
        executing: set[str] = set()  # marked executing, results not yet stored
        started: set[str] = set()  # handed to their tools

        async def append(step: list[ModelRequest | ModelResponse]) -> None:
            nonlocal stored
            await self.store.append_step(
                run_id, worker, step, lease_seconds=self.lease_seconds, executing=frozenset(executing)
            )
            stored += len(step)
            executing.clear()  # approved calls run before the step that follows them is stored

        async def mark_executing(tool_call_ids: list[str]) -> None:
            fresh = [call_id for call_id in tool_call_ids if call_id not in claimed.executing]
            if fresh:  # the claim already committed the approved calls it found as executing
                await self.store.mark_executing(run_id, worker, fresh)
            started.update(tool_call_ids)
            executing.update(tool_call_ids)

        async def fail(error: str, failed_tool_call_id: str | None = None) -> None:
            # calls the claim marked executing that never ran go back to approved: a retry runs them
            unstarted = claimed.executing - started
            await self.store.finish(
                run_id, worker, [], error=error, failed_tool_call_id=failed_tool_call_id, released=unstarted
            )

        try:
            entry = self.registry.get(claimed.agent_name)
            deps = await entry.make_deps(claimed.deps)
            results = self._decisions(run_id, history, claimed.decided_calls)
            result = await entry.agent.run(
                None if history else claimed.prompt,
                deps=deps,
                message_history=history,
                deferred_tool_results=results,
                run_id=run_id,
                before_approved_calls=mark_executing,
                on_step=append,
            )
        except LeaseLost:
            raise
        except ApprovalsError as exc:
            await fail(str(exc), exc.tool_call_id if isinstance(exc, ToolExecutionError) else None)
            return
        except Exception as exc:  # a bug in user code outside tools (deps factory, hooks) fails the run, not the worker
            logger.exception("run %s failed", run_id)
            await fail(f"{type(exc).__name__}: {exc}")
            return
        remaining = result.all_messages()[stored:]
        if isinstance(result.output, DeferredToolRequests):
            await self.store.pause(run_id, worker, remaining, result.output, executing=frozenset(executing))
            names = ", ".join(call.tool_name for call in result.output.approvals)
            logger.info("run %s (%s) paused: waiting for a person on %s", run_id, claimed.agent_name, names)
        else:
            output = pydantic_core.to_jsonable_python(result.output)
            await self.store.finish(run_id, worker, remaining, output=output, executing=frozenset(executing))
            if history:
                logger.info("run %s (%s) completed", run_id, claimed.agent_name)
            else:
                logger.info(
                    "run %s (%s) completed without asking anyone: the model called no tool that needs approval",
                    run_id,
                    claimed.agent_name,
                )

    @staticmethod
    def _decisions(
        run_id: str, history: list[ModelRequest | ModelResponse], decided: dict[str, DecidedCall]
    ) -> DeferredToolResults | None:
        pending = pending_tool_calls(history)
        if not pending:
            return None
        missing = [call_id for call_id in pending if call_id not in decided]
        if missing:
            raise UserError(f"Run {run_id!r} has calls without stored decisions: {', '.join(missing)}")
        return DeferredToolResults(approvals={call_id: decision_from_row(decided[call_id]) for call_id in pending})


async def run_worker(
    store: Store,
    registry: AgentRegistry,
    *,
    worker_id: str | None = None,
    concurrency: int = 1,
    lease_seconds: float = 60.0,
    poll_interval: float = 30.0,
    expire_interval: float = 15.0,
    stop: anyio.Event | None = None,
    handle_signals: bool = False,
) -> None:
    """Resume ready runs, up to `concurrency` at once, until `stop` is set (or SIGTERM/SIGINT with `handle_signals`).

    A run spends most of its time waiting for its model, so one process keeps several
    moving; each is claimed under its own lease. Between claims the worker waits for
    wake-ups (NOTIFY on PostgreSQL); `poll_interval` is only a safety net. A stop request
    lets the runs in progress finish first.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    stop = stop or anyio.Event()
    resumer = Resumer(store, registry, worker_id=worker_id, lease_seconds=lease_seconds)
    slots = anyio.Semaphore(concurrency)
    async with anyio.create_task_group() as group:
        if handle_signals:
            group.start_soon(_stop_on_signals, stop)
        group.start_soon(_expire_until_stopped, store, expire_interval, stop)
        async with store.notifier.listen(READY_CHANNEL) as wakeups, anyio.create_task_group() as running:
            while not stop.is_set():
                await slots.acquire()  # a run in progress ends before another is claimed
                if stop.is_set():
                    slots.release()
                    break
                claimed = await resumer.claim()
                if claimed is None:
                    slots.release()
                    await _wait_for_wakeup(wakeups, stop, poll_interval)
                    continue
                running.start_soon(_continue_in_slot, resumer, claimed, slots)
        group.cancel_scope.cancel()


async def _continue_in_slot(resumer: Resumer, claimed: ClaimedRun, slots: anyio.Semaphore) -> None:
    """One run of a worker's several: its failure is logged and leaves the others running."""
    try:
        await resumer.continue_run(claimed)
    except Exception:
        # the run keeps its lease until it expires; then any worker recovers it like a crashed one
        logger.exception("run %s: the worker could not record its progress", claimed.run_id)
    finally:
        slots.release()


async def _expire_until_stopped(store: Store, seconds: float, stop: anyio.Event) -> None:
    """Turn calls past their approval TTL into denials every `seconds`."""
    while not stop.is_set():
        await store.expire()
        with anyio.move_on_after(seconds):
            await stop.wait()


async def _wait_for_wakeup(wakeups: Any, stop: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as group:

            async def woken() -> None:
                await wakeups.receive()
                group.cancel_scope.cancel()

            async def stopped() -> None:
                await stop.wait()
                group.cancel_scope.cancel()

            group.start_soon(woken)
            group.start_soon(stopped)


async def _stop_on_signals(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            logger.info("received %s: finishing the current run, then stopping", signal.Signals(signum).name)
            stop.set()
            return
