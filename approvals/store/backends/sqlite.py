"""SQLite's backend: one process, one writer at a time, and the audit chain grown in Python.

Every write transaction begins with `BEGIN IMMEDIATE` (`database.py`), so the database's write
lock serializes writers: no row locks, no advisory locks. A transaction of plain statements
runs straight on the `sqlite3` cursor (`sqlite_writes.SQLiteWriter`); its audit events are
chained here, after its statements, under that lock. Wake-ups stay in the process, published
after the commit (`notify.Notifier`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Select, exists, func, or_
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable

from ...calls.actors import Actor
from ...calls.verdicts import Verdict
from ..audit import write_chained
from ..backend import Finish, SelectT, Transaction, statements_in_one_transaction
from ..claims import Claim, ClaimedRun, StaleLeaseCheck, claim_locked
from ..decision_rules import Decided
from ..decision_sql import decide_statements
from ..run_sql import Rows, Step, apply_write, run_steps
from .notify import Notifier

if TYPE_CHECKING:
    from ..backend import UpsertInsert
    from ..run_plan import RunWrite
    from .database import Database

__all__ = ("SQLiteBackend",)

T = TypeVar("T")
WakeUps = list[tuple[str, str]]


class SQLiteBackend:
    """`Backend` for SQLite."""

    name = "sqlite"

    def insert(self, table: Any) -> UpsertInsert:
        return sqlite_insert(table)

    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        return query  # the transaction holds the database's write lock already

    def lock_first(self, connection: Connection, query: Select[Any]) -> Sequence[Any] | None:
        return None

    def hold(self, connection: Connection, statement: Executable) -> None:
        return None

    def json_items(self, column: Any) -> Any:
        return func.json_each(column).table_valued("value")

    def routed_to(self, column: Any, groups: Collection[str]) -> ColumnElement[bool]:
        unrouted = func.coalesce(func.json_array_length(column), 0) == 0
        if not groups:
            return unrouted
        each = self.json_items(column)
        mine = exists().select_from(each).where(each.c.value.in_(sorted(groups)))
        return or_(unrouted, mine)

    def seconds_between(self, start: Any, end: Any) -> ColumnElement[float]:
        return (func.julianday(end) - func.julianday(start)) * 86400.0

    async def limit_statement_time(self, session: AsyncSession, milliseconds: int) -> None:
        return None

    def timed_out(self, error: BaseException) -> bool:
        return False

    def end_statements(self, tx: Transaction[Connection]) -> None:
        write_chained(tx.session, tx.events)

    async def end_session(self, tx: Transaction[AsyncSession]) -> None:
        if tx.events:
            await tx.session.run_sync(lambda session: write_chained(session.connection(), tx.events))

    async def run_statements(
        self, db: Database, body: Callable[[Transaction[Connection]], T]
    ) -> tuple[Transaction[Connection], T]:
        return await db.write_statements(statements_in_one_transaction(self, body))

    async def read_steps(self, db: Database, steps: Sequence[Step]) -> list[Rows]:
        async with db.read() as session:
            return [(await session.execute(step.statement, step.params)).all() for step in steps]

    async def checked_write(
        self, db: Database, first: Sequence[Step], then: Callable[[list[Rows]], Finish[T]]
    ) -> tuple[T, WakeUps]:
        def whole(tx: Transaction[Connection]) -> T:
            finish = then(run_steps(tx, first))
            run_steps(tx, finish.steps)
            tx.events.extend(finish.events)
            tx.announcements.extend(finish.announcements)
            return finish.result

        tx, result = await self.run_statements(db, whole)
        return result, tx.announcements

    async def write_run(self, db: Database, write: RunWrite, stored_tool_versions: set[str]) -> WakeUps:
        tx, _ = await self.run_statements(db, lambda tx: apply_write(tx, write, stored_tool_versions))
        stored_tool_versions.update(definition.version for definition in write.tool_definitions)
        return tx.announcements

    async def decide(
        self, db: Database, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime
    ) -> tuple[Decided, WakeUps]:
        tx, (facts, plan) = await self.run_statements(
            db, lambda tx: decide_statements(tx, call_id, verdict, actor, now)
        )
        for column, value in plan.call_changes.items():
            setattr(facts.call, column, value)
        return Decided(facts.call, facts.run_trace_context), tx.announcements

    async def claim(self, db: Database, ask: Claim, stale_leases: StaleLeaseCheck) -> tuple[ClaimedRun | None, WakeUps]:
        return await claim_locked(self, db, ask)  # one query finds a ready run and a dead worker's alike

    def notifier(self, db: Database) -> Notifier:
        return Notifier(db)
