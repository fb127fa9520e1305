"""Numbers a database rewrites: digests and the audit chain must survive the round trip.

PostgreSQL's JSONB keeps numbers as `numeric`: `1e16` comes back as the integer
`10000000000000000`, and `-0.0` as `0.0`. A model controls its tool arguments, so it
could otherwise make an approved call fail at resume with "digest mismatch" and make
`audit verify` report a chain that nobody tampered with.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import bindparam, create_engine, pool, select, text, update

from approvals import Agent
from approvals.calls.canonical import canonical_json, digest, legacy_canonical_json
from approvals.calls.verdicts import Approve, EditAndApprove
from approvals.engines.native.models import TestModel
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store, normalize_url
from approvals.store.audit import GENESIS_HASH, event_content
from approvals.store.migrate import downgrade, upgrade
from approvals.store.models import AuditEventRow, JsonValue, json_text
from approvals.worker.resumer import AgentRegistry, Resumer

from .conftest import BACKENDS, execute
from .test_migrations import empty_database

pytestmark = pytest.mark.anyio

SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")

ODD_NUMBERS: dict[str, Any] = {
    "big": 1e16,
    "bigger": 1.2345678901234567e300,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "small": 1.5e-7,
    "integral": 3.0,
    "huge_int": 123456789012345678901234567890,
}

MODEL_ARGS: dict[str, Any] = {"amount": -0.0, "rate": 1e16, "extra": ODD_NUMBERS}
number_agent: Agent[None] = Agent(TestModel([("transfer", MODEL_ARGS)]), name="numbers")


@number_agent.tool_plain(requires_approval=True)
def transfer(amount: float, rate: float, extra: dict[str, Any]) -> dict[str, Any]:
    """Move money; returns the numbers it was given, so the result holds them too."""
    return {"amount": amount, "rate": rate, "extra": extra}


async def paused_call(store: Store) -> tuple[str, Any]:
    run_id = await store.runs.start_run("numbers", "go", actor=SERVICE)
    await Resumer(store, AgentRegistry([number_agent])).resume(run_id)
    (call,) = await store.calls.run_calls(run_id)
    return run_id, call


async def test_an_approval_bound_to_odd_numbers_runs_and_the_chain_verifies(store: Store) -> None:
    service = ApprovalService(store, AgentRegistry([number_agent]))
    run_id, call = await paused_call(store)
    shown = (await store.calls.get_call(call.id)).args  # what a reviewer's page shows, read back from the database
    await service.decide(call.id, Approve(args_digest=service.args_digest(shown)), actor=ALICE)

    await Resumer(store, AgentRegistry([number_agent])).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error
    assert (await store.calls.get_call(call.id)).status == "succeeded"
    verification = await store.audit.verify_audit()
    assert verification.ok, verification.problem
    assert verification.checked >= 6


async def test_an_edit_with_odd_numbers_runs_and_the_chain_verifies(store: Store) -> None:
    service = ApprovalService(store, AgentRegistry([number_agent]))
    run_id, call = await paused_call(store)
    shown = (await store.calls.get_call(call.id)).args
    edited = {"amount": 1e17, "rate": -0.0, "extra": {"n": [1e20, -0.0, 2.5e-10]}}
    await service.decide(call.id, EditAndApprove(args=edited, args_digest=service.args_digest(shown)), actor=ALICE)

    await Resumer(store, AgentRegistry([number_agent])).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error
    result = (await store.calls.get_call(call.id)).result
    assert result is not None and result["amount"] == 1e17
    verification = await store.audit.verify_audit()
    assert verification.ok, verification.problem


async def test_an_unbound_approval_of_odd_numbers_passes_the_resume_digest_check(store: Store) -> None:
    """The worker re-validates the stored call and compares its digest with the one approved."""
    run_id, call = await paused_call(store)
    await store.calls.decide(call.id, Approve(), actor=ALICE)

    await Resumer(store, AgentRegistry([number_agent])).resume(run_id)
    run = await store.runs.get_run(run_id)
    assert run.status == "completed", run.error


async def test_audit_events_holding_odd_numbers_verify(store: Store) -> None:
    await paused_call(store)  # its pause event holds the arguments
    verification = await store.audit.verify_audit()
    assert verification.ok, verification.problem


async def test_the_upgrade_brings_waiting_calls_digests_to_the_new_form(tmp_path: Path) -> None:
    """A call paused by the previous release keeps its old digest until migration 0009 recomputes it."""
    for backend in BACKENDS:
        with empty_database(backend, tmp_path) as url:
            upgrade(url)
            database = Database(url)
            store = Store(database)
            try:
                run_id, call = await paused_call(store)
                downgrade(url, "0008")  # as the previous release left it, with its digest
                old = hashlib.sha256(legacy_canonical_json(MODEL_ARGS).encode()).hexdigest()  # what 0008's code stored
                await execute(store, "UPDATE tool_calls SET args_digest = :old WHERE id = :id", old=old, id=call.id)
                await execute(
                    store,
                    "INSERT INTO decisions (call_id, actor, verdict, args_digest, created_at) "
                    "VALUES (:id, 'carol', 'approve', :old, CURRENT_TIMESTAMP)",
                    old=old,
                    id=call.id,
                )
                upgrade(url)

                stored = await store.calls.get_call(call.id)
                assert stored.args_digest == digest(stored.args) != old, backend
                async with database.engine.connect() as conn:
                    bound = (await conn.execute(text("SELECT args_digest FROM decisions"))).scalars().all()
                assert bound == [stored.args_digest], backend
                await store.calls.decide(call.id, Approve(args_digest=digest(stored.args)), actor=ALICE)
                await Resumer(store, AgentRegistry([number_agent])).resume(run_id)
                assert (await store.runs.get_run(run_id)).status == "completed", backend
            finally:
                await database.dispose()


async def test_events_hashed_before_the_new_form_still_verify_on_sqlite(sqlite_template: Path, tmp_path: Path) -> None:
    """SQLite kept `1e+16` as written, and the previous release hashed that text: such a chain still verifies.

    Accepting the old form lets no edit through: an edited event matches neither form.
    """
    path = tmp_path / "approvals.db"
    shutil.copy(sqlite_template, path)
    database = Database(f"sqlite:///{path}")
    store = Store(database)
    try:
        await paused_call(store)
        async with database.engine.begin() as conn:  # rehash the chain as the previous release did
            prev, differing = GENESIS_HASH, 0
            for row in (await conn.execute(select(AuditEventRow).order_by(AuditEventRow.id))).all():
                content = event_content(cast(AuditEventRow, row), serialize=legacy_canonical_json)
                differing += content != event_content(cast(AuditEventRow, row))
                row_hash = hashlib.sha256((prev + content).encode()).hexdigest()
                await conn.execute(
                    update(AuditEventRow).where(AuditEventRow.id == row.id).values(prev_hash=prev, hash=row_hash)
                )
                prev = row_hash
        assert differing > 0  # the old form differs for this chain
        verification = await store.audit.verify_audit()
        assert verification.ok, verification.problem

        await execute(store, "UPDATE audit_events SET details = replace(details, '1e+16', '2e+16')")
        verification = await store.audit.verify_audit()
        assert not verification.ok and verification.problem is not None
        assert "changed after it was written" in verification.problem
    finally:
        await database.dispose()


STORABLE_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8)
"""What reaches the database: NUL and lone surrogates are repaired before (`_model_output`)."""
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | STORABLE_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(STORABLE_TEXT, children, max_size=4),
    max_leaves=12,
)


def test_canonical_json_survives_every_database(db_url: str) -> None:
    """Whatever JSON a model or reviewer can send, its canonical form is the same after the database gave it back."""
    engine = create_engine(normalize_url(db_url, sync=True), poolclass=pool.NullPool, json_serializer=json_text)
    stored = select(bindparam("value", type_=JsonValue))
    try:
        with engine.connect() as conn:

            @settings(max_examples=300, deadline=None, derandomize=True)
            @given(JSON_VALUES)
            def round_trip(value: Any) -> None:
                assert canonical_json(conn.execute(stored, {"value": value}).scalar_one()) == canonical_json(value)

            round_trip()
    finally:
        engine.dispose()
