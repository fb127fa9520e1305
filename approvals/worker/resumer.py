"""Continuing stored runs: turn decisions into deferred results and run the agent on.

`Resumer.resume()` leases one ready run, which commits its approved calls as `executing`
before any runs (a call the run then never starts is released back to approved), rebuilds
its history from the store, hands the people's decisions to the agent, appends each step as
it completes, and records how the run ended: completed, failed, or paused again.
`run_worker` does that in a loop, for several runs at once, woken by PostgreSQL
`LISTEN/NOTIFY` (or in-process events on SQLite) rather than by polling.

Agents are found by name in an `AgentRegistry`; a worker in another process registers
the same agents (an import path like `myapp.agents:support_agent` is enough), so any
worker can continue any stored run. An agent is registered as its engine adopts it
(`approvals.engines`: our `Agent` as it is, a pydantic-ai agent wrapped). The worker knows
engines only through the seam (`approvals.engines.seam`): it hands the engine a `Turn` (the
stored history, the verdicts on the calls it waits on), implements the `RunHooks` over the
store, and stores the `Paused` or `Completed` it ends with; the engine says which calls wait
and what the approved calls it ran came to, which the store writes as given.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import anyio

from .. import tracing
from .._outage import Outage
from ..calls import clock
from ..calls.states import CallStatus, RunStatus
from ..calls.tools import DeferredToolRequests
from ..calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from ..engines import Engine, HistoryCodec, adopting_engines
from ..engines.seam import (
    CallOutcomes,
    Completed,
    Paused,
    ResumableAgent,
    ResumableEngine,
    Snapshot,
    StateKind,
    Tally,
    Turn,
    history_codec,
    resumable,
)
from ..exceptions import ApprovalsError, LeaseLost, NotFound, ToolExecutionError, UserError
from ..logs import with_run
from ..store import READY_CHANNEL, ClaimedRun, DecidedCall, Store
from ..store.errors import describe, is_transient
from ..store.metric_rollups import fold_metrics
from ..store.models import RunRow
from .history_cache import HistoryCache, MessageCount

__all__ = (
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_WORKER_CONCURRENCY",
    "AgentRegistry",
    "RegisteredAgent",
    "Resumer",
    "WorkerHealth",
    "run_worker",
)

logger = logging.getLogger("approvals.worker.resumer")
DepsFactory = Callable[[Any], Any | Awaitable[Any]]
DEFAULT_WORKER_CONCURRENCY = 4
"""Runs a worker process continues at once, unless told otherwise (`approvals worker --concurrency`)."""
DEFAULT_LEASE_SECONDS = 15.0
"""How long a claimed run stays leased between renewals (every third of it): also how long a run
whose worker died waits before another worker takes it over."""
DEFAULT_POLL_INTERVAL = 30.0
"""Longest wait for a wake-up before looking for ready runs anyway (a safety net)."""


@dataclass
class WorkerHealth:
    """What a worker last managed to do, for readiness checks (`/readyz`)."""

    last_contact: dt.datetime | None = None
    """The last time it reached the database (a claim, or expiring calls)."""
    last_claim: dt.datetime | None = None
    """The last time it claimed a run."""
    outage: bool = False
    """Its last attempt to reach the database failed."""

    def reached_database(self, *, claimed: bool = False) -> None:
        now = clock.now()
        self.last_contact = now
        self.outage = False
        if claimed:
            self.last_claim = now


@dataclass(frozen=True)
class RegisteredAgent:
    """An agent, how to build its run dependencies from stored data, and the engine it belongs to."""

    agent: ResumableAgent
    deps_factory: DepsFactory | None = None
    engine: Engine | None = None
    """The engine that adopted the agent (`approvals.engines`); found again from the agent when not given."""

    @property
    def resumable_engine(self) -> ResumableEngine:
        """The agent's engine, as the worker continues its runs (`approvals.engines.seam`)."""
        return resumable(self.engine if self.engine is not None else _adopt(self.agent)[0])

    @property
    def codec(self) -> HistoryCodec:
        """How the agent's runs store their messages, and read them in the view model."""
        return history_codec(self.resumable_engine)

    async def make_deps(self, data: Any) -> Any:
        """Stored deps data -> the deps object (clients, connections) the tools use."""
        if self.deps_factory is None:
            return data
        deps = self.deps_factory(data)
        return await deps if inspect.isawaitable(deps) else deps


def _adopt(candidate: object, *, name: str | None = None) -> tuple[Engine, ResumableAgent]:
    """The engine that knows `candidate`, and `candidate` as an agent the worker runs; else a `UserError`."""
    adopted = _adopted(candidate, name=name)
    if adopted is None:
        raise UserError(
            "Not an agent: expected an agent of approvals, pydantic-ai, LangGraph, the OpenAI Agents SDK or "
            f"LlamaIndex, found {type(candidate).__name__}"
        )
    return adopted


def _adopted(candidate: object, *, name: str | None = None) -> tuple[Engine, ResumableAgent] | None:
    for engine in adopting_engines():
        agent = engine.adopt(candidate, name=name)
        if agent is not None:
            return engine, cast(ResumableAgent, agent)
    return None


def as_resumable(candidate: object, *, name: str | None = None) -> ResumableAgent:
    """`candidate` as its engine adopts it: our `Agent` as it is, a pydantic-ai agent wrapped; else a `UserError`."""
    return _adopt(candidate, name=name)[1]


class AgentRegistry:
    """Agents by name, so a stored run finds its agent in any process."""

    def __init__(self, agents: Iterable[Any] = ()) -> None:
        self._agents: dict[str, RegisteredAgent] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Any, *, deps_factory: DepsFactory | None = None) -> ResumableAgent:
        """Add an agent under its `name`; two different agents may not share a name.

        A `pydantic_ai.Agent` is wrapped in `approvals.engines.pydantic_ai.PydanticAIAgent`; what is
        registered (and what `get` gives back) is returned.
        """
        engine, resumable = _adopt(agent)
        if deps_factory is None:
            deps_factory = getattr(resumable, "deps_factory", None)
        existing = self._agents.get(resumable.name)
        if existing is not None:
            if _unwrapped(existing.agent) is not _unwrapped(resumable):
                raise UserError(f"Another agent is already registered as {resumable.name!r}")
            if existing.agent is not resumable:
                return existing.agent  # the same pydantic-ai agent again: keep the first wrapper
        self._agents[resumable.name] = RegisteredAgent(resumable, deps_factory, engine)
        return resumable

    def load(self, import_path: str) -> ResumableAgent:
        """Import `module:attribute` and register the agent found there (ours, or pydantic-ai's)."""
        module_name, _, attribute = import_path.partition(":")
        if not module_name or not attribute:
            raise UserError(f"Agent import path {import_path!r} must look like 'package.module:agent'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"Cannot import {module_name!r} for agent {import_path!r}: {exc}") from exc
        found = getattr(module, attribute, None)
        # an agent without a name of its own (pydantic-ai names one only once it runs, LangGraph names every
        # unnamed graph "LangGraph") is named after its attribute
        own = getattr(found, "name", None)
        adopted = _adopted(found, name=attribute if own in _UNNAMED else own)
        if adopted is None:
            raise UserError(f"{import_path!r} is not an Agent (found {type(found).__name__})")
        return self.register(adopted[1])

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


_UNNAMED = (None, "", "LangGraph")
"""What an agent's `name` is when nobody named it: none, or the default its framework gives."""


def _unwrapped(agent: object) -> object:
    """The agent a wrapper stands for: registering the same pydantic-ai agent twice is no clash."""
    return getattr(agent, "agent", agent)


def verdict_of(row: DecidedCall) -> Verdict:
    """The verdict a decided call stands for: what its run's engine is given for it."""
    if row.status == CallStatus.APPROVED:
        if row.override_args is None:
            return Approve(args_digest=row.args_digest)
        return EditAndApprove(args=row.override_args, args_digest=row.args_digest)
    if row.status in (CallStatus.DENIED, CallStatus.EXPIRED):
        return Deny(reason=row.denial_reason or "Denied.")
    if row.status == CallStatus.ANSWERED:
        return Answer(content=row.answer)
    raise UserError(f"Call {row.id!r} is {row.status}, not decided")


_Landed = Callable[[RunRow], Awaitable[bool]]
"""Whether a write whose outcome is unknown is already in the stored run."""


def _failure_text(error: BaseException) -> str:
    """A run's error text: a database's own words for what it refused, or the exception."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, DBAPIError):
        return f"the database refused to store the run's latest step: {describe(error)}"
    return f"{type(error).__name__}: {error}"


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class _Lease:
    """Until when this worker can count on holding a run: each renewal or write moves the end."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def renewed(self) -> None:
        self.ends = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.ends - time.monotonic()


class Resumer:
    """Claims ready runs and continues them, one at a time.

    Its writes outlive a database outage: a write that failed for a transient reason is
    retried with backoff for as long as the lease lasts, after checking whether it landed
    after all (a commit whose answer was lost). When the lease runs out first, the worker
    lets the run go, and another worker (or this one) takes it over as from a crashed one.
    """

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        *,
        worker_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.registry = registry
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = lease_seconds
        self.histories = HistoryCache()
        """The histories of runs this worker paused: resuming one of them reads only its new messages."""

    async def resume(self, run_id: str | None = None) -> str | None:
        """Continue one ready run (`run_id`, or the oldest); returns its id, or None when none was ready."""
        claimed = await self.claim(run_id)
        if claimed is None:
            return None
        await self.continue_run(claimed)
        return claimed.run_id

    async def claim(self, run_id: str | None = None) -> ClaimedRun | None:
        """Lease one ready run of this registry's agents (`run_id`, or the oldest); None when none is ready."""
        return await self.store.runs.claim(
            self.worker_id,
            lease_seconds=self.lease_seconds,
            run_id=run_id,
            agent_names=self.registry.names,
            known=self.histories.known(),
        )

    async def continue_run(self, claimed: ClaimedRun) -> None:
        """Continue a run this worker claimed until it ends or pauses, renewing its lease meanwhile.

        It stops at the first write the store refuses (`LeaseLost`): its lease ran out and
        another worker took the run, or an admin cancelled the run.
        """
        lease = _Lease(self.lease_seconds)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep_lease, claimed.run_id, lease)
                with (
                    with_run(claimed.run_id),  # every line logged while it runs names the run
                    tracing.resuming(
                        claimed.run_id, claimed.agent_name, claimed.trace_context, resumed=claimed.message_count > 0
                    ),
                ):
                    await self._continue(claimed, lease)
                group.cancel_scope.cancel()
        except* LeaseLost as lost:  # from the task group, so in an exception group
            if any(isinstance(error, LeaseLost) and error.status == RunStatus.CANCELLED for error in lost.exceptions):
                logger.warning("run %s was cancelled; this worker stopped and stored nothing more", claimed.run_id)
            else:
                reason = lost.exceptions[0]
                logger.warning("run %s: let go (%s); another worker continues it", claimed.run_id, reason)

    async def _keep_lease(self, run_id: str, lease: _Lease) -> None:
        """Renew the lease every third of it; through an outage, keep trying (writes check the lease anyway)."""
        outage = Outage(f"renewing the lease on run {run_id}", logger)
        while True:
            await anyio.sleep(self.lease_seconds / 3 if not outage.ongoing else min(1.0, self.lease_seconds / 10))
            try:
                await self.store.runs.renew_lease(run_id, self.worker_id, lease_seconds=self.lease_seconds)
            except LeaseLost:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                outage.failed(describe(exc))
                continue
            lease.renewed()
            outage.succeeded()

    async def _write(
        self, what: str, run_id: str, lease: _Lease, write: Callable[[], Awaitable[None]], landed: _Landed
    ) -> None:
        """Carry out a write of the held run, retrying transient failures while the lease lasts.

        Before a retry, the stored run says whether the failed attempt landed after all, so a
        write is never applied twice.
        """
        outage = Outage(f"run {run_id}: {what}", logger)
        attempt = True
        while True:
            if attempt:
                try:
                    await write()
                except LeaseLost:
                    raise
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    delay = outage.failed(describe(exc))
                else:
                    outage.succeeded()
                    lease.renewed()
                    return
            else:
                delay = outage.failed("could not check whether the write landed")
            if delay > lease.left():
                raise LeaseLost(f"the database stayed unreachable until the lease on run {run_id} ran out")
            await anyio.sleep(delay)
            try:
                run = await self.store.runs.get_run(run_id)
                done = await landed(run)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                attempt = False  # ask again before writing again
                continue
            if done:
                outage.succeeded()
                lease.renewed()
                return
            if run.status != RunStatus.RESUMING or run.lease_owner != self.worker_id:
                raise LeaseLost(f"run {run_id} is {run.status}, no longer held by {self.worker_id}", status=run.status)
            attempt = True

    async def _continue(self, claimed: ClaimedRun, lease: _Lease) -> None:
        run_id = claimed.run_id
        held = self.histories.take(run_id, claimed.history_from, claimed.history)  # held again once paused again
        totals: Tally | None = None  # None: the engine counts them from the whole history
        if held is not None:
            history, totals = held
        elif claimed.history_from == 0:
            history = list(claimed.history)
        else:
            history = await self.store.runs.load_history(run_id)
        tracing.waited(history)
        stored = _StoredRun(self, claimed, lease, stored_messages=len(history))
        try:
            entry = self.registry.get(claimed.agent_name)
            engine = stored.engine = entry.resumable_engine
            history_codec(engine)  # a history the store keeps (and the view reads), for every engine it continues
            snapshot = await self.store.runs.load_state(run_id) if engine.state is StateKind.SNAPSHOT else None
            turn = Turn(
                run_id=run_id,
                prompt=claimed.prompt,
                deps=await entry.make_deps(claimed.deps),
                verdicts=self._verdicts(run_id, engine.waiting_on(history), claimed.decided_calls),
                history=history,
                tally=totals,
                snapshot=snapshot,
            )
            end = await engine.resume(entry.agent, turn, stored)
        except LeaseLost:
            raise
        except ApprovalsError as exc:
            await stored.fail(str(exc), exc.tool_call_id if isinstance(exc, ToolExecutionError) else None)
            return
        except Exception as exc:  # a bug in user code outside tools, or a step the database refuses
            if is_transient(exc):
                raise  # the lease ran out during an outage is LeaseLost; anything else: let the run go
            logger.exception("run %s failed", run_id)
            await stored.fail(_failure_text(exc))
            return
        remaining = end.messages[stored.count :]
        try:
            if isinstance(end, Paused):
                await stored.pause(remaining, end.requests, end.snapshot)
                if end.tally is not None:
                    self.histories.keep(run_id, end.messages, end.tally)
                elif stored.engine is not None and stored.engine.state is StateKind.SNAPSHOT:
                    self.histories.keep(run_id, end.messages, MessageCount(run_id, len(end.messages)))
                names = ", ".join(call.tool_name for call in end.requests.approvals)
                logger.info("run %s (%s) paused: waiting for a person on %s", run_id, claimed.agent_name, names)
                return
            assert isinstance(end, Completed)
            await stored.complete(remaining, end.output, end.snapshot)
        except LeaseLost:
            raise
        except Exception as exc:  # the database refuses what the model said: fail the run, never retry it forever
            if is_transient(exc):
                raise
            logger.exception("run %s: its last step cannot be stored", run_id)
            await stored.fail(_failure_text(exc))
            return
        if history:
            logger.info("run %s (%s) completed", run_id, claimed.agent_name)
        else:
            logger.info(
                "run %s (%s) completed without asking anyone: the model called no tool that needs approval",
                run_id,
                claimed.agent_name,
            )

    @staticmethod
    def _verdicts(run_id: str, pending: list[str], decided: dict[str, DecidedCall]) -> dict[str, Verdict]:
        """The people's verdicts on the calls the run waits on (`pending`, as its engine reads its history)."""
        missing = [call_id for call_id in pending if call_id not in decided]
        if missing:
            raise UserError(f"Run {run_id!r} has calls without stored decisions: {', '.join(missing)}")
        return {call_id: verdict_of(decided[call_id]) for call_id in pending}


class _StoredRun:
    """The store's side of a run this worker continues: the run's `RunHooks` (`approvals.engines.seam`), and how it
    ends.

    It keeps count of what is stored and which approved calls have started, so each write
    says exactly what is new (messages, and the executing calls whose results come with
    them), and a failed run hands back the approved calls it never started.
    """

    def __init__(self, resumer: Resumer, claimed: ClaimedRun, lease: _Lease, *, stored_messages: int) -> None:
        self._resumer = resumer
        self._store = resumer.store
        self._claimed = claimed
        self._lease = lease
        self._run_id = claimed.run_id
        self._worker = resumer.worker_id
        self.count = stored_messages
        """Messages of the run stored so far."""
        self.engine: ResumableEngine | None = None
        """The run's engine, once its agent is known: it reads the outcomes of the calls in each step."""
        self._executing: set[str] = set()  # marked executing, results not yet stored
        self._started: set[str] = set()  # handed to their tools

    async def before_approved_calls(self, tool_call_ids: list[str]) -> None:
        """Commit the approved calls as executing before any runs (those the claim found already are)."""
        fresh = [call_id for call_id in tool_call_ids if call_id not in self._claimed.executing]
        if fresh:

            async def landed(run: RunRow) -> bool:
                calls = {c.tool_call_id: c.status for c in await self._store.calls.run_calls(self._run_id)}
                return all(calls.get(call_id) == CallStatus.EXECUTING for call_id in fresh)

            await self._write(
                "marking calls executing",
                lambda: self._store.runs.mark_executing(self._run_id, self._worker, fresh),
                landed,
            )
        self._started.update(tool_call_ids)
        self._executing.update(tool_call_ids)

    async def on_step(self, messages: list[Any]) -> None:
        """Append a completed step, with the results of the calls marked executing before it."""
        results = self._outcomes(messages)
        await self._write(
            "storing a step",
            lambda: self._store.runs.append_step(
                self._run_id, self._worker, messages, lease_seconds=self._resumer.lease_seconds, results=results
            ),
            self._grown_by(len(messages), RunStatus.RESUMING),
        )
        self.count += len(messages)
        self._executing.clear()  # approved calls run before the step that follows them is stored

    async def pause(self, remaining: list[Any], requests: DeferredToolRequests, snapshot: Snapshot | None) -> None:
        results = self._outcomes(remaining)
        await self._write(
            "pausing it",
            lambda: self._store.runs.pause(
                self._run_id, self._worker, remaining, requests, results=results, snapshot=snapshot
            ),
            self._grown_by(len(remaining), RunStatus.AWAITING_APPROVAL, RunStatus.READY),
        )

    async def complete(self, remaining: list[Any], output: Any, snapshot: Snapshot | None) -> None:
        results = self._outcomes(remaining)
        await self._write(
            "recording that it completed",
            lambda: self._store.runs.finish(
                self._run_id, self._worker, remaining, output=output, results=results, snapshot=snapshot
            ),
            self._grown_by(len(remaining), RunStatus.COMPLETED),
        )

    async def fail(self, error: str, failed_tool_call_id: str | None = None) -> None:
        # calls the claim marked executing that never ran go back to approved: a retry runs them
        unstarted = self._claimed.executing - self._started
        await self._write(
            "recording that it failed",
            lambda: self._store.runs.finish(
                self._run_id, self._worker, [], error=error, failed_tool_call_id=failed_tool_call_id, released=unstarted
            ),
            self._grown_by(0, RunStatus.FAILED),
        )
        logger.info("run %s (%s) failed: %s", self._run_id, self._claimed.agent_name, error)

    def _outcomes(self, messages: list[Any]) -> CallOutcomes:
        """What the calls marked executing came to, as far as `messages` settle them (the engine reads them)."""
        if not self._executing or not messages:
            return {}  # the usual step: no approved call ran before it, nothing to read
        if self.engine is None:
            raise UserError(f"run {self._run_id}: calls ran before its agent was known")
        return self.engine.outcomes(messages, self._executing)

    def _grown_by(self, count: int, *statuses: RunStatus) -> _Landed:
        """Whether the stored run has exactly `count` more messages (and one of `statuses`)."""
        expected = self.count + count

        async def landed(run: RunRow) -> bool:
            return run.message_count == expected and (not statuses or run.status in statuses)

        return landed

    async def _write(self, what: str, write: Callable[[], Awaitable[None]], landed: _Landed) -> None:
        await self._resumer._write(what, self._run_id, self._lease, write, landed)


async def run_worker(
    store: Store,
    registry: AgentRegistry,
    *,
    worker_id: str | None = None,
    concurrency: int = 1,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    expire_interval: float = 15.0,
    stop: anyio.Event | None = None,
    handle_signals: bool = False,
    health: WorkerHealth | None = None,
) -> None:
    """Resume ready runs, up to `concurrency` at once, until `stop` is set (or SIGTERM/SIGINT with `handle_signals`).

    A run spends most of its time waiting for its model, so one process keeps several
    moving; each is claimed under its own lease. Between claims the worker waits for
    wake-ups (NOTIFY on PostgreSQL), or until the soonest lease of another worker runs out
    (so a dead worker's run is taken over within `lease_seconds`); `poll_interval` is only
    a safety net. It outlives database outages: claims, expiry and its LISTEN connection
    back off and retry, with one log line when an outage starts and one when it ends.
    A stop request lets the runs in progress finish first.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    stop = stop or anyio.Event()
    health = health or WorkerHealth()
    resumer = Resumer(store, registry, worker_id=worker_id, lease_seconds=lease_seconds)
    slots = anyio.Semaphore(concurrency)
    claims = Outage("looking for ready runs", logger)
    async with anyio.create_task_group() as group:
        if handle_signals:
            group.start_soon(_stop_on_signals, stop)
        group.start_soon(_expire_until_stopped, store, expire_interval, stop, health)
        async with store.notifier.listen(READY_CHANNEL) as wakeups, anyio.create_task_group() as running:
            while not stop.is_set():
                await slots.acquire()  # a run in progress ends before another is claimed
                if stop.is_set():
                    slots.release()
                    break
                try:
                    claimed = await resumer.claim()
                except Exception as exc:
                    slots.release()
                    health.outage = True
                    if not is_transient(exc) and not claims.ongoing:
                        logger.exception("looking for ready runs failed unexpectedly")
                    await _sleep_unless_stopped(claims.failed(describe(exc)), stop)
                    continue
                claims.succeeded()
                health.reached_database(claimed=claimed is not None)
                if claimed is None:
                    slots.release()
                    await _wait_for_wakeup(wakeups, stop, await _idle_wait(store, registry, poll_interval))
                    continue
                running.start_soon(_continue_in_slot, resumer, claimed, slots)
        group.cancel_scope.cancel()


async def _idle_wait(store: Store, registry: AgentRegistry, poll_interval: float) -> float:
    """Seconds to wait for a wake-up: until the soonest lease runs out, at most `poll_interval`."""
    try:
        ends = await store.runs.next_lease_end(registry.names)
    except Exception as exc:
        if not is_transient(exc):
            raise
        return min(poll_interval, 1.0)  # the next claim finds out whether the database is back
    if ends is None:
        return poll_interval
    if ends.tzinfo is None:
        ends = ends.replace(tzinfo=dt.UTC)
    until = (ends - clock.now()).total_seconds() + 0.05
    return max(0.05, min(poll_interval, until))


async def _continue_in_slot(resumer: Resumer, claimed: ClaimedRun, slots: anyio.Semaphore) -> None:
    """One run of a worker's several: its failure is logged and leaves the others running."""
    try:
        await resumer.continue_run(claimed)
    except Exception as exc:
        # the run keeps its lease until it expires; then any worker recovers it like a crashed one
        if is_transient(exc):
            logger.warning("run %s: let go during a database outage (%s)", claimed.run_id, describe(exc))
        else:
            logger.exception("run %s: the worker could not record its progress", claimed.run_id)
    finally:
        slots.release()


async def _expire_until_stopped(store: Store, seconds: float, stop: anyio.Event, health: WorkerHealth) -> None:
    """Turn calls past their approval TTL into denials every `seconds`, and fold the metrics' deltas into their
    sums, so they stay few where nothing scrapes `/metrics`; an outage only delays both."""
    outage = Outage("expiring calls past their deadline", logger)
    while not stop.is_set():
        try:
            await store.calls.expire()
            await fold_metrics(store.db)
        except Exception as exc:
            health.outage = True
            await _sleep_unless_stopped(outage.failed(describe(exc)), stop)
            continue
        outage.succeeded()
        health.reached_database()
        await _sleep_unless_stopped(seconds, stop)


async def _sleep_unless_stopped(seconds: float, stop: anyio.Event) -> None:
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
