"""The store's operations, on SQLite and PostgreSQL: pause, decide, quorum, conflicts, expiry, audit."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
import sqlalchemy.exc
from sqlalchemy import event

from approvals import Conflict, Forbidden, NotFound, UserError
from approvals.audit import append_event
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove
from approvals.engines.native.messages import ModelRequest, UserPromptPart
from approvals.store import Actor, Store
from approvals.store.audit import AUDIT_LOCK_KEY
from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry, Resumer

from .agents import email_agent, shop_agent
from .conftest import connections_in_use, execute

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc-checkout", "reviewer")
ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")
VIEWER = Actor("victor", "viewer")
ADMIN = Actor("ada", "admin")


def registry() -> AgentRegistry:
    return AgentRegistry([shop_agent, email_agent])


async def paused_shop_run(store: Store, tmp_path: Path, **deps: Any) -> tuple[str, dict[str, ToolCallRow]]:
    run_id = await store.runs.start_run(
        "shop", "refund A-1, delete customer 7", actor=SERVICE, deps={"log": str(tmp_path / "log"), **deps}
    )
    assert await Resumer(store, registry(), worker_id="w1").resume() == run_id
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    return run_id, calls


def tool_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_run_pauses_with_its_calls_stored(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    run = await store.runs.get_run(run_id)
    assert run.status == "awaiting_approval"
    assert run.lease_owner is None
    assert set(calls) == {"refund", "delete_customer"}
    refund = calls["refund"]
    assert refund.status == "pending"
    assert refund.args == {"order_id": "A-1", "amount": "450"}
    assert len(refund.args_digest) == 64
    assert calls["delete_customer"].approvals_required == 2
    definition = await store.calls.tool_definition(refund.tool_version)
    assert definition.name == "refund" and definition.description == "Refund an order."
    history = await store.runs.load_history(run_id)
    assert [m.kind for m in history] == ["request", "response", "request"]  # lookup ran, its result is stored
    assert tool_log(tmp_path) == []


async def test_decisions_make_the_run_ready_and_it_completes(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["refund"].id, Approve(args_digest=calls["refund"].args_digest), actor=ALICE)
    assert (await store.runs.get_run(run_id)).status == "awaiting_approval"  # delete still waits
    first = await store.calls.decide(calls["delete_customer"].id, Approve(), actor=ALICE)
    assert first.status == "pending"  # one of two approvals
    second = await store.calls.decide(calls["delete_customer"].id, Approve(), actor=BOB)
    assert second.status == "approved"
    assert (await store.runs.get_run(run_id)).status == "ready"
    events = (await store.audit.audit_events(run_id=run_id, newest_first=False)).items
    assert [(e.action, e.actor) for e in events[-2:]] == [("call.approved", "bob"), ("run.ready", "system")]
    assert [e.action for e in events].count("run.ready") == 1
    assert (await store.audit.verify_audit()).ok

    assert await Resumer(store, registry(), worker_id="w2").resume() == run_id
    run = await store.runs.get_run(run_id)
    assert run.status == "completed"
    assert run.output.startswith('Done. refund returned "refunded 450"; delete_customer returned "deleted"')
    assert sorted(tool_log(tmp_path)) == ["delete 7", "refund A-1 450"]
    statuses = {c.tool_name: (c.status, c.result) for c in await store.calls.run_calls(run_id)}
    assert statuses == {"refund": ("succeeded", "refunded 450"), "delete_customer": ("succeeded", "deleted")}
    decisions = await store.calls.decisions_for(calls["delete_customer"].id)
    assert [d.actor for d in decisions] == ["alice", "bob"]
    assert all(d.consumed_at is not None for d in decisions)


async def test_deny_edit_and_answer(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(
        calls["refund"].id, EditAndApprove(args={"order_id": "A-1", "amount": "99.00"}), actor=ALICE
    )
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="Open orders."), actor=BOB)
    await Resumer(store, registry()).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed"
    assert "delete_customer was denied (Open orders.)" in run.output
    assert tool_log(tmp_path) == ["refund A-1 99.00"]

    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["refund"].id, Answer(content="Refunded by phone."), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="No."), actor=ALICE)
    await Resumer(store, registry()).resume(run_id)
    assert 'refund returned "Refunded by phone."' in (await store.runs.get_run(run_id)).output
    assert tool_log(tmp_path) == ["refund A-1 99.00"]  # the answered refund did not run


async def test_decision_on_a_decided_call_is_a_conflict_naming_who(store: Store, tmp_path: Path) -> None:
    _, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["refund"].id, Deny(reason="Too much."), actor=ALICE)
    with pytest.raises(Conflict, match="it was denied by alice") as err:
        await store.calls.decide(calls["refund"].id, Approve(), actor=BOB)
    assert err.value.decided_by == "alice"
    assert (await store.calls.get_call(calls["refund"].id)).status == "denied"


async def test_two_reviewers_at_once_exactly_one_wins(store: Store, tmp_path: Path) -> None:
    _, calls = await paused_shop_run(store, tmp_path)
    outcomes: list[str] = []

    async def decide(actor: Actor, verdict: Any) -> None:
        try:
            await store.calls.decide(calls["refund"].id, verdict, actor=actor)
            outcomes.append(f"{actor.id} won")
        except Conflict:
            outcomes.append(f"{actor.id} conflict")

    async with anyio.create_task_group() as group:
        group.start_soon(decide, ALICE, Approve())
        group.start_soon(decide, BOB, Deny(reason="no"))
    assert sorted(o.split()[1] for o in outcomes) == ["conflict", "won"]
    call = await store.calls.get_call(calls["refund"].id)
    winner = next(o.split()[0] for o in outcomes if o.endswith("won"))
    assert call.decided_by == winner
    assert len(await store.calls.decisions_for(call.id)) == 1


WAITING_LOCKS = """
SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid)
WHERE NOT pg_locks.granted AND pg_stat_activity.datname = current_database()
"""
"""Sessions of this test's database waiting for a lock, whatever the kind (row, transaction, advisory)."""


async def test_the_last_two_calls_decided_at_once_make_the_run_ready(store: Store, tmp_path: Path) -> None:
    """Each decision checks "no call left open" only once the other committed (PostgreSQL, READ COMMITTED).

    The audit lock is held from outside until both decisions wait for a lock: without the run's
    row lock each would have written its verdict there, before seeing the other's.
    """
    if not store.db.is_postgres:
        pytest.skip("SQLite runs one writer at a time")
    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["delete_customer"].id, Approve(), actor=BOB)  # one of two approvals
    conninfo = store.db.sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (AUDIT_LOCK_KEY,))
        async with anyio.create_task_group() as group:
            for call in (calls["refund"], calls["delete_customer"]):
                group.start_soon(functools.partial(store.calls.decide, call.id, Approve(), actor=ALICE))
            try:
                with anyio.fail_after(10):
                    while (await (await holder.execute(WAITING_LOCKS)).fetchone() or (0,))[0] < 2:
                        await anyio.sleep(0.01)
            finally:  # the decisions cannot be cancelled mid-write: let them finish whatever happened
                await holder.execute("SELECT pg_advisory_unlock(%s)", (AUDIT_LOCK_KEY,))
    assert {c.status for c in await store.calls.run_calls(run_id)} == {"approved"}
    assert (await store.runs.get_run(run_id)).status == "ready"
    actions = [e.action for e in (await store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert actions[-3:] == ["call.approved", "call.approved", "run.ready"]
    assert (await store.audit.verify_audit()).ok


async def test_refused_and_cancelled_writes_leave_the_pool_clean(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    delete, refund = calls["delete_customer"], calls["refund"]
    await store.calls.decide(delete.id, Approve(), actor=ALICE)
    with pytest.raises(Conflict, match="already approved"):  # the database's unique index refuses it
        await store.calls.decide(delete.id, Approve(), actor=ALICE)
    for seconds in (0, 0.0002, 0.0005, 0.001, 0.002, 0.004):  # cancelled at different points, or not at all
        with anyio.move_on_after(seconds), contextlib.suppress(Conflict):
            await store.calls.decide(refund.id, Approve(), actor=BOB)
    assert connections_in_use(store) == 0
    await store.calls.decide(delete.id, Approve(), actor=BOB)
    refund_now = await store.calls.get_call(refund.id)
    assert refund_now.status in ("pending", "approved")
    if refund_now.status == "pending":
        await store.calls.decide(refund.id, Approve(), actor=BOB)
    assert (await store.runs.get_run(run_id)).status == "ready"
    assert len(await store.calls.decisions_for(refund.id)) == 1  # a cancelled decision is all or nothing
    assert (await store.audit.verify_audit()).ok


async def test_a_long_step_is_stored_whole_and_in_order(store: Store) -> None:
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE)
    assert await store.runs.claim("w1", run_id=run_id) is not None
    step = [ModelRequest(parts=[UserPromptPart(content=f"message {i}")]) for i in range(1234)]
    await store.runs.append_step(run_id, "w1", step[:1])
    await store.runs.append_step(run_id, "w1", step[1:])  # more rows than one INSERT carries
    history = await store.runs.load_history(run_id)
    assert [m.parts[0].content for m in history] == [f"message {i}" for i in range(1234)]
    assert (await store.runs.get_run(run_id)).message_count == 1234


async def test_a_dropped_database_connection_fails_one_write_and_the_pool_recovers(store: Store) -> None:
    if not store.db.is_postgres:
        pytest.skip("SQLite has no server to lose")
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE)
    async with anyio.create_task_group() as group:  # a few idle connections in the pool
        for _ in range(3):
            group.start_soon(store.runs.get_run, run_id)
    conninfo = store.db.sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with pytest.raises(sqlalchemy.exc.OperationalError):  # the same error the ORM path raises
        await store.runs.claim("w1")
    claimed = await store.runs.claim("w1")  # the pool was replaced: no second stale connection
    assert claimed is not None and claimed.run_id == run_id
    assert connections_in_use(store) == 0


async def test_approval_is_bound_to_the_arguments_seen(store: Store, tmp_path: Path) -> None:
    _, calls = await paused_shop_run(store, tmp_path)
    with pytest.raises(Conflict, match="changed since you loaded them"):
        await store.calls.decide(calls["refund"].id, Approve(args_digest="f" * 64), actor=ALICE)
    # an edit restarts the quorum: bob's approval of the old arguments no longer counts
    delete = calls["delete_customer"]
    await store.calls.decide(delete.id, Approve(args_digest=delete.args_digest), actor=BOB)
    edited = await store.calls.decide(delete.id, EditAndApprove(args={"customer_id": 8}), actor=ALICE)
    assert edited.status == "pending"
    with pytest.raises(Conflict, match="changed since you loaded them"):
        await store.calls.decide(delete.id, Approve(args_digest=delete.args_digest), actor=BOB)
    approved = await store.calls.decide(delete.id, Approve(args_digest=edited.override_digest), actor=BOB)
    assert approved.status == "approved"


async def test_roles_and_own_runs(store: Store, tmp_path: Path) -> None:
    _, calls = await paused_shop_run(store, tmp_path)
    with pytest.raises(Forbidden, match="may not decide"):
        await store.calls.decide(calls["refund"].id, Approve(), actor=VIEWER)
    assert calls["refund"].requested_by == SERVICE.id  # a worker's run's calls were asked by its starter
    with pytest.raises(Forbidden, match="You asked for this call"):
        await store.calls.decide(calls["refund"].id, Approve(), actor=SERVICE)
    await store.calls.decide(
        calls["refund"].id, Deny(reason="Not mine to approve."), actor=SERVICE
    )  # denying is allowed
    with pytest.raises(UserError, match="needs a reason"):
        await store.calls.decide(calls["delete_customer"].id, Deny(reason="  "), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Approve(), actor=ALICE)
    with pytest.raises(Conflict, match="already approved"):
        await store.calls.decide(calls["delete_customer"].id, Approve(), actor=ALICE)
    with pytest.raises(NotFound):
        await store.calls.decide("nope", Approve(), actor=ALICE)


async def unknown_outcomes(store: Store, tmp_path: Path) -> tuple[str, dict[str, ToolCallRow]]:
    """A shop run whose worker died right after its claim marked the approved calls executing.

    Alice approved the refund, Alice and Bob the deletion; the claim that finds the dead
    worker's run hands both calls back to people as `outcome_unknown` (neither tool is idempotent).
    """
    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["refund"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Approve(), actor=ALICE)
    await store.calls.decide(calls["delete_customer"].id, Approve(), actor=BOB)
    assert await store.runs.claim("dead-worker", run_id=run_id, lease_seconds=0) is not None  # its lease ends at once
    assert await store.runs.claim("rescuer", run_id=run_id) is None  # nothing safe to run
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    assert {c.status for c in calls.values()} == {"outcome_unknown"}
    assert (await store.runs.get_run(run_id)).status == "awaiting_approval"
    return run_id, calls


@pytest.mark.parametrize(
    ("verdict", "status", "told"),
    [
        (Approve(), "approved", 'refund returned "refunded 450"'),
        (Deny(reason="It went through already."), "denied", "refund was denied (It went through already.)"),
        (Answer(content="Refunded: payment 991."), "answered", 'refund returned "Refunded: payment 991."'),
    ],
)
async def test_the_approver_settles_a_call_whose_outcome_is_unknown(
    store: Store, tmp_path: Path, verdict: Any, status: str, told: str
) -> None:
    run_id, calls = await unknown_outcomes(store, tmp_path)
    refund = calls["refund"]
    with pytest.raises(Forbidden, match="You asked for this call"):  # approving one's own run stays forbidden
        await store.calls.decide(refund.id, Approve(), actor=SERVICE)
    settled = await store.calls.decide(refund.id, verdict, actor=ALICE)  # alice approved it before it ran
    assert (settled.status, settled.decided_by) == (status, "alice")
    await store.calls.decide(calls["delete_customer"].id, Deny(reason="Keep the customer."), actor=BOB)
    assert (await store.runs.get_run(run_id)).status == "ready"
    assert await Resumer(store, registry()).resume(run_id) == run_id
    run = await store.runs.get_run(run_id)
    assert run.status == "completed" and told in run.output
    assert tool_log(tmp_path) == (["refund A-1 450"] if status == "approved" else [])  # approve runs it again
    assert (await store.audit.verify_audit()).ok


async def test_approving_an_unknown_outcome_takes_the_quorum_again(store: Store, tmp_path: Path) -> None:
    _, calls = await unknown_outcomes(store, tmp_path)
    delete = calls["delete_customer"]
    first = await store.calls.decide(delete.id, Approve(), actor=ALICE)
    assert first.status == "outcome_unknown"  # one of two: the approvals before it ran were used up
    with pytest.raises(Conflict, match=r"alice' already approved .* with these arguments"):
        await store.calls.decide(delete.id, Approve(), actor=ALICE)  # the quorum still needs two people
    assert (await store.calls.decide(delete.id, Approve(), actor=BOB)).status == "approved"


@pytest.mark.parametrize(
    ("verdict", "status"),
    [(Deny(reason="On second thought, no."), "denied"), (Answer(content="Done by hand."), "answered")],
)
async def test_a_reviewer_denies_or_answers_a_quorum_call_they_approved(
    store: Store, tmp_path: Path, verdict: Any, status: str
) -> None:
    _, calls = await paused_shop_run(store, tmp_path)
    delete = calls["delete_customer"]
    assert (await store.calls.decide(delete.id, Approve(), actor=ALICE)).status == "pending"  # one of two approvals
    with pytest.raises(Conflict, match=r"already approved .* a quorum needs approvals from different people"):
        await store.calls.decide(delete.id, Approve(), actor=ALICE)
    settled = await store.calls.decide(delete.id, verdict, actor=ALICE)
    assert (settled.status, settled.decided_by) == (status, "alice")
    assert [(d.actor, d.verdict) for d in await store.calls.decisions_for(delete.id)] == [
        ("alice", "approve"),
        ("alice", settled.verdict),
    ]


async def test_expiry_denies_and_the_model_reads_it(store: Store, tmp_path: Path) -> None:
    run_id = await store.runs.start_run("mailer", "email ann", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await Resumer(store, registry()).resume(run_id)
    [call] = await store.calls.run_calls(run_id)
    assert call.expires_at is not None
    assert await store.calls.expire(now=call.expires_at - dt.timedelta(seconds=1)) == 0
    assert await store.calls.expire(now=call.expires_at + dt.timedelta(seconds=1)) == 1
    call = await store.calls.get_call(call.id)
    assert call.status == "expired"
    assert call.denial_reason == "No one decided within 60 seconds, so the request expired and the call was not run."
    assert (await store.runs.get_run(run_id)).status == "ready"
    await Resumer(store, registry()).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed"
    assert "send_email was denied (No one decided within 60 seconds" in run.output
    assert tool_log(tmp_path) == []


async def test_cancel_needs_an_admin(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    with pytest.raises(Forbidden):
        await store.runs.cancel_run(run_id, actor=ALICE)
    await store.runs.cancel_run(run_id, actor=ADMIN, reason="wrong customer")
    assert (await store.runs.get_run(run_id)).status == "cancelled"
    assert {c.status for c in await store.calls.run_calls(run_id)} == {"cancelled"}
    with pytest.raises(Conflict, match="no longer waiting"):
        await store.calls.decide(calls["refund"].id, Approve(), actor=ALICE)
    with pytest.raises(Conflict, match="already ended"):
        await store.runs.cancel_run(run_id, actor=ADMIN)


async def test_cancelling_a_run_leaves_calls_whose_outcome_is_unknown_for_a_person(
    store: Store, tmp_path: Path
) -> None:
    run_id, calls = await unknown_outcomes(store, tmp_path)
    await store.runs.cancel_run(run_id, actor=ADMIN, reason="stop")
    assert {c.status for c in await store.calls.run_calls(run_id)} == {"outcome_unknown"}  # their tools may have run
    settled = await store.calls.decide(calls["refund"].id, Answer(content="It was refunded."), actor=ALICE)
    assert settled.status == "answered"
    assert (await store.runs.get_run(run_id)).status == "cancelled"


async def test_inbox_keyset_pagination_and_filters(store: Store, tmp_path: Path) -> None:
    for _ in range(3):
        await paused_shop_run(store, tmp_path)
    first = await store.calls.list_calls(limit=4)
    assert len(first.items) == 4 and first.next_cursor is not None
    second = await store.calls.list_calls(limit=4, after=first.next_cursor)
    assert len(second.items) == 2 and second.next_cursor is None
    ids = [c.id for c in first.items + second.items]
    assert len(set(ids)) == 6
    created = [c.created_at for c in first.items + second.items]
    assert created == sorted(created)
    assert {c.tool_name for c in (await store.calls.list_calls(tool_name="refund")).items} == {"refund"}
    assert len((await store.calls.list_calls(search='"A-1"')).items) == 3
    assert (await store.calls.list_calls(search="no such text")).items == []
    assert await store.calls.count_calls_by_status() == {"pending": 6}
    # counting stops past the cap (a million waiting calls are not counted at every refresh): cap + 1 says "more"
    assert await store.calls.count_calls_by_status(cap=4) == {"pending": 5}
    assert await store.calls.count_calls_by_status(cap=6) == {"pending": 6}
    assert await store.calls.count_calls_by_status(tool_name="refund", cap=2) == {"pending": 3}


async def test_every_change_is_audited_and_tampering_is_detected(store: Store, tmp_path: Path) -> None:
    run_id, calls = await paused_shop_run(store, tmp_path)
    await store.calls.decide(calls["refund"].id, Deny(reason="Too much."), actor=ALICE)
    events = (await store.audit.audit_events(run_id=run_id, newest_first=False)).items
    actions = [e.action for e in events]
    assert actions[:3] == ["run.started", "run.resumed", "call.requested"]
    assert "run.paused" in actions and actions[-1] == "call.denied"
    assert events[-1].actor == "alice" and events[-1].details == {"reason": "Too much."}
    verification = await store.audit.verify_audit()
    assert verification.ok and verification.checked == len(events)

    await execute(store, "UPDATE audit_events SET actor = 'mallory' WHERE id = :id", id=events[-1].id)
    broken = await store.audit.verify_audit()
    assert not broken.ok and broken.first_bad_id == events[-1].id
    assert "changed after it was written" in (broken.problem or "")

    await execute(store, "UPDATE audit_events SET actor = 'alice' WHERE id = :id", id=events[-1].id)
    assert (await store.audit.verify_audit()).ok
    await execute(store, "DELETE FROM audit_events WHERE id = :id", id=events[2].id)
    deleted = await store.audit.verify_audit()
    assert not deleted.ok and deleted.first_bad_id == events[3].id
    assert "deleted or reordered" in (deleted.problem or "")


async def test_the_public_append_extends_the_one_chain_the_way_the_store_does(store: Store) -> None:
    """`approvals.audit.append_event` between the store's writes: one chain that verifies, and on
    PostgreSQL the server chains the event, as it does every write's (no second way to hash there)."""
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    run_id = await store.runs.start_run("shop", "ship it", actor=SERVICE)
    event.listen(store.db.engine.sync_engine, "before_cursor_execute", seen)
    try:
        async with store.db.write() as session:
            await append_event(session, actor="ops", action="note.added", subject_type="run", subject_id=run_id)
    finally:
        event.remove(store.db.engine.sync_engine, "before_cursor_execute", seen)
    await store.runs.start_run("shop", "again", actor=SERVICE)

    actions = [e.action for e in (await store.audit.audit_events(newest_first=False)).items]
    assert actions == ["run.started", "note.added", "run.started"]
    assert (await store.audit.verify_audit()).ok
    if store.db.is_postgres:
        assert any("approvals_audit_append_v2" in statement for statement in statements), statements
        assert not any("pg_advisory_xact_lock" in statement for statement in statements), statements


async def test_search_finds_non_ascii_arguments(store: Store) -> None:
    from approvals.engines.native.deferred import DeferredToolCall, DeferredToolRequests

    run_id = await store.runs.start_run("shop", "ship it", actor=SERVICE)
    await store.runs.claim("w", run_id=run_id)
    request = DeferredToolCall(
        tool_name="refund",
        tool_call_id="c1",
        args={"street": "Lindenstraße 12", "city": "Zürich"},
        args_digest="0" * 64,
        tool_def=shop_agent.tools["refund"].tool_def,
    )
    await store.runs.pause(run_id, "w", [], DeferredToolRequests(approvals=[request]))
    assert [c.tool_call_id for c in (await store.calls.list_calls(search="straße")).items] == ["c1"]
    assert [c.tool_call_id for c in (await store.calls.list_calls(search="Zürich")).items] == ["c1"]


async def test_a_user_named_system_is_no_admin(store: Store) -> None:
    """Only the role decides what an actor may do: an id that reads "system" grants nothing."""
    impostor = Actor("system", "viewer")
    with pytest.raises(Forbidden):
        await store.people.create_user("mallory", "pw-123456789", role="admin", actor=impostor)
    with pytest.raises(Forbidden):
        await store.people.create_token("backdoor", role="admin", actor=impostor)
    await store.people.create_user("bob", "pw-123456789", role="viewer", actor=Actor("ada", "admin"))
    with pytest.raises(Forbidden):
        await store.people.update_user("bob", role="admin", actor=impostor)
    with pytest.raises(UserError, match="reserved"):
        await store.people.create_user("system", "pw-123456789", role="viewer", actor=Actor("ada", "admin"))


async def test_a_stored_tool_definition_keeps_the_order_of_its_parameters(store: Store) -> None:
    """PostgreSQL's JSONB sorts an object's keys (shortest first), which put `amount` before `order_id`
    in every reviewer's form; the order the tool declared is what comes back, on both databases."""
    run_id = await store.runs.start_run("shop", "refund and delete", actor=SERVICE)
    await Resumer(store, registry()).resume(run_id)
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    stored = await store.calls.tool_definition(calls["refund"].tool_version)
    declared = shop_agent.tools["refund"].tool_def
    assert list(stored.parameters_json_schema["properties"]) == ["order_id", "amount"]
    assert stored == declared
