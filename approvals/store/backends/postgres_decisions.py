"""PostgreSQL: a decision in two round trips, the statements of `decision_sql` in a psycopg pipeline.

The first round trip begins the transaction, locks the run and the call and reads what
the rules need; `plan_decision` then decides in Python; the second sends the writes, the
audit appends (in the server, which holds the chain's lock only until the commit that
follows) and the wake-ups as one statement (`plan_write`), and commits. Through
SQLAlchemy's session the same work took five round trips and several milliseconds of
Python per decision.

BEGIN and COMMIT are sent as statements of the pipeline: psycopg's `transaction()` in a
pipeline waits for its BEGIN and syncs twice more at its end, five round trips in all.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from ...calls.actors import Actor
from ...calls.verdicts import Verdict
from ...exceptions import NotFound
from ..decision_rules import Decided, plan_decision
from ..decision_sql import (
    LOCK_CALL,
    LOCK_CALL_COLUMNS,
    LOCK_RUN,
    STANDING_APPROVERS,
    call_facts,
    plan_write,
)
from .postgres import pooled_connection, roll_back
from .postgres_statements import PREPARE, positional, raw_cursor

if TYPE_CHECKING:
    from .database import Database

__all__ = ("pg_decide",)

_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"


async def pg_decide(db: Database, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime) -> Decided:
    """Record one verdict; returns the call as it is afterwards."""
    key = {"call_id": call_id}
    reads = [positional(statement) for statement in (LOCK_RUN, LOCK_CALL, STANDING_APPROVERS)]
    async with pooled_connection(db) as connection:
        try:
            async with connection.pipeline() as pipeline:
                await connection.execute(_BEGIN)
                run_rows, call_rows, standing_rows = [
                    await raw_cursor(connection).execute(read.sql, read.args(key), prepare=PREPARE) for read in reads
                ]
                await pipeline.sync()
                run, call = await run_rows.fetchone(), await call_rows.fetchone()
                if run is None or call is None:
                    raise NotFound(f"No call {call_id!r}")
                facts = call_facts(
                    {"started_by": run[0], "status": run[1], "engine": run[2], "trace_context": run[3]},
                    dict(zip(LOCK_CALL_COLUMNS, call, strict=True)),
                    [(actor_id, digest) for actor_id, digest in await standing_rows.fetchall()],
                )
                plan = plan_decision(facts, verdict, actor, now)
                statement, params = plan_write(facts.call, plan)
                write = positional(statement)
                await raw_cursor(connection).execute(write.sql, write.args(params), prepare=PREPARE)
                await connection.execute(_COMMIT)
        except BaseException:
            await roll_back(connection)
            raise
    for column, value in plan.call_changes.items():
        setattr(facts.call, column, value)
    return Decided(facts.call, facts.run_trace_context)
