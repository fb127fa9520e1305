"""Resuming runs across processes, racing workers, leases, cancellation and wake-ups (the native engine).

What every engine does (a worker killed mid-call among it) is checked in tests/engines/conformance.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import pytest

from approvals import Agent, LeaseLost, RunContext, Tool, UsageLimits
from approvals.calls import clock
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, Deny
from approvals.engines.native.deferred import DeferredToolRequests
from approvals.engines.native.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
)
from approvals.engines.native.models import FunctionModel
from approvals.engines.native.models.function import AgentInfo
from approvals.engines.native.usage import RunTotals
from approvals.store import Actor, Database, Store
from approvals.worker.history_cache import HistoryCache
from approvals.worker.resumer import AgentRegistry, Resumer, run_worker

from .agents import Gate, email_agent, shop_agent, slow_agent
from .conftest import connections_in_use, record_refused_writes

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")
ADMIN = Actor("ada", "admin")
ROOT = Path(__file__).resolve().parents[2]


def registry() -> AgentRegistry:
    return AgentRegistry([shop_agent, email_agent])


def resume_in_subprocess(db_url: str, run_id: str, lease_seconds: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.store.resume_in_subprocess", db_url, run_id, str(lease_seconds)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def tool_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def test_paused_in_one_process_resumed_in_another(store: Store, db_url: str, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("shop", "refund and delete", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    first = resume_in_subprocess(db_url, run_id)
    assert first.returncode == 0, first.stderr
    assert (await store.runs.get_run(run_id)).status == "awaiting_approval"
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    await store.calls.decide(calls["refund"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="Keep the customer."), actor=ALICE)

    second = resume_in_subprocess(db_url, run_id)
    assert second.returncode == 0, second.stderr
    run = await store.runs.get_run(run_id)
    assert run.status == "completed"
    assert "delete_customer was denied (Keep the customer.)" in run.output
    assert tool_log(tmp_path) == ["refund A-1 450"]


async def test_two_workers_race_for_one_run_and_exactly_one_executes(db_url: str, tmp_path: Path) -> None:
    databases = [Database(db_url), Database(db_url)]
    stores = [Store(d) for d in databases]
    try:
        run_id = await stores[0].runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
        await Resumer(stores[0], registry()).resume(run_id)
        calls = {c.tool_name: c for c in await stores[0].calls.run_calls(run_id)}
        await stores[0].calls.decide(calls["refund"].id, Approve(), actor=ALICE)
        await stores[0].calls.decide(calls["delete_customer"].id, Approve(), actor=ALICE)
        await stores[1].calls.decide(calls["delete_customer"].id, Approve(), actor=BOB)

        claimed: list[str | None] = []

        async def work(index: int) -> None:
            claimed.append(await Resumer(stores[index], registry(), worker_id=f"w{index}").resume())

        async with anyio.create_task_group() as group:
            group.start_soon(work, 0)
            group.start_soon(work, 1)
        assert sorted(claimed, key=str) == sorted([run_id, None], key=str)
        assert sorted(tool_log(tmp_path)) == ["delete 7", "refund A-1 450"]  # each approved call ran once
        assert (await stores[0].runs.get_run(run_id)).status == "completed"
    finally:
        for database in databases:
            await database.dispose()


async def test_a_worker_that_lost_its_lease_cannot_write(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    claimed = await store.runs.claim("slow-worker", lease_seconds=0.2)
    assert claimed is not None and claimed.run_id == run_id
    with clock.using(clock.SkippingClock()) as skipping:
        skipping.advance(0.3)  # the slow worker's lease runs out
        assert await store.runs.claim("fast-worker", lease_seconds=60) is not None
        late = [ModelRequest(parts=[UserPromptPart(content="late")])]
        with pytest.raises(LeaseLost):
            await store.runs.append_step(run_id, "slow-worker", late)
        with pytest.raises(LeaseLost):
            await store.runs.mark_executing(run_id, "slow-worker", ["call-1"])
        with pytest.raises(LeaseLost):
            await store.runs.pause(run_id, "slow-worker", late, DeferredToolRequests())
        with pytest.raises(LeaseLost):
            await store.runs.finish(run_id, "slow-worker", late, output="late")
        assert await store.runs.load_history(run_id) == []  # nothing the slow worker sent was kept
        assert (await store.runs.get_run(run_id)).lease_owner == "fast-worker"
        assert connections_in_use(store) == 0


async def test_an_admin_cancels_a_run_a_worker_holds_and_every_later_write_of_the_worker_is_refused(
    store: Store, tmp_path: Path
) -> None:
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await Resumer(store, registry()).resume(run_id)
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    await store.calls.decide(calls["refund"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="no"), actor=ALICE)
    claimed = await store.runs.claim("w1", run_id=run_id)
    assert claimed is not None and claimed.executing  # the refund is executing: its tool may be running
    history = await store.runs.load_history(run_id)

    await store.runs.cancel_run(run_id, actor=ADMIN, reason="wrong customer")

    run = await store.runs.get_run(run_id)
    assert (run.status, run.error, run.lease_owner, run.lease_expires_at) == ("cancelled", "wrong customer", None, None)
    statuses = {c.tool_name: c.status for c in await store.calls.run_calls(run_id)}
    assert statuses == {"refund": "outcome_unknown", "delete_customer": "denied"}
    events = (await store.audit.audit_events(run_id=run_id, newest_first=False)).items
    assert [(e.action, e.actor, e.subject_id) for e in events[-2:]] == [
        ("run.cancelled", "ada", run_id),
        ("call.outcome_unknown", "ada", calls["refund"].id),
    ]
    assert events[-2].details == {"reason": "wrong customer"}

    late = [ModelRequest(parts=[UserPromptPart(content="late")])]
    late_result = (CallStatus.SUCCEEDED, "late")
    writes: list[Callable[[], Awaitable[None]]] = [
        lambda: store.runs.append_step(run_id, "w1", late),
        lambda: store.runs.mark_executing(run_id, "w1", list(claimed.executing)),
        lambda: store.runs.pause(run_id, "w1", late, DeferredToolRequests()),
        lambda: store.runs.finish(
            run_id, "w1", late, output="late", results=dict.fromkeys(claimed.executing, late_result)
        ),
        lambda: store.runs.renew_lease(run_id, "w1"),
    ]
    for write in writes:
        with pytest.raises(LeaseLost) as lost:
            await write()
        assert lost.value.status == "cancelled"
    assert await store.runs.load_history(run_id) == history  # nothing the worker sent was kept
    assert (await store.runs.get_run(run_id)).status == "cancelled"
    assert (await store.calls.get_call(calls["refund"].id)).status == "outcome_unknown"
    assert len((await store.audit.audit_events(run_id=run_id)).items) == len(events)

    settled = await store.calls.decide(calls["refund"].id, Answer(content="Refunded in the payment system."), actor=BOB)
    assert settled.status == "answered"  # a person settles it; the run stays cancelled
    assert (await store.runs.get_run(run_id)).status == "cancelled"
    assert connections_in_use(store) == 0
    assert (await store.audit.verify_audit()).ok


async def test_a_worker_inside_a_slow_tool_stops_when_its_run_is_cancelled(store: Store, db_url: str) -> None:
    gate = Gate()
    agents = AgentRegistry()
    agents.register(slow_agent, deps_factory=lambda _data: gate)
    run_id = await store.runs.start_run("slow", "transfer 5", actor=SERVICE)
    await Resumer(store, agents).resume(run_id)
    [call] = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Approve(), actor=ALICE)
    worker_db = Database(db_url)  # the worker's own connections, as in another process
    worker_store = Store(worker_db)
    refused = record_refused_writes(worker_store)
    resumed: list[str | None] = []
    try:
        async with anyio.create_task_group() as group:

            async def work() -> None:
                resumed.append(await Resumer(worker_store, agents, worker_id="slow-worker").resume(run_id))

            group.start_soon(work)
            with anyio.fail_after(20):
                await gate.entered.wait()  # the worker holds the run, inside the tool
            assert (await store.calls.get_call(call.id)).status == "executing"
            history = await store.runs.load_history(run_id)

            await store.runs.cancel_run(run_id, actor=ADMIN, reason="customer called")

            assert (await store.runs.get_run(run_id)).status == "cancelled"
            assert (await store.calls.get_call(call.id)).status == "outcome_unknown"
            gate.opened.set()  # the tool returns; the worker tries to store its result
    finally:
        await worker_db.dispose()
    assert resumed == [run_id]  # the worker stopped and came back, without an error
    assert [lost.status for lost in refused] == ["cancelled"]  # its next write was refused, and it wrote no more
    assert await store.runs.load_history(run_id) == history
    stored = await store.calls.get_call(call.id)
    assert (stored.status, stored.result) == ("outcome_unknown", None)
    run = await store.runs.get_run(run_id)
    assert (run.status, run.error, run.output) == ("cancelled", "customer called", None)


async def test_worker_wakes_on_a_decision_without_polling(db_url: str, tmp_path: Path) -> None:
    worker_db, reviewer_db = Database(db_url), Database(db_url)
    worker_store = Store(worker_db)
    # SQLite serves one process: reviewer and worker share its in-process notifier
    reviewer_store = Store(reviewer_db, worker_store.notifier if worker_db.is_sqlite else None)
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_worker(worker_store, registry(), poll_interval=3600, expire_interval=3600, stop=stop)
            )
            await anyio.sleep(0.2)  # the worker is listening
            with anyio.fail_after(20):  # far below the hour-long poll interval
                run_id = await reviewer_store.runs.start_run(
                    "mailer", "mail", actor=SERVICE, deps={"log": str(tmp_path / "log")}
                )
                while (await reviewer_store.runs.get_run(run_id)).status != "awaiting_approval":
                    await anyio.sleep(0.02)
                [call] = await reviewer_store.calls.run_calls(run_id)
                await reviewer_store.calls.decide(call.id, Approve(), actor=ALICE)
                while (await reviewer_store.runs.get_run(run_id)).status != "completed":
                    await anyio.sleep(0.02)
            stop.set()
        assert tool_log(tmp_path) == ["email ann@example.com"]
    finally:
        await worker_db.dispose()
        await reviewer_db.dispose()


async def test_deps_are_stored_as_data_and_built_by_the_agents_factory(store: Store, tmp_path: Path) -> None:
    built: list[object] = []

    def factory(data: dict[str, str]) -> dict[str, str]:
        deps = {**data, "log": str(tmp_path / "log")}  # a resource the stored data only names
        built.append(data)
        return deps

    agents = AgentRegistry()
    agents.register(email_agent, deps_factory=factory)
    run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE, deps={"mailbox": "support"})
    await Resumer(store, agents).resume(run_id)
    [call] = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Approve(), actor=ALICE)
    await Resumer(store, agents).resume(run_id)
    assert built == [{"mailbox": "support"}, {"mailbox": "support"}]  # rebuilt from data at every resume
    assert tool_log(tmp_path) == ["email ann@example.com"]
    assert (await store.runs.get_run(run_id)).deps == {"mailbox": "support"}


async def test_a_worker_resumes_from_the_history_it_holds_and_reads_what_others_added(store: Store) -> None:
    """Worker A pauses a run, B continues it, then A again: A's held prefix plus what B stored is the history."""
    seen: list[int] = []

    def ask_twice(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(len(messages))
        asked = sum(1 for m in messages if isinstance(m, ModelResponse) and m.tool_calls)
        if asked == 2:
            return ModelResponse(parts=[TextPart(content="done")])
        return ModelResponse(parts=[ToolCallPart(tool_name="act", args={"n": asked}, tool_call_id=f"act-{asked}")])

    def act(n: int) -> int:
        """Act."""
        return n

    agent: Agent[None] = Agent(FunctionModel(ask_twice), name="twice", tools=[Tool(act, requires_approval=True)])
    a = Resumer(store, AgentRegistry([agent]), worker_id="a")
    b = Resumer(store, AgentRegistry([agent]), worker_id="b")
    run_id = await store.runs.start_run("twice", "go", actor=SERVICE)

    async def approve() -> None:
        [call] = [c for c in await store.calls.run_calls(run_id) if c.status == "pending"]
        await store.calls.decide(call.id, Approve(), actor=ALICE)

    await a.resume(run_id)
    assert a.histories.known() == {run_id: 2}
    await approve()
    await b.resume(run_id)
    await approve()
    await a.resume(run_id)  # holds 2 messages; the claim sends the rest
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error
    stored = await store.runs.load_history(run_id)
    assert seen == [1, 3, 5]  # the model saw the whole history every time
    assert [m.kind for m in stored] == ["request", "response"] * 3
    assert run.message_count == len(stored) and a.histories.known() == {}


def test_a_held_history_counts_only_the_messages_added_since() -> None:
    """`take` folds only `newer` into the held totals, and they equal the totals counted from scratch."""
    before: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content="go")], run_id="r"),
        ModelResponse(parts=[ToolCallPart(tool_name="act", args={}, tool_call_id="a")], run_id="r"),
    ]
    newer: list[ModelMessage] = [
        ModelRequest(parts=[ToolReturnPart(tool_name="act", content=1, tool_call_id="a")], run_id="r"),
        ModelResponse(
            parts=[ToolCallPart(tool_name="act", args={}, tool_call_id="b")],
            usage=Usage(requests=1, input_tokens=7, output_tokens=3),
            run_id="r",
        ),
    ]
    cache = HistoryCache()
    cache.keep("r", list(before), RunTotals.of(before, "r"))
    assert cache.known() == {"r": 2}
    taken = cache.take("r", 2, newer)
    assert taken is not None
    messages, totals = taken
    assert messages == before + newer
    assert totals == RunTotals.of(before + newer, "r")
    assert (totals.usage.requests, totals.usage.total_tokens, totals.usage.tool_calls) == (2, 10, 1)
    assert totals.tool_call_ids == {"a", "b"}
    assert cache.known() == {}  # its resume owns it until it is kept again
    cache.keep("r", messages, totals)
    assert cache.take("r", 3, newer[1:]) is None  # not exactly the held messages: read and counted whole
    with pytest.raises(ValueError, match="totals of 2 messages"):
        cache.keep("r", before + newer, RunTotals.of(before, "r"))


@pytest.mark.parametrize(
    ("limits", "refusal", "steps"),
    [
        (UsageLimits(request_limit=3), "request limit of 3", [1, 2, 3]),
        (UsageLimits(total_tokens_limit=40), "total_tokens_limit of 40", [1, 2]),
        (UsageLimits(tool_calls_limit=2), "tool_calls_limit of 2", [1, 2]),
    ],
)
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_usage_limits_and_run_step_hold_across_pauses_whether_the_worker_holds_the_run_or_not(
    store: Store, warm: bool, limits: UsageLimits, refusal: str, steps: list[int]
) -> None:
    """A worker holding the run counts on from its held totals; a fresh one counts the stored history: same run."""
    ran_at: list[int] = []

    def ask(messages: Sequence[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked = sum(1 for m in messages if isinstance(m, ModelResponse))
        call = ToolCallPart(tool_name="act", args={"n": asked}, tool_call_id=f"act-{asked}")
        return ModelResponse(parts=[call], usage=Usage(requests=1, input_tokens=10, output_tokens=5))

    def act(ctx: RunContext[None], n: int) -> int:
        """Act."""
        ran_at.append(ctx.run_step)
        return n

    agent: Agent[None] = Agent(
        FunctionModel(ask), name="counted", tools=[Tool(act, requires_approval=True)], usage_limits=limits
    )
    worker = Resumer(store, AgentRegistry([agent]), worker_id="w")
    run_id = await store.runs.start_run("counted", "go", actor=SERVICE)
    await worker.resume(run_id)
    while (run := await store.runs.get_run(run_id)).status == "awaiting_approval":
        assert worker.histories.known() == {run_id: run.message_count}
        [call] = [c for c in await store.calls.run_calls(run_id) if c.status == "pending"]
        await store.calls.decide(call.id, Approve(), actor=ALICE)
        if not warm:
            worker = Resumer(store, AgentRegistry([agent]), worker_id="w")  # holds nothing of the run
        await worker.resume(run_id)
    assert run.status == "failed" and run.error is not None and refusal in run.error, run.error
    assert ran_at == steps  # each approved call ran at the step of the request that asked for it
