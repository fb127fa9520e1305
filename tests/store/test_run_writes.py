"""A worker's writes, the same on both backends: what a claim commits, releasing calls that never ran, and
the PostgreSQL functions' audit content matching Python's byte for byte."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import Conflict
from approvals.calls import clock
from approvals.calls.canonical import canonical_json
from approvals.calls.verdicts import Approve, Deny
from approvals.engines.native.messages import ModelResponse, TextPart
from approvals.store import Actor, Store
from approvals.store.audit import AuditEvent, event_content
from approvals.store.hot_path_sql import function_name
from approvals.worker.resumer import AgentRegistry, Resumer

from .agents import email_agent, shop_agent
from .conftest import BACKENDS

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
ADMIN = Actor("ada", "admin")


def tool_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def decided_shop_run(store: Store, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A shop run paused on a refund (approved by Alice) and a deletion (denied)."""
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await Resumer(store, AgentRegistry([shop_agent])).resume(run_id)
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    await store.calls.decide(calls["refund"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="Keep the customer."), actor=ALICE)
    return run_id, {name: call.id for name, call in calls.items()}


async def test_a_claim_commits_the_approved_calls_as_executing(store: Store, tmp_path: Path) -> None:
    run_id, ids = await decided_shop_run(store, tmp_path)
    refund_call_id = (await store.calls.get_call(ids["refund"])).tool_call_id

    claimed = await store.runs.claim("w1", run_id=run_id)

    assert claimed is not None
    assert claimed.executing == {refund_call_id}
    assert {c.status for c in claimed.decided_calls.values()} == {"approved", "denied"}  # the verdicts to act on
    assert (await store.calls.get_call(ids["refund"])).status == "executing"  # committed before anything runs
    assert (await store.calls.get_call(ids["delete_customer"])).status == "denied"
    events = (await store.audit.audit_events(run_id=run_id, newest_first=False)).items
    last_two = [(e.action, e.subject_id) for e in events[-2:]]
    assert last_two == [("run.resumed", run_id), ("call.executing", ids["refund"])]
    assert events[-1].details == {"args_digest": (await store.calls.get_call(ids["refund"])).args_digest}
    assert (await store.audit.verify_audit()).ok


async def test_a_run_that_fails_before_its_calls_run_releases_them(store: Store, tmp_path: Path) -> None:
    def broken_factory(data: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the payment client is down")

    run_id, ids = await decided_shop_run(store, tmp_path)
    broken = AgentRegistry()
    broken.register(shop_agent, deps_factory=broken_factory)
    assert await Resumer(store, broken).resume(run_id) == run_id

    run = await store.runs.get_run(run_id)
    assert run.status == "failed" and "the payment client is down" in (run.error or "")
    assert (await store.calls.get_call(ids["refund"])).status == "approved"  # it never ran: not outcome_unknown
    assert tool_log(tmp_path) == []
    actions = [e.action for e in (await store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert actions[-4:] == ["run.resumed", "call.executing", "call.released", "run.failed"]

    await store.runs.retry_run(run_id, actor=ADMIN)  # the approval still stands: the retry runs the refund
    assert await Resumer(store, AgentRegistry([shop_agent])).resume(run_id) == run_id
    assert (await store.runs.get_run(run_id)).status == "completed"
    assert (await store.calls.get_call(ids["refund"])).status == "succeeded"
    assert tool_log(tmp_path) == ["refund A-1 450"]
    assert (await store.audit.verify_audit()).ok


async def test_releasing_a_call_approved_again_after_an_unknown_outcome_restores_that_approval_only(
    store: Store, tmp_path: Path
) -> None:
    run_id, ids = await decided_shop_run(store, tmp_path)
    assert await store.runs.claim("dead-worker", run_id=run_id, lease_seconds=0) is not None  # its lease ends at once
    assert await store.runs.claim("rescuer", run_id=run_id) is None
    assert (await store.calls.get_call(ids["refund"])).status == "outcome_unknown"
    await store.calls.decide(ids["refund"], Approve(), actor=ALICE)  # the same reviewer: run it again
    claimed = await store.runs.claim("w1", run_id=run_id)
    assert claimed is not None and claimed.executing

    await store.runs.finish(run_id, "w1", [], error="the payment client is down", released=claimed.executing)

    assert (await store.calls.get_call(ids["refund"])).status == "approved"
    used_up = [d.consumed_at is not None for d in await store.calls.decisions_for(ids["refund"])]
    assert used_up == [True, False]  # the dead worker's run used the first approval; the second stands again
    await store.runs.retry_run(run_id, actor=ADMIN)
    assert await Resumer(store, AgentRegistry([shop_agent])).resume(run_id) == run_id
    assert (await store.calls.get_call(ids["refund"])).status == "succeeded"
    assert tool_log(tmp_path) == ["refund A-1 450"]
    assert (await store.audit.verify_audit()).ok


async def test_marking_a_call_that_is_not_approved_is_a_conflict(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await Resumer(store, AgentRegistry([email_agent])).resume(run_id)
    [call] = await store.calls.run_calls(run_id)
    await store.calls.decide(call.id, Deny(reason="no"), actor=ALICE)
    assert await store.runs.claim("w1", run_id=run_id) is not None

    with pytest.raises(Conflict, match="not every call to execute is approved"):
        await store.runs.mark_executing(run_id, "w1", [call.tool_call_id])
    assert (await store.calls.get_call(call.id)).status == "denied"  # the refused write changed nothing


_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=30)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="the audit content builder is a PostgreSQL function")
def test_the_servers_audit_content_is_pythons(postgres_url: str) -> None:
    """Escapes, unicode, nulls and whole seconds: the chain's hash covers the same bytes whoever builds them."""
    with psycopg.connect(postgres_url) as connection:

        @settings(max_examples=200, deadline=None)
        @given(
            fields=st.fixed_dictionaries(
                {"actor": _TEXT, "action": _TEXT, "subject_type": _TEXT, "subject_id": _TEXT},
                optional={
                    "run_id": _TEXT,
                    "agent_name": _TEXT,
                    "tool_name": _TEXT,
                    "details": st.dictionaries(_TEXT, _JSON),
                },
            ),
            microsecond=st.sampled_from([0, 1, 123456, 999999]),
        )
        def server_builds_the_same_content(fields: dict[str, Any], microsecond: int) -> None:
            event = AuditEvent(at=dt.datetime(2026, 11, 23, 7, 10, 5, microsecond, tzinfo=dt.UTC), **fields)
            details = None if event.details is None else canonical_json(event.details)
            row = connection.execute(
                f"SELECT {function_name('event_content')}(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    event.at.isoformat(),
                    event.actor,
                    event.action,
                    event.subject_type,
                    event.subject_id,
                    event.run_id,
                    event.agent_name,
                    event.tool_name,
                    details,
                ),
            ).fetchone()
            assert row is not None and row[0] == event_content(event)

        server_builds_the_same_content()


async def test_claims_look_for_dead_workers_runs_at_most_once_a_second_while_runs_are_ready(store: Store) -> None:
    if not store.db.is_postgres:
        pytest.skip("SQLite's claim takes stale and ready runs in one query, oldest first")
    dead_worker = Store(store.db)  # another process's store
    stale = []
    for _ in range(2):
        run_id = await store.runs.start_run("mailer", "mail", actor=SERVICE)
        assert (await dead_worker.runs.claim("dead-worker", run_id=run_id, lease_seconds=0.1)) is not None
        stale.append(run_id)
    ready = await store.runs.start_run("mailer", "mail", actor=SERVICE)
    with clock.using(clock.SkippingClock()) as skipping:
        skipping.advance(0.2)  # the dead worker's leases run out

        first = await store.runs.claim("w1")  # this store never looked: the oldest dead worker's run comes first
        second = await store.runs.claim("w1")  # it looked under a second ago: a ready run goes first
        third = await store.runs.claim("w1")  # nothing ready: it looks again
        assert [c.run_id if c else None for c in (first, second, third)] == [stale[0], ready, stale[1]]
        assert await store.runs.claim("w1") is None


async def test_sqlite_claims_take_the_oldest_claimable_run_first_ready_or_a_dead_workers(store: Store) -> None:
    """A ready run is leased in one statement, but never ahead of an older run whose worker died."""
    if not store.db.is_sqlite:
        pytest.skip("PostgreSQL looks for dead workers' runs at most once a second (above)")
    dead_worker = Store(store.db)  # another process's store
    ready_first = await store.runs.start_run("mailer", "mail", actor=SERVICE)
    stale = await store.runs.start_run("mailer", "mail", actor=SERVICE)
    assert (await dead_worker.runs.claim("dead-worker", run_id=stale, lease_seconds=0.1)) is not None
    with clock.using(clock.SkippingClock()) as skipping:
        skipping.advance(0.2)  # its lease runs out; leasing it made it newer than `ready_first`
        ready_last = await store.runs.start_run("mailer", "mail", actor=SERVICE)

        claims = [await store.runs.claim("w1") for _ in range(4)]
        assert [c.run_id if c else None for c in claims] == [ready_first, stale, ready_last, None]
        recovered = await store.runs.get_run(stale)
        assert (recovered.status, recovered.lease_owner) == ("resuming", "w1")
        events = (await store.audit.audit_events(run_id=stale, newest_first=False)).items
        assert [(e.action, e.actor) for e in events if e.action == "run.resumed"] == [
            ("run.resumed", "dead-worker"),
            ("run.resumed", "w1"),
        ]


async def test_a_claim_sends_only_the_messages_a_worker_lacks(store: Store) -> None:
    run_id = await store.runs.start_run("shop", "go", actor=Actor("svc", "reviewer"))
    await store.runs.claim("w1", run_id=run_id, lease_seconds=60)
    history = [ModelResponse(parts=[TextPart(content=f"m{i}")]) for i in range(5)]
    await store.runs.append_step(run_id, "w1", history, lease_seconds=60)
    await store.runs.release(run_id, "w1")

    claimed = await store.runs.claim("w2", run_id=run_id, lease_seconds=60, known={run_id: 3, "other": 99})
    assert claimed is not None and claimed.history_from == 3
    assert [m.parts[0].content for m in claimed.history] == ["m3", "m4"]
    await store.runs.release(run_id, "w2")

    restored = await store.runs.claim("w3", run_id=run_id, lease_seconds=60, known={run_id: 50})  # more than is stored
    assert restored is not None and restored.history_from == 0 and len(restored.history) == 5
