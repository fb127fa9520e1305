"""A `SNAPSHOT` engine's run state: one document a run, replaced only by the write of the worker holding the run."""

from __future__ import annotations

import pytest

from approvals.calls.engine_state import Snapshot
from approvals.exceptions import LeaseLost
from approvals.store import Actor, Store
from approvals.store.run_plan import RunWrite

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")


async def held_run(store: Store) -> str:
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE)
    assert await store.runs.claim("w1", run_id=run_id) is not None
    return run_id


async def test_a_run_has_no_state_until_a_write_stores_one_and_each_write_replaces_it(store: Store) -> None:
    run_id = await held_run(store)
    assert await store.runs.load_state(run_id) is None

    first = Snapshot(version=1, data={"step": 1, "nested": {"items": [1, "two", None]}})
    await store.runs.write_run(RunWrite(run_id=run_id, worker_id="w1", snapshot=first))
    assert await store.runs.load_state(run_id) == first

    last = Snapshot(version=2, data={"step": 2})
    await store.runs.finish(run_id, "w1", [], output="done", snapshot=last)
    assert await store.runs.load_state(run_id) == last
    run = await store.runs.get_run(run_id)
    assert (run.status, run.output) == ("completed", "done")
    assert (await store.audit.verify_audit()).ok


async def test_a_worker_that_no_longer_holds_the_run_changes_nothing_of_its_state(store: Store) -> None:
    run_id = await held_run(store)
    kept = Snapshot(version=1, data={"step": 1})
    await store.runs.write_run(RunWrite(run_id=run_id, worker_id="w1", snapshot=kept))

    with pytest.raises(LeaseLost):
        await store.runs.write_run(RunWrite(run_id=run_id, worker_id="w2", snapshot=Snapshot(version=1, data={})))
    with pytest.raises(LeaseLost):
        await store.runs.finish(run_id, "w2", [], output="stolen", snapshot=Snapshot(version=1, data={}))

    assert await store.runs.load_state(run_id) == kept
    assert (await store.runs.get_run(run_id)).status == "resuming"
