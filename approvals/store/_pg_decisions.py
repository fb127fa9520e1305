"""PostgreSQL: a decision in two round trips, the statements of `_decision_sql` in a psycopg pipeline.

The first round trip begins the transaction, locks the run and the call and reads what
the rules need; `plan_decision` then decides in Python; the second sends the writes, the
audit appends (in the server, which holds the chain's lock only until the commit that
follows) and the wake-ups, and commits. Through SQLAlchemy's session the same work took
five round trips and several milliseconds of Python per decision.
"""

from __future__ import annotations

import datetime as dt

from ..exceptions import NotFound
from ._base import Actor
from ._decision_sql import (
    LOCK_CALL,
    LOCK_RUN,
    STANDING_APPROVERS,
    audit_and_wake_params,
    call_facts,
    for_psycopg,
    plan_statements,
)
from ._pg import pooled_connection
from .db import Database
from .models import ToolCallRow
from .verdicts import Verdict, plan_decision

__all__ = ("pg_decide",)


async def pg_decide(db: Database, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime) -> ToolCallRow:
    """Record one verdict; returns the call as it is afterwards."""
    key = {"call_id": call_id}
    reads = [for_psycopg(statement) for statement in (LOCK_RUN, LOCK_CALL, STANDING_APPROVERS)]
    async with pooled_connection(db) as connection, connection.pipeline() as pipeline, connection.transaction():
        run_rows, call_rows, standing_rows = [await connection.execute(read.sql, read.params(key)) for read in reads]
        await pipeline.sync()
        run, call = await run_rows.fetchone(), await call_rows.fetchone()
        if run is None or call is None:
            raise NotFound(f"No call {call_id!r}")
        columns = [column.name for column in call_rows.description or ()]
        facts = call_facts(
            {"started_by": run[0], "status": run[1]},
            dict(zip(columns, call, strict=True)),
            [(actor_id, digest) for actor_id, digest in await standing_rows.fetchall()],
        )
        plan = plan_decision(facts, verdict, actor, now)
        for statement, params in [*plan_statements(facts.call, plan), audit_and_wake_params(plan)]:
            compiled = for_psycopg(statement)
            await connection.execute(compiled.sql, compiled.params(params))
    for column, value in plan.call_changes.items():
        setattr(facts.call, column, value)
    return facts.call
