"""`run_worker` keeps several runs moving at once, never more than asked, and stops gracefully."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest

from approvals import Agent, RunContext
from approvals.engines.native.models import TestModel
from approvals.store import Actor, Store
from approvals.worker.resumer import AgentRegistry, run_worker

from ..eventually import eventually

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")


@dataclass
class Gate:
    """Where the runs' tool waits: counts who is inside, and lets them all out at once."""

    opened: anyio.Event = field(default_factory=anyio.Event)
    inside: int = 0
    most_inside: int = 0
    entered: int = 0

    async def pass_through(self) -> None:
        self.inside += 1
        self.entered += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            await self.opened.wait()
        finally:
            self.inside -= 1


gated_agent: Agent[Gate] = Agent(TestModel([("wait_at_gate", {})]), name="gated")


@gated_agent.tool
async def wait_at_gate(ctx: RunContext[Gate]) -> str:
    """Wait, like a slow model or API call, until the test opens the gate."""
    await ctx.deps.pass_through()
    return "through"


def registry_with(gate: Gate) -> AgentRegistry:
    agents = AgentRegistry()
    agents.register(gated_agent, deps_factory=lambda _data: gate)
    return agents


async def start_runs(store: Store, count: int) -> list[str]:
    return [await store.runs.start_run("gated", f"run {i}", actor=SERVICE) for i in range(count)]


@asynccontextmanager
async def worker(store: Store, gate: Gate, concurrency: int, stop: anyio.Event) -> AsyncIterator[anyio.Event]:
    """A worker in the background; the yielded event is set once `run_worker` has returned."""
    returned = anyio.Event()

    async def serve() -> None:
        await run_worker(
            store, registry_with(gate), concurrency=concurrency, poll_interval=3600, expire_interval=3600, stop=stop
        )
        returned.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        yield returned
        stop.set()
        gate.opened.set()


async def statuses(store: Store, run_ids: list[str]) -> list[str]:
    return [(await store.runs.get_run(run_id)).status for run_id in run_ids]


async def test_a_worker_continues_up_to_its_concurrency_at_once(store: Store) -> None:
    run_ids = await start_runs(store, 5)
    gate = Gate()
    async with worker(store, gate, 3, anyio.Event()):
        await eventually(lambda: gate.inside == 3, seconds=20, interval=0.01)
        await anyio.sleep(0.3)  # room for a fourth run to be claimed, were the limit not kept
        assert gate.inside == 3
        assert sorted(await statuses(store, run_ids)) == ["ready", "ready", "resuming", "resuming", "resuming"]

        gate.opened.set()
        await eventually(lambda: gate.entered == 5, seconds=20, interval=0.01)
        with anyio.fail_after(20):
            while await statuses(store, run_ids) != ["completed"] * 5:
                await anyio.sleep(0.02)
    assert gate.most_inside == 3
    for run_id in run_ids:
        assert (await store.runs.get_run(run_id)).output == 'Done. wait_at_gate returned "through".'


async def test_stopping_lets_the_runs_in_progress_finish_and_claims_no_more(store: Store) -> None:
    run_ids = await start_runs(store, 4)
    gate = Gate()
    stop = anyio.Event()
    async with worker(store, gate, 2, stop) as returned:
        await eventually(lambda: gate.inside == 2, seconds=20, interval=0.01)
        stop.set()
        await anyio.sleep(0.2)
        assert not returned.is_set()  # the two runs in progress are not abandoned

        gate.opened.set()
        with anyio.fail_after(20):
            await returned.wait()
    assert sorted(await statuses(store, run_ids)) == ["completed", "completed", "ready", "ready"]
    assert gate.entered == 2


async def test_a_worker_needs_room_for_at_least_one_run(store: Store) -> None:
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        await run_worker(store, AgentRegistry(), concurrency=0)
