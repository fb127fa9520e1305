"""A gate's request: a look, then one checked write (`request_sql`), on SQLite and PostgreSQL alike.

What another request does between the look and the write is found by the write under the run's
lock: a session another opened meanwhile is refused with nothing stored, a key another stored
meanwhile gives that call. The call a request returns is the call as stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from approvals.calls import CallRequest, validate_request
from approvals.calls.requests import ValidatedRequest
from approvals.calls.states import CallStatus
from approvals.exceptions import Forbidden
from approvals.policy.files import parse_rules
from approvals.store import SYSTEM, Actor, Database, Store
from approvals.store.run_sql import Rows, Step

pytestmark = pytest.mark.anyio

ASKER = Actor("svc-a", "reviewer", person=False)
OTHER = Actor("svc-b", "reviewer", person=False)


def request(key: str, amount: int = 5, session: str = "s-1") -> ValidatedRequest:
    return validate_request(
        CallRequest(engine="gate", source="app", session_id=session, tool_name="refund", args={"amount": amount},
                    tool_call_id=key)
    )  # fmt: skip


class Meanwhile:
    """The store's backend, with something done by another request between the look and the write."""

    def __init__(self, real: Any, between: Callable[[], Awaitable[None]]) -> None:
        self.real = real
        self.between = between

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def read_steps(self, db: Database, steps: Sequence[Step]) -> list[Rows]:
        rows: list[Rows] = await self.real.read_steps(db, steps)
        await self.between()
        return rows


async def test_a_session_another_opened_after_the_look_is_refused_and_nothing_of_the_request_is_stored(
    db_url: str,
) -> None:
    mine, theirs = Store(Database(db_url)), Store(Database(db_url))

    async def they_open_it() -> None:
        await theirs.calls.request_call(request("theirs"), actor=OTHER)

    mine.calls.backend = Meanwhile(mine.calls.backend, they_open_it)
    try:
        with pytest.raises(Forbidden, match="opened by another"):
            await mine.calls.request_call(request("mine"), actor=ASKER)
        [run] = (await theirs.runs.list_runs()).items
        assert run.started_by == OTHER.id
        calls = await theirs.calls.run_calls(run.id)
        assert [call.tool_call_id for call in calls] == ["theirs"]
        actions = [event.action for event in (await theirs.audit.audit_events(limit=50)).items]
        assert sorted(actions) == ["call.refused", "call.requested", "run.paused", "run.started"]
    finally:
        await mine.db.dispose()
        await theirs.db.dispose()


async def test_a_key_another_request_stored_after_the_look_gives_that_call(db_url: str) -> None:
    mine, theirs = Store(Database(db_url)), Store(Database(db_url))
    await mine.calls.request_call(request("first"), actor=ASKER)  # the session exists: the look finds it
    stored: list[Any] = []

    async def they_store_the_key() -> None:
        stored.append(await theirs.calls.request_call(request("k-2"), actor=ASKER))

    mine.calls.backend = Meanwhile(mine.calls.backend, they_store_the_key)
    try:
        call, created = await mine.calls.request_call(request("k-2"), actor=ASKER)
        [(their_call, their_created)] = stored
        assert (created, their_created) == (False, True)
        assert call.id == their_call.id
        assert len(await mine.calls.run_calls(call.run_id)) == 2
    finally:
        await mine.db.dispose()
        await theirs.db.dispose()


async def test_the_call_a_request_returns_is_the_call_as_stored(store: Store) -> None:
    [allow] = parse_rules([{"name": "small", "engine": "gate", "tool": "refund", "effect": "allow"}])
    await store.rules.save_rule(allow, actor=SYSTEM)
    call, created = await store.calls.request_call(request("k-1"), actor=ASKER, hand_out=True)
    assert created
    assert call.status is CallStatus.EXECUTING
    again = await store.calls.get_call(call.id)
    columns = ("id", "run_id", "tool_call_id", "status", "args", "args_digest", "decided_by", "rule_name", "context")
    assert {name: getattr(call, name) for name in columns} == {name: getattr(again, name) for name in columns}
    assert call.created_at == again.created_at and call.created_at.tzinfo is not None
    assert call.decided_at == again.decided_at and call.decided_at is not None
