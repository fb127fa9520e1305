"""PostgreSQL's hot path: the statements both databases run, sent in a psycopg pipeline.

Through SQLAlchemy's session every statement costs a round trip and most of a millisecond
of Python, and a claim or a step is five to ten statements. Here a transaction's
statements, SQLAlchemy Core compiled once for psycopg and prepared (`postgres_statements`), are
sent together on a connection kept in autocommit mode (`postgres_connections`), between a
BEGIN and a COMMIT that are statements of the pipeline too:

- a worker's write (`pg_run_write`) that moves no call (a step, a pause, a finish: what
  `WriteSteps.audited_unseen` says) is ONE statement (`as_one_statement`), atomic by itself
  in autocommit: each row of each of its steps a data-modifying CTE, its guards raising in
  the server (`approvals_require_v4`: the worker still holds the run, the rules are the ones
  its calls were decided by, each result's call was executing), its audit appends (the run's
  agent and the settled calls named by the server) and wake-ups its SELECT. A failed guard
  aborts it; its error becomes the one SQLite's path raises. One that moves calls (starts,
  settles, releases them) sends its steps in one round trip, checks their rows in Python
  and makes the audit events from them, then the audit appends, the wake-ups and COMMIT in
  a second (ROLLBACK when a check failed);
- a claim (`postgres_claim`) leases the oldest ready run, reads its calls and starts the
  approved ones (the statements name the run the lease took in the server), then reads its
  history, audits and commits: two round trips;
- a decision (`backends.postgres_decisions`): two.

The audit chain grows in the server on PostgreSQL, always: `chain_and_wake` (the statement
`decision_sql.audit_and_wake` builds) takes the chain's lock, reads the head and hashes
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
from sqlalchemy import Text, bindparam, func, literal, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.selectable import HasCTE, Select
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse
from sqlalchemy.util import greenlet_spawn

from ..decision_rules import DecisionPlan
from ..decision_sql import audit_and_wake_params, prefixed
from ..hot_path_sql import function_name
from ..models import RunRow, ToolCallRow
from ..run_plan import RulesChanged, RunWrite, lease_lost
from ..run_sql import RULES_REVISION, RUN_STATUS, UNLOCKED, NotHeld, Rows, Step, WriteSteps, write_steps
from .postgres_statements import PREPARE, Positional, positional, raw_cursor

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

    It is `decision_sql.audit_and_wake`, which decisions send: the one way the chain is
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
        self._quiet = raw_cursor(connection)
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
                    await raw_cursor(self.connection).execute(
                        statement.sql, statement.args(step.params), prepare=PREPARE
                    )
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


NOT_HELD = "AP001"
"""The SQLSTATE `approvals_require_v4` raises when the worker no longer holds the run."""
RULES_CHANGED = "AP003"
"""… and when the rules that decided a write's calls are not the rules in force (DETAIL: their revision)."""
NOT_EXECUTING = "AP004"
"""… and when a result's call was not executing: the write goes again the way whose events come from its rows."""


@cache
def _filled_in_by_server(audit: Executable) -> Executable:
    """`audit` (`chain_and_wake`'s statement) where the server names what the worker was not told: an event's
    agent, when not given, is its run's; an event given a call (`e{i}_call_in_run`) names that call and its tool."""

    def fill(element: Any, **_: Any) -> Any:
        if not isinstance(element, BindParameter) or not element.key.startswith("e"):
            return None
        event, _sep, name = element.key.partition("_")
        run_id = bindparam(f"{event}_run_id", None, type_=Text)
        if name == "agent_name":
            of_run = select(RunRow.agent_name).where(RunRow.id == run_id).scalar_subquery()
            return func.coalesce(bindparam(element.key, None, type_=element.type), of_run)
        if name == "event":
            named = select(func.jsonb_build_object("subject_id", ToolCallRow.id, "tool_name", ToolCallRow.tool_name))
            call = named.where(
                ToolCallRow.run_id == run_id, ToolCallRow.tool_call_id == bindparam(f"{event}_call_in_run", None)
            ).scalar_subquery()
            given = bindparam(element.key, None, type_=element.type)
            return given.op("||")(func.coalesce(call, sql_cast(literal("{}"), JSONB)))
        return None

    return cast(Executable, replacement_traverse(cast(ExternallyTraversible, audit), {}, fill))


def _require(condition: Any, sqlstate: str, message: str, detail: Any = None) -> Any:
    return getattr(func, function_name("require"))(condition, literal(sqlstate, Text), literal(message, Text), detail)


REQUIRED_RULES = select(
    _require(
        RULES_REVISION.scalar_subquery() == bindparam("expected_revision"),
        RULES_CHANGED,
        "the rules changed",
        sql_cast(RULES_REVISION.scalar_subquery(), Text),
    )
)
"""The rules' revision, raising `RULES_CHANGED` in the server unless it is the one the write's calls were decided by."""


async def pg_run_write(db: Database, write: RunWrite, stored_tool_versions: set[str]) -> None:
    """Carry out a worker's write to the run it holds, in one transaction of one round trip or two.

    `stored_tool_versions` are the tool definitions known to be in this database already: a
    version's definition never changes, so they are not sent again.
    """
    planned = write_steps(write, db.backend, stored_tool_versions)
    try:
        if not planned.audited_unseen or not await _write_in_one_round_trip(db, planned):
            async with pipelined(db) as transaction:
                events = planned.events(await transaction.run(planned.steps))
                await transaction.commit(events, write.announcements)
    except NotHeld:
        [found] = await pg_rows(db, [Step(RUN_STATUS, {"run_id": write.run_id}, returns=True)])
        raise lease_lost(write.run_id, write.worker_id, found[0][0] if found else None) from None
    stored_tool_versions.update(definition.version for definition in write.tool_definitions)


async def _write_in_one_round_trip(db: Database, planned: WriteSteps) -> bool:
    """The write as one statement (`as_one_statement`) in autocommit: one round trip, atomic by itself.

    False when a result's call was not executing: nothing was written, and the write's rows must say which.
    """
    unseen = planned.unseen_events()
    events, calls = [event for event, _ in unseen], [call for _, call in unseen]
    statement, params = as_one_statement(planned, events, calls)
    try:
        async with pooled_connection(db) as connection, connection.pipeline():  # a first Parse goes with it
            await raw_cursor(connection).execute(statement.sql, statement.args(params), prepare=PREPARE)
        return True
    except DBAPIError as exc:
        state = getattr(exc.orig, "sqlstate", None)
        if state == NOT_EXECUTING:
            return False
        if state == NOT_HELD:
            raise NotHeld from None
        if state == RULES_CHANGED:
            detail = getattr(getattr(exc.orig, "diag", None), "message_detail", None)
            raise RulesChanged(int(detail) if detail else None) from None
        raise


def as_one_statement(
    planned: WriteSteps, events: Sequence[AuditEvent], calls_in_run: Sequence[str | None]
) -> tuple[Positional, dict[str, Any]]:
    """A write `audited_unseen` as one statement: each row of each step a data-modifying CTE, the guards
    raising in the server, the audit appends and wake-ups its SELECT; and its parameters.

    Its steps are those SQLite runs one by one (`write_steps`). As CTEs they all read the rows as
    they were before the statement, which is what the order of the steps gives them: the
    messages and new calls take the run's count before the hold grows it, each result settles
    a different call, and the server names the calls and agent that are not changed. A write
    that starts, releases or interrupts calls (two steps on one call) is not `audited_unseen`.
    """
    guards = planned.guards()
    shape: list[tuple[Executable, int, str | None]] = []
    params: dict[str, Any] = {}
    for i, step in enumerate(planned.steps):
        assert not step.with_next, "a write audited_unseen moves no calls"
        rows = [step.params] if isinstance(step.params, Mapping) else list(step.params)
        shape.append((step.statement, len(rows), guards.get(i)))
        for j, row in enumerate(rows):
            params |= {f"s{i}_{j}_{name}": value for name, value in row.items()}
    params["expected_revision"] = planned.write.rules_revision
    chained = chain_and_wake(events, planned.write.announcements)
    audit = None
    if chained is not None:
        audit, audit_params = chained
        params |= audit_params | {f"e{i}_call_in_run": call for i, call in enumerate(calls_in_run)}
    return positional(_composed(tuple(shape), audit)), params


@cache
def _composed(shape: tuple[tuple[Executable, int, str | None], ...], audit: Executable | None) -> Executable:
    """The one statement of a write of this shape (steps, rows each, guards), built and compiled once."""
    ctes = []
    checks = []
    for i, (statement, rows, guard) in enumerate(shape):
        if guard == "rules":  # a read: the rules' revision, checked by the SELECT
            checks.append(REQUIRED_RULES.selected_columns[0])
            continue
        for j in range(rows):
            cte = cast(HasCTE, prefixed(UNLOCKED.get(statement, statement), f"s{i}_{j}_")).cte(f"s{i}_{j}")
            ctes.append(cte)
            if guard in _ONE_ROW:
                sqlstate, message = _ONE_ROW[guard]
                changed = select(func.count()).select_from(cte).scalar_subquery()
                checks.append(_require(changed == 1, sqlstate, message))
    # the guards first: PostgreSQL computes a SELECT's columns in order, so a guard that fails stops the
    # statement before the audit appends take their ids (a failed write leaves no gap in the log's ids)
    appends = [] if audit is None else list(cast(Select[Any], _filled_in_by_server(audit)).selected_columns)
    main = select(*checks, *appends) if checks or appends else select(literal(True))
    return cast(Executable, main.add_cte(*ctes))


_ONE_ROW = {
    "held": (NOT_HELD, "the worker no longer holds the run"),
    "settled": (NOT_EXECUTING, "the call is not executing"),
}
"""The guards of a write's one statement that its step changed exactly one row: SQLSTATE and message."""
