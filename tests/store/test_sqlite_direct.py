"""SQLite's hot path runs its statements straight on the `sqlite3` cursor (`DirectConnection`).

It must store byte for byte what SQLAlchemy's own execution stores (timestamps in the same
text, JSON as written, statuses as their text, the same audit hashes), so the same decisions,
claim and write go through both, on two copies of one database, and every table is compared
as SQLite holds it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, insert

from approvals.calls.states import RunStatus
from approvals.calls.verdicts import Approve, Deny
from approvals.engines.native.messages import ModelResponse, TextPart
from approvals.store import Actor, Database, Store, claims
from approvals.store.audit import write_chained
from approvals.store.backend import Transaction
from approvals.store.claims import Claim, claim_oldest
from approvals.store.decision_sql import decide_statements
from approvals.store.migrate import upgrade
from approvals.store.models import RunRow
from approvals.store.run_plan import RunEvent, RunWrite
from approvals.store.run_sql import Tx, apply_write
from approvals.worker.resumer import AgentRegistry, Resumer

from .agents import shop_agent

pytestmark = pytest.mark.anyio

T = TypeVar("T")
SERVICE = Actor("svc", "reviewer")
ALICE = Actor("alice", "reviewer")
NOW = dt.datetime(2026, 11, 24, 5, 0, 0, 123456, tzinfo=dt.UTC)
TABLES = ("runs", "messages", "tool_definitions", "tool_calls", "decisions", "audit_events")


async def through_sqlalchemy(store: Store, body: Callable[[Tx], T]) -> T:
    """`body` in one transaction through SQLAlchemy's execution, as every other SQLite write runs."""

    def whole(connection: Connection) -> T:
        tx = Transaction(connection, store.backend)
        result = body(tx)
        write_chained(connection, tx.events)
        return result

    async with store.db.write() as session:
        return await session.run_sync(lambda sync_session: whole(sync_session.connection()))


def table_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as connection:
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in TABLES}


async def test_direct_statements_store_what_sqlalchemy_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = tmp_path / "original.db"
    upgrade(f"sqlite:///{original}")
    database = Database(f"sqlite:///{original}")
    store = Store(database)
    run_id = await store.runs.start_run("shop", "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    await Resumer(store, AgentRegistry([shop_agent])).resume(run_id)
    calls = {call.tool_name: call for call in await store.calls.run_calls(run_id)}
    await database.dispose()
    monkeypatch.setattr(claims, "utcnow", lambda: NOW)  # the claim's clock, the same for both
    refund = calls["refund"]
    step = ModelResponse(parts=[TextPart(content="Refunded; the customer stays.")], timestamp=NOW)

    async def decide_claim_and_finish(path: Path, run: Callable[[Store, Callable[[Tx], Any]], Any]) -> None:
        db = Database(f"sqlite:///{path}")
        copy = Store(db)
        await run(copy, lambda tx: decide_statements(tx, refund.id, Approve(), ALICE, NOW))
        await run(
            copy, lambda tx: decide_statements(tx, calls["delete_customer"].id, Deny(reason="Keep them."), ALICE, NOW)
        )
        ask = Claim("w1", 60.0, run_id, None, {})
        claimed = await run(copy, lambda tx: claim_oldest(tx, ask))
        assert claimed.executing == {refund.tool_call_id}
        finish = RunWrite(
            run_id=run_id,
            worker_id="w1",
            messages=[step],
            changes={
                "status": RunStatus.COMPLETED,
                "output": {"ok": True},
                "lease_owner": None,
                "lease_expires_at": None,
            },
            results={refund.tool_call_id: ("succeeded", {"refunded": 12.5, "note": "Lindenstraße"})},
            events=[RunEvent("run.completed", "run", run_id, details={"output": {"ok": True}})],
            now=NOW,
        )
        await run(copy, lambda tx: apply_write(tx, finish))
        assert (await copy.audit.verify_audit()).ok
        await db.dispose()

    direct, reference = tmp_path / "direct.db", tmp_path / "sqlalchemy.db"
    shutil.copy(original, direct)
    shutil.copy(original, reference)
    await decide_claim_and_finish(direct, lambda store, body: store.runs.run_statements(body))
    await decide_claim_and_finish(reference, through_sqlalchemy)

    stored, expected = table_rows(direct), table_rows(reference)
    assert stored == expected
    assert any("2026-11-24 05:00:00.123456" in str(row) for row in stored["tool_calls"])  # SQLAlchemy's text


async def test_in_lists_of_any_length_bind_every_item(store: Store) -> None:
    if not store.db.is_sqlite:
        pytest.skip("DirectConnection is SQLite's")
    for index in range(3):
        await store.runs.start_run("shop", f"run {index}", actor=SERVICE)
    for agents in ([], ["nobody"], ["shop"], ["nobody", "else", "shop"]):
        ask = Claim("w1", 60.0, None, agents, {})

        def claim(tx: Tx, ask: Claim = ask) -> object:
            return claim_oldest(tx, ask)

        claimed = await store.runs.run_statements(claim)
        assert (claimed is not None) == ("shop" in agents), agents


async def test_an_insert_that_leaves_out_a_column_gets_its_python_default(store: Store) -> None:
    def add_run(tx: Tx) -> None:  # no message_count, created_at or updated_at: the model's defaults
        tx.session.execute(
            insert(RunRow), [{"id": "r1", "agent_name": "shop", "status": RunStatus.READY, "started_by": "svc"}]
        )

    await store.runs.run_statements(add_run)
    run = await store.runs.get_run("r1")
    assert run.message_count == 0
    assert abs((run.created_at - dt.datetime.now(dt.UTC)).total_seconds()) < 60
