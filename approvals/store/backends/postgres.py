"""PostgreSQL's hot path: the statements both databases run, sent in a psycopg pipeline.

Through SQLAlchemy's session every statement costs a round trip and most of a millisecond
of Python, and a claim or a step is five to ten statements. Here a transaction's
statements, SQLAlchemy Core compiled once for psycopg and prepared (`postgres_statements`), are
sent together on a connection kept in autocommit mode (`postgres_connections`), between a
BEGIN and a COMMIT that are statements of the pipeline too:

- a worker's write (`pg_run_write`): its steps (`run_sql.write_steps`) in one round
  trip; their rows are checked in Python (the worker still holds the run, every call to
  execute was approved) and the audit events made from them; then the audit appends and
  the wake-ups, and COMMIT, in a second (ROLLBACK instead when a check failed). A step
  that only appends messages carries the lease guard in each statement and audits
  nothing: it goes with its COMMIT, in one round trip;
- a claim (`lifecycle._claim_pipelined`) leases the oldest ready run, then reads what the
  worker needs and starts the approved calls, then audits and commits: three round trips;
- a decision (`backends.postgres_decisions`): two.

The audit chain grows in the server on PostgreSQL, always: `chain_and_wake` (the statement
`_decision_sql.audit_and_wake` builds) takes the chain's lock, reads the head and hashes
`prev_hash || content`, where `approvals_event_content_v2` builds the canonical JSON that
`audit.event_content` builds (a test holds the two to the same bytes). Every transaction on
PostgreSQL appends its events this way, this one and `StoreBase`'s alike, as the lock is held
only from that statement to the COMMIT that follows it in the same round trip.

Connections come from the SQLAlchemy engine's pool, so there is one pool and one URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import anyio
import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.selectable import HasCTE
from sqlalchemy.util import greenlet_spawn

from .._decision_sql import audit_and_wake_params
from ..decision_rules import DecisionPlan
from ..run_plan import RunWrite, lease_lost
from ..run_sql import RUN_STATUS, NotHeld, Rows, Step, write_steps
from .postgres_statements import PREPARE, positional

if TYPE_CHECKING:
    from ..audit import AuditEvent
    from .database import Database

__all__ = (
    "Cursors",
    "PipelinedTransaction",
    "chain_and_wake",
    "fetched",
    "pg_rows",
    "pg_run_write",
    "pipelined",
    "pooled_connection",
)

_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"
_ROLLBACK = b"ROLLBACK"
_IDLE = psycopg.pq.TransactionStatus.IDLE


@asynccontextmanager
async def pooled_connection(db: Database) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A pooled connection in autocommit mode: each statement outside BEGIN and COMMIT is its own transaction.

    It comes from the few kept in autocommit mode between calls (`AutocommitConnections`).
    Driver errors, also a failure to connect, come out as SQLAlchemy's, as on the ORM path.
    Cancellation waits for the statement.
    """
    kept = db.autocommit_connections
    if kept is None:
        raise RuntimeError("pooled_connection is for PostgreSQL")
    try:
        pooled, since = await kept.take()
    except psycopg.Error as exc:  # no connection could be made: the server is down, say (the caller's 503)
        raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc
    connection = cast("psycopg.AsyncConnection[Any]", pooled.driver_connection)
    with anyio.CancelScope(shield=True):
        try:
            yield connection
        except BaseException as exc:
            if connection.broken:  # the server went away: its other connections are gone too
                await greenlet_spawn(pooled.invalidate)
                await kept.close()
                await db.engine.dispose()
            else:
                await kept.give_back(pooled, since)
            if not isinstance(exc, psycopg.Error):
                raise
            raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc
        await kept.give_back(pooled, since)


def chain_and_wake(
    events: Sequence[AuditEvent], announcements: Sequence[tuple[str, str]]
) -> tuple[Executable, dict[str, Any]] | None:
    """The statement that appends `events` to the audit chain in the server and sends the wake-ups, if any.

    It is `_decision_sql.audit_and_wake`, which decisions send: the one way the chain is
    extended on PostgreSQL.
    """
    if not events and not announcements:
        return None
    plan = DecisionPlan({}, {}, None, events=list(events), announcements=list(announcements))
    return audit_and_wake_params(plan)


Cursors = list[psycopg.AsyncCursor[Any] | None]
"""The cursors of queued steps; None for a step that returns no rows."""


@cache
def _with(first: Executable, then: Executable) -> Executable:
    """`then` with `first` as its CTE: one statement, both reading the rows as they were before it."""
    return cast(Executable, cast(HasCTE, then).add_cte(cast(HasCTE, first).cte("first")))


class PipelinedTransaction:
    """A transaction whose statements go in a psycopg pipeline; `pipelined` begins it and ends it.

    Statements are queued, and sent when their rows are asked for (`run`, `rows`) or when
    the block ends: what ends the transaction (`commit`, `roll_back`) is sent then, with
    anything queued after the last rows were read, in one round trip.
    """

    def __init__(self, connection: psycopg.AsyncConnection[Any], pipeline: psycopg.AsyncPipeline) -> None:
        self.connection = connection
        self._pipeline = pipeline
        self._quiet = connection.cursor()
        """One cursor for the statements whose rows nobody reads: a cursor each costs more than a statement."""
        self.ended = False

    async def begin(self) -> None:
        await self._quiet.execute(_BEGIN)

    async def send(self, steps: Sequence[Step]) -> Cursors:
        """Queue `steps`; their cursors, whose rows come once they are sent.

        A step that goes `with_next` is sent as a CTE of the next one (its cursor is None).
        """
        cursors: Cursors = []
        with_next = None
        for step in steps:
            if step.with_next:
                with_next = step
                cursors.append(None)
                continue
            statement = positional(step.statement if with_next is None else _with(with_next.statement, step.statement))
            with_next = None
            if not isinstance(step.params, Mapping):
                await self._quiet.executemany(statement.sql, [statement.args(row) for row in step.params])
            elif step.returns:
                cursors.append(
                    await self.connection.execute(statement.sql, statement.args(step.params), prepare=PREPARE)
                )
                continue
            else:
                await self._quiet.execute(statement.sql, statement.args(step.params), prepare=PREPARE)
            cursors.append(None)
        return cursors

    async def rows(self, cursors: Cursors) -> list[Rows]:
        """Send what is queued (one round trip), and the rows of `cursors`."""
        await self._pipeline.sync()
        return await fetched(cursors)

    async def run(self, steps: Sequence[Step]) -> list[Rows]:
        """`steps` in one round trip: their rows."""
        return await self.rows(await self.send(steps))

    async def commit(self, events: Sequence[AuditEvent], announcements: Sequence[tuple[str, str]]) -> None:
        """Queue the audit appends and wake-ups (`chain_and_wake`) and COMMIT: the block's end sends them."""
        chained = chain_and_wake(events, announcements)
        if chained is not None:
            audit, params = chained
            statement = positional(audit)
            await self._quiet.execute(statement.sql, statement.args(params), prepare=PREPARE)
        await self._quiet.execute(_COMMIT)
        self.ended = True

    async def roll_back(self, then: Sequence[Step] = ()) -> Cursors:
        """Queue ROLLBACK, then `then` outside any transaction: the block's end sends them; their cursors.

        psycopg forgets the connection's prepared statements at every ROLLBACK (the server
        deallocates them at its next statement): a transaction that changed nothing ends
        with `end_unchanged` instead.
        """
        await self._quiet.execute(_ROLLBACK)
        self.ended = True
        return await self.send(then)

    async def end_unchanged(self, then: Sequence[Step] = ()) -> Cursors:
        """End a transaction whose statements changed nothing (a claim that leased no run), then queue `then`.

        COMMIT, which for such a transaction is what ROLLBACK is, and keeps the prepared statements.
        """
        await self._quiet.execute(_COMMIT)
        self.ended = True
        return await self.send(then)


async def fetched(cursors: Cursors) -> list[Rows]:
    """The rows of sent steps (after a sync, or after their pipeline ended)."""
    return [[] if cursor is None else await cursor.fetchall() for cursor in cursors]


@asynccontextmanager
async def pipelined(db: Database) -> AsyncIterator[PipelinedTransaction]:
    """A transaction in a pipeline on a kept connection: BEGIN goes with the first statements.

    The block commits it (`commit`); one that ends without doing so rolls it back, as does
    an error. The block's end sends what is queued, and cursors keep their rows after it.
    """
    async with pooled_connection(db) as connection:
        try:
            async with connection.pipeline() as pipeline:
                transaction = PipelinedTransaction(connection, pipeline)
                await transaction.begin()
                yield transaction
                if not transaction.ended:
                    await transaction.roll_back()
        except BaseException:
            await roll_back(connection)
            raise


async def roll_back(connection: psycopg.AsyncConnection[Any]) -> None:
    """End a transaction that failed or was refused, so its connection can be used again.

    A connection this fails on is not idle, and `pooled_connection` discards it.
    """
    if connection.broken or connection.info.transaction_status == _IDLE:
        return
    with suppress(psycopg.Error):
        await connection.rollback()


async def pg_rows(db: Database, steps: Sequence[Step]) -> list[Rows]:
    """`steps` in one round trip, each statement its own transaction (reads); their rows."""
    async with pooled_connection(db) as connection:
        async with connection.pipeline() as pipeline:
            cursors = await PipelinedTransaction(connection, pipeline).send(steps)
        return await fetched(cursors)


async def pg_run_write(db: Database, write: RunWrite, stored_tool_versions: set[str]) -> None:
    """Carry out a worker's write to the run it holds: its steps in a pipeline, then its audit events and COMMIT.

    `stored_tool_versions` are the tool definitions known to be in this database already: a
    version's definition never changes, so they are not sent again.
    """
    planned = write_steps(write, db.backend, stored_tool_versions)
    try:
        async with pipelined(db) as transaction:
            cursors = await transaction.send(planned.steps)
            if planned.may_commit_unseen:  # every statement carries the lease guard, and none is audited
                await transaction.commit((), ())
            else:
                events = planned.events(await transaction.rows(cursors))
                await transaction.commit(events, write.announcements)
        if planned.may_commit_unseen:
            planned.events(await fetched(cursors))  # NotHeld if the hold matched nothing: nothing was written
    except NotHeld:
        [found] = await pg_rows(db, [Step(RUN_STATUS, {"run_id": write.run_id}, returns=True)])
        raise lease_lost(write.run_id, write.worker_id, found[0][0] if found else None) from None
    stored_tool_versions.update(definition.version for definition in write.tool_definitions)
