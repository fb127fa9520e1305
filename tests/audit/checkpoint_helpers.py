"""Audit events made for real, and tampering done the way a database administrator would do it.

Each tampering helper writes plain SQL and then recomputes every later hash (`rehash`), so the hash
chain is intact again afterwards: only the signed checkpoints can tell.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from approvals.audit.checkpoints import CheckpointConfig, Checkpointer
from approvals.audit.signing import SigningKey
from approvals.store import Store
from approvals.store.audit import GENESIS_HASH, event_hash
from approvals.store.backends.database import sqlite_file
from approvals.store.models import AuditEventRow

from ..databases import PG_SERVER

__all__ = (
    "add_events",
    "admin_delete_range",
    "admin_reorder",
    "admin_rewrite_details",
    "admin_truncate",
    "checkpointer",
    "copy_database",
    "drop_copy",
    "rehash",
)


async def add_events(store: Store, count: int, *, start: int = 0, per_transaction: int = 50) -> None:
    """`count` audit events, appended as the app appends them (chained at the end of each transaction)."""
    done = 0
    while done < count:
        batch = min(per_transaction, count - done)
        async with store.audit.transaction() as tx:
            for i in range(start + done, start + done + batch):
                tx.audit(
                    f"user{i % 7}",
                    "call.approved" if i % 3 else "call.denied",
                    "call",
                    f"call-{i}",
                    run_id=None,
                    tool_name="refund",
                    details={"amount": f"{i}.00", "order_id": f"A-{i}", "n": i},
                )
        done += batch


def checkpointer(store: Store, key: SigningKey, directory: Path | None = None, **config: Any) -> Checkpointer:
    from approvals.audit.checkpoint_files import DirectorySink

    sinks = [DirectorySink(directory)] if directory is not None else []
    return Checkpointer(store.db, key, CheckpointConfig(directory=directory, **config), sinks)


async def _sql(store: Store, statements: list[tuple[str, dict[str, Any]]]) -> None:
    async with store.db.engine.begin() as conn:
        for sql, params in statements:
            await conn.execute(text(sql), params)


async def rehash(store: Store, from_id: int = 0) -> None:
    """Recompute `prev_hash` and `hash` of every event from `from_id` on, as an administrator covering tracks would."""
    async with store.db.sessions() as session, session.begin():
        rows = (await session.execute(text("SELECT id FROM audit_events ORDER BY id"))).scalars().all()
        prev = GENESIS_HASH
        for event_id in rows:
            row = await session.get(AuditEventRow, event_id)
            assert row is not None
            if event_id >= from_id:
                new = event_hash(prev, row)
                await session.execute(
                    text("UPDATE audit_events SET prev_hash = :p, hash = :h WHERE id = :id"),
                    {"p": prev, "h": new, "id": event_id},
                )
                prev = new
            else:
                prev = row.hash


def _details_sql(store: Store) -> str:
    return "CAST(:d AS JSONB)" if store.db.is_postgres else ":d"


async def admin_rewrite_details(store: Store, event_id: int, details: dict[str, Any]) -> None:
    """UPDATE one event's details, then recompute every later hash."""
    sql = f"UPDATE audit_events SET details = {_details_sql(store)} WHERE id = :id"
    await _sql(store, [(sql, {"d": json.dumps(details), "id": event_id})])
    await rehash(store, event_id)


async def admin_delete_range(store: Store, first: int, last: int) -> None:
    """DELETE events `first`..`last`, then recompute every later hash."""
    await _sql(store, [("DELETE FROM audit_events WHERE id BETWEEN :a AND :b", {"a": first, "b": last})])
    await rehash(store, first)


async def admin_reorder(store: Store, a: int, b: int) -> None:
    """Swap the contents of events `a` and `b` (their order in the log), then recompute every later hash."""
    columns = ["at", "actor", "action", "subject_type", "subject_id", "run_id", "agent_name", "tool_name", "details"]
    swap = ", ".join(f"{c} = other.{c}" for c in columns)
    async with store.db.engine.begin() as conn:
        await conn.execute(text("CREATE TEMPORARY TABLE other_copy AS SELECT * FROM audit_events WHERE id IN (:a, :b)"),
                           {"a": a, "b": b})  # fmt: skip
        for target, source in ((a, b), (b, a)):
            await conn.execute(
                text(f"UPDATE audit_events SET {swap} FROM (SELECT * FROM other_copy WHERE id = :s) AS other "
                     "WHERE audit_events.id = :t"),
                {"s": source, "t": target},
            )  # fmt: skip
        await conn.execute(text("DROP TABLE other_copy"))
    await rehash(store, min(a, b))


async def admin_truncate(store: Store, after: int) -> None:
    """DELETE every event after `after`: the tail cut (nothing later to rehash)."""
    await _sql(store, [("DELETE FROM audit_events WHERE id > :a", {"a": after})])


def copy_database(url: str, tmp_path: Path) -> str:
    """A copy of the database as it is now, the way an operator keeps a backup: SQLite's `.backup`,
    PostgreSQL's `pg_dump` (custom format) restored with `pg_restore` into a fresh database."""
    path = sqlite_file(url)
    if path is not None:
        backup = tmp_path / f"backup-{uuid.uuid4().hex[:8]}.db"
        source, target = sqlite3.connect(path), sqlite3.connect(backup)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return f"sqlite:///{backup}"
    dump = tmp_path / f"dump-{uuid.uuid4().hex[:8]}.pgdump"
    plain = make_url(url).set(drivername="postgresql")
    name = f"restored_{uuid.uuid4().hex[:12]}"
    conninfo = plain.render_as_string(hide_password=False)
    subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", conninfo], check=True)
    admin = make_url(PG_SERVER).render_as_string(hide_password=False)
    subprocess.run(["psql", admin, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
    target_url = plain.set(database=name).render_as_string(hide_password=False)
    subprocess.run(["pg_restore", "--no-owner", f"--dbname={target_url}", str(dump)], check=True)
    return target_url


def drop_copy(url: str) -> None:
    """Remove a copy `copy_database` made."""
    if sqlite_file(url) is not None:
        return
    name = make_url(url).database
    admin = make_url(PG_SERVER).render_as_string(hide_password=False)
    subprocess.run(["psql", admin, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=False,
                   capture_output=True)  # fmt: skip
