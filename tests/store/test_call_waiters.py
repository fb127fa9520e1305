"""Callers waiting for decisions share one registry per process (`store.waiters`), on SQLite and PostgreSQL.

A decision wakes its own call's waiters and no others; a decision made by another process (another
`Store`, whose announcements this one's notifier does not hear on SQLite) is found by the watch's
look at the audit log, also after the waiter that held the watch left; many waiters on the same
calls are each answered, and each approved call handed out once.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from approvals.calls import CallRequest, validate_request
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Approve
from approvals.store import Actor, Database, Store
from approvals.store.models import ToolCallRow
from approvals.store.waiters import CallWaiters, call_waiters
from approvals.store.wakeups import PENDING_CHANNEL

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer", person=False)
REVIEWER = Actor("rita", "reviewer")


async def ask(store: Store, session: str) -> ToolCallRow:
    request = CallRequest(engine="gate", source="app", session_id=session, tool_name="refund", args={"amount": 5})
    call, _ = await store.calls.request_call(validate_request(request), actor=SERVICE)
    return call


@asynccontextmanager
async def serving(store: Store) -> AsyncIterator[CallWaiters]:
    """The store as `serve` runs it: a relay hears the PENDING channel for the process; its waiters' registry."""
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        await group.start(functools.partial(store.notifier.relay, (PENDING_CHANNEL,), until=stop))
        registry = call_waiters(store.db, store.notifier)
        assert registry is not None
        try:
            yield registry
        finally:
            stop.set()


async def until(condition: object) -> None:
    """Until `condition()` holds: the waiting tasks were scheduled and registered."""
    with anyio.fail_after(10):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def test_a_decision_wakes_its_own_calls_waiters_only(store: Store) -> None:
    calls = [await ask(store, session) for session in ("a", "b", "c")]
    answers: dict[str, ToolCallRow] = {}

    async def wait(call: ToolCallRow) -> None:
        answers[call.id] = await store.calls.wait_for_decision(call.id, seconds=60)

    async with serving(store) as registry, anyio.create_task_group() as group:
        # another call's waiter holds the watch first: a watcher that leaves wakes one other to take it over,
        # which is a wake-up of its own, not the decision's
        group.start_soon(wait, calls[1])
        await until(lambda: registry._watcher is not None)
        for call in (calls[0], calls[2]):
            group.start_soon(wait, call)
        await until(lambda: len(registry) == 3)
        await store.calls.decide(calls[0].id, Approve(), actor=REVIEWER)
        await until(lambda: calls[0].id in answers)
        others = [waiter for call in calls[1:] for waiter in registry._by_run[call.run_id]]
        assert len(others) == 2 and not any(waiter.event.is_set() for waiter in others)
        for call in calls[1:]:
            await store.calls.decide(call.id, Approve(), actor=REVIEWER)
    assert {call_id: call.status for call_id, call in answers.items()} == {c.id: CallStatus.APPROVED for c in calls}
    assert len(registry) == 0


async def test_another_process_decision_is_found_also_after_the_watcher_left(store: Store, db_url: str) -> None:
    first, second = await ask(store, "first"), await ask(store, "second")
    other = Store(Database(db_url))  # another process: on SQLite its announcements never reach `store`
    answers: dict[str, ToolCallRow] = {}

    async def wait(call: ToolCallRow) -> None:
        answers[call.id] = await store.calls.wait_for_decision(call.id, seconds=60)

    try:
        async with serving(store) as registry, anyio.create_task_group() as group:
            group.start_soon(wait, first)
            await until(lambda: registry._watcher is not None)  # the first waiter holds the watch
            group.start_soon(wait, second)
            await until(lambda: len(registry) == 2)
            await other.calls.decide(first.id, Approve(), actor=REVIEWER)
            await until(lambda: first.id in answers)  # the watcher left: the second waiter takes the watch
            await other.calls.decide(second.id, Approve(), actor=REVIEWER)
    finally:
        await other.db.dispose()
    assert answers[first.id].status == answers[second.id].status == CallStatus.APPROVED


async def test_many_waiters_are_each_answered_and_each_call_handed_out_once(store: Store, db_url: str) -> None:
    calls = [await ask(store, f"s{i}") for i in range(60)]
    other = Store(Database(db_url))
    handed: Counter[str] = Counter()
    answered: Counter[str] = Counter()

    async def wait(call: ToolCallRow) -> None:  # as the gate does: wait, then take the approved call
        decided = await store.calls.wait_for_decision(call.id, seconds=60)
        answered[call.id] += 1
        if decided.status == CallStatus.APPROVED:
            _, took = await store.calls.hand_out(call.id, actor=SERVICE)
            handed[call.id] += took

    async def decide(chunk: list[ToolCallRow]) -> None:
        for call in chunk:
            await other.calls.decide(call.id, Approve(), actor=REVIEWER)

    try:
        async with serving(store) as registry, anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(wait, call)
                group.start_soon(wait, call)
            await until(lambda: len(registry) == 2 * len(calls))
            for part in range(3):
                group.start_soon(decide, calls[part::3])
    finally:
        await other.db.dispose()
    assert answered == {call.id: 2 for call in calls}
    assert handed == {call.id: 1 for call in calls}
    assert len(registry) == 0


async def test_calls_decided_one_by_one_in_another_process_each_wake_their_waiter(store: Store, db_url: str) -> None:
    """The watch passes on however waiters leave: the watcher, or others woken at the same look."""
    calls = [await ask(store, f"s{i}") for i in range(30)]
    other = Store(Database(db_url))
    answers: dict[str, ToolCallRow] = {}

    async def wait(call: ToolCallRow) -> None:
        answers[call.id] = await store.calls.wait_for_decision(call.id, seconds=60)

    try:
        async with serving(store) as registry, anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(wait, call)
            await until(lambda: len(registry) == len(calls))
            for call in calls:
                await other.calls.decide(call.id, Approve(), actor=REVIEWER)
                await until(lambda call=call: call.id in answers)
    finally:
        await other.db.dispose()
    assert {answer.status for answer in answers.values()} == {CallStatus.APPROVED}
