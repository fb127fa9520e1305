"""PostgreSQL's backend: row locks, the audit chain grown in the server, LISTEN/NOTIFY, and pipelines.

Writers lock the rows they change (`FOR UPDATE`, `SKIP LOCKED` where a claim may pass one by).
The audit chain grows in the server, always (`postgres.chain_and_wake`): the chain's advisory
lock, its head and the hash are taken by one statement, the transaction's last, so the lock is
held only until its COMMIT. Wake-ups are `pg_notify`, sent by the same statement or on their
own, and delivered at commit to every process (`PostgresNotifier`). A worker's write and a
decision go through psycopg pipelines (`postgres.pg_run_write`, `postgres_decisions.pg_decide`).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import psycopg
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from sqlalchemy import ARRAY, ColumnElement, Connection, Select, Text, func, literal, or_, text
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable

from ..._outage import Outage
from ...calls.actors import Actor
from ...calls.verdicts import Verdict
from ..audit import AuditEvent
from ..backend import Finish, SelectT, Transaction, statements_in_one_transaction
from ..claims import Claim, ClaimedRun, StaleLeaseCheck
from ..decision_rules import Decided
from ..errors import describe
from ..wakeups import check_channel
from .notify import Notifier
from .postgres import chain_and_wake, pg_rows, pg_run_write, pipelined
from .postgres_claim import pg_claim
from .postgres_decisions import pg_decide

if TYPE_CHECKING:
    from ..backend import UpsertInsert
    from ..run_plan import RunWrite
    from ..run_sql import Rows, Step
    from .database import Database

__all__ = ("CHAIN_CHUNK", "PostgresBackend", "PostgresNotifier")

T = TypeVar("T")
logger = logging.getLogger("approvals.store")
WakeUps = list[tuple[str, str]]

CHAIN_CHUNK = 50
"""Most events one statement appends: each is a call nested in the previous one's, and SQLAlchemy
compiles nesting recursively (a rules file of a few hundred rules is one transaction)."""


QUERY_CANCELED = "57014"
"""PostgreSQL's SQLSTATE for a statement stopped by `statement_timeout`."""


class PostgresBackend:
    """`Backend` for PostgreSQL."""

    name = "postgresql"

    def insert(self, table: Any) -> UpsertInsert:
        return pg_insert(table)

    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        return query.with_for_update(skip_locked=skip_locked)

    def lock_first(self, connection: Connection, query: Select[Any]) -> Sequence[Any] | None:
        return connection.scalars(query.with_for_update(skip_locked=True)).all()

    def hold(self, connection: Connection, statement: Executable) -> None:
        connection.execute(statement)

    def json_items(self, column: Any) -> Any:
        return func.jsonb_array_elements_text(column).table_valued("value")

    def routed_to(self, column: Any, groups: Collection[str]) -> ColumnElement[bool]:
        unrouted = or_(column.is_(None), sql_cast(column, Text).in_(("null", "[]")))
        if not groups:
            return unrouted
        return or_(unrouted, column.op("?|")(literal(sorted(groups), ARRAY(Text))))

    def seconds_between(self, start: Any, end: Any) -> ColumnElement[float]:
        return cast(ColumnElement[float], func.extract("epoch", end - start))

    async def limit_statement_time(self, session: AsyncSession, milliseconds: int) -> None:
        await session.execute(text(f"SET LOCAL statement_timeout = {int(milliseconds)}"))

    def timed_out(self, error: BaseException) -> bool:
        return getattr(getattr(error, "orig", None), "sqlstate", None) == QUERY_CANCELED

    def end_statements(self, tx: Transaction[Connection]) -> None:
        for statement in _ending(tx.events, tx.announcements):
            tx.session.execute(*statement)

    async def end_session(self, tx: Transaction[AsyncSession]) -> None:
        for statement in _ending(tx.events, tx.announcements):
            await tx.session.execute(*statement)

    async def run_statements(
        self, db: Database, body: Callable[[Transaction[Connection]], T]
    ) -> tuple[Transaction[Connection], T]:
        whole = statements_in_one_transaction(self, body)
        async with db.write() as session:
            return await session.run_sync(lambda sync_session: whole(sync_session.connection()))

    async def read_steps(self, db: Database, steps: Sequence[Step]) -> list[Rows]:
        return await pg_rows(db, steps)

    async def checked_write(
        self, db: Database, first: Sequence[Step], then: Callable[[list[Rows]], Finish[T]]
    ) -> tuple[T, WakeUps]:
        async with pipelined(db) as transaction:
            finish = then(await transaction.run(first))  # raising: the block rolls the transaction back
            await transaction.send(finish.steps)
            await transaction.commit(finish.events, finish.announcements)
        return finish.result, []  # sent by the server at commit

    async def write_run(self, db: Database, write: RunWrite, stored_tool_versions: set[str]) -> WakeUps:
        await pg_run_write(db, write, stored_tool_versions)
        return []  # sent by the server at commit

    async def decide(
        self, db: Database, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime
    ) -> tuple[Decided, WakeUps]:
        return await pg_decide(db, call_id, verdict, actor, now), []

    async def claim(self, db: Database, ask: Claim, stale_leases: StaleLeaseCheck) -> tuple[ClaimedRun | None, WakeUps]:
        return await pg_claim(self, db, ask, stale_leases), []  # sent by the server at commit

    def notifier(self, db: Database) -> Notifier:
        return PostgresNotifier(db)


def _ending(events: list[AuditEvent], announcements: list[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """A transaction's last statements: its events in chunks of at most `CHAIN_CHUNK`, the wake-ups with the last.

    Each chunk reads the chain's head the one before wrote; without events, the wake-ups alone.
    """
    if not events:
        return [_wake_up(announcements)] if announcements else []
    chunks = [events[start : start + CHAIN_CHUNK] for start in range(0, len(events), CHAIN_CHUNK)]
    ending = []
    for index, chunk in enumerate(chunks):
        chained = chain_and_wake(chunk, announcements if index == len(chunks) - 1 else [])
        assert chained is not None, "there are events to chain"
        ending.append(chained)
    return ending


def _wake_up(messages: list[tuple[str, str]]) -> tuple[Any, dict[str, str]]:
    """One statement that queues `pg_notify` for each message; delivered at commit."""
    unique = list(dict.fromkeys(messages))
    calls = ", ".join(f"pg_notify(:c{i}, :p{i})" for i in range(len(unique)))
    params: dict[str, str] = {}
    for i, (channel, payload) in enumerate(unique):
        params[f"c{i}"] = channel
        params[f"p{i}"] = payload
    return text(f"SELECT {calls}"), params


class PostgresNotifier(Notifier):
    """Wake-ups across processes: `pg_notify` at commit, a LISTEN connection per channel (or a shared `relay`)."""

    def publish(self, messages: list[tuple[str, str]]) -> None:
        """Nothing to do: the server delivered them at commit, to this process's listeners too."""

    look_every = 1.0
    """Only a safety net here: announcements reach every process through the server."""

    def hears(self, channel: str) -> bool:
        """Only while a `relay` serves the channel: then its LISTEN connection feeds `watch` callbacks too."""
        return channel in self._relayed

    async def relay(
        self,
        channels: Collection[str],
        *,
        until: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        for channel in channels:
            check_channel(channel)
        async with anyio.create_task_group() as group:
            for channel in channels:
                group.start_soon(self._listen_until_cancelled, channel, functools.partial(self._fan_out, channel))
            self._relayed.update(channels)
            task_status.started()
            try:
                await (until.wait() if until is not None else anyio.sleep_forever())
            finally:
                self._relayed.difference_update(channels)
                group.cancel_scope.cancel()

    @asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
        if channel in self._relayed:  # its relay's connection serves this listener too
            async with super().listen(channel) as received:
                yield received
            return
        check_channel(channel)
        send, receive = anyio.create_memory_object_stream[str](max_buffer_size=1_000)
        async with anyio.create_task_group() as group:
            group.start_soon(self._listen_for, channel, send)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()
                receive.close()

    async def _listen_for(self, channel: str, send: MemoryObjectSendStream[str]) -> None:
        """One listener's own LISTEN connection (a channel no `relay` serves)."""

        def deliver(payload: str) -> None:
            with suppress(anyio.WouldBlock):
                send.send_nowait(payload)

        async with send:
            await self._listen_until_cancelled(channel, deliver)

    async def _listen_until_cancelled(self, channel: str, deliver: Callable[[str], None]) -> None:
        """Hold a LISTEN connection, and open a new one whenever it is lost (server restart, dropped connection).

        After a reconnection an empty payload wakes the listener up: announcements made while
        the connection was down are lost, so it should look for itself.
        """
        conninfo = self.db.sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
        outage = Outage(f"listening for {channel!r}", logger)
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=10)
            except (psycopg.Error, OSError) as exc:
                await anyio.sleep(outage.failed(describe(exc)))
                continue
            try:
                await connection.execute(f'LISTEN "{channel}"')
                if outage.ongoing:
                    outage.succeeded()
                    deliver("")
                async for notification in connection.notifies():
                    deliver(notification.payload)
                raise psycopg.OperationalError("the server closed the LISTEN connection")
            except (psycopg.Error, OSError) as exc:
                delay = outage.failed(describe(exc))
            finally:
                with anyio.CancelScope(shield=True):
                    await connection.close()
            await anyio.sleep(delay)
