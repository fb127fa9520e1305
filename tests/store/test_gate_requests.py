"""A gate's requests racing each other, on SQLite and PostgreSQL: one call per key, one run per session."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from approvals.calls import CallRequest, validate_request
from approvals.store import Actor, Database, Store

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer", person=False)


async def test_the_same_key_asked_at_the_same_moment_is_one_call_and_a_new_session_one_run(db_url: str) -> None:
    stores = [Store(Database(db_url)) for _ in range(4)]
    request = validate_request(
        CallRequest(engine="gate", source="app", session_id="fresh", tool_name="refund", args={"amount": 5},
                    tool_call_id="k-1")
    )  # fmt: skip
    results: list[Any] = []

    async def ask(store: Store) -> None:
        results.append(await store.calls.request_call(request, actor=SERVICE))

    try:
        async with anyio.create_task_group() as group:
            for store in stores:
                group.start_soon(ask, store)
        assert len({call.id for call, _ in results}) == 1
        assert sorted(created for _, created in results) == [False, False, False, True]
        runs = (await stores[0].runs.list_runs()).items
        assert len(runs) == 1
        actions = [e.action for e in (await stores[0].audit.audit_events(run_id=runs[0].id, limit=50)).items]
        assert sorted(actions) == ["call.requested", "run.paused", "run.started"]
    finally:
        for store in stores:
            await store.db.dispose()
