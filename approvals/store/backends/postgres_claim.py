"""PostgreSQL: a claim in a pipeline, the statements of `claims` sent in two round trips.

A ready run is leased, read and its approved calls started in one transaction of two
round trips (`_lease_ready`); a run whose worker's lease ran out takes the careful path
(`claims.claim_locked`), which settles what the dead worker left behind first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Text, Update, func, literal
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse

from ...calls import clock
from ..backend import Backend
from ..claims import (
    STALE_LEASE_CHECK_SECONDS,
    Claim,
    Claimable,
    ClaimedRun,
    ClaimRows,
    StaleLeaseCheck,
    claim_events,
    claim_filters,
    claim_history_from,
    claim_locked,
    claim_shape,
    claimed_run,
    history_steps,
    lease_oldest,
    stale_lease_step,
    start_steps,
)
from ..models import RunRow
from ..run_plan import utcnow
from ..run_sql import Step
from ..wakeups import RUNS_CHANNEL
from .postgres import Cursors, fetched, pg_rows, pipelined

if TYPE_CHECKING:
    from .database import Database

__all__ = ("pg_claim",)


async def pg_claim(backend: Backend, db: Database, ask: Claim, stale_leases: StaleLeaseCheck) -> ClaimedRun | None:
    """Lease the oldest ready run and claim it in a pipeline; stale leases go to `claim_locked`.

    Runs whose worker's lease expired are looked for first at most once a
    `STALE_LEASE_CHECK_SECONDS`, and whenever no run is ready: the look scans every lease.
    """
    for _ in range(10):
        checked = clock.monotonic()
        recover = checked - stale_leases.checked_at >= STALE_LEASE_CHECK_SECONDS
        if recover:
            stale_leases.checked_at = checked
        stale = None
        if recover:
            [found] = await pg_rows(db, [stale_lease_step(ask, utcnow(), backend)])
            stale = found[0][0] if found else None
        if stale is None:
            claimed, stale = await _lease_ready(backend, db, ask, look_for_stale=not recover)
            if stale is None:
                return claimed
        # settle what its dead worker left; the wake-ups went with the commit
        recovered, _ = await claim_locked(backend, db, replace(ask, run_id=stale))
        if recovered is not None:
            return recovered
    return None


async def _lease_ready(
    backend: Backend, db: Database, ask: Claim, *, look_for_stale: bool
) -> tuple[ClaimedRun | None, str | None]:
    """The claim of the oldest ready run, in two round trips: lease it, read its calls and start its approved
    ones; read its history, audit and commit. With none ready, the run whose worker's lease expired, if asked."""
    now = utcnow()
    lease_end = now + dt.timedelta(seconds=ask.lease_seconds)
    lease = {**claim_filters(ask, now), "new_owner": ask.worker_id, "lease_end": lease_end}
    leasing = Step(_naming_the_run(lease_oldest("ready", *claim_shape(ask), backend)), lease, returns=True)
    starting = [
        Step(_of_the_leased_run(step.statement), step.params, with_next=step.with_next, returns=step.returns)
        for step in start_steps(None, now)
    ]
    looked: Cursors = []
    reading: Cursors = []
    async with pipelined(db) as transaction:
        [leased, *start] = await transaction.run([leasing, *starting])
        if leased:
            run = Claimable(*leased[0][: len(Claimable._fields)])
            history_from = claim_history_from(ask, run)
            reading = await transaction.send(history_steps(run, history_from))
            await transaction.commit(claim_events(run, ask.worker_id, now, start[-1]), [(RUNS_CHANNEL, run.id)])
        else:  # it leased nothing: COMMIT keeps the connection's prepared statements, where ROLLBACK drops them
            then = [stale_lease_step(ask, now, backend)] if look_for_stale else []
            looked = await transaction.end_unchanged(then=then)
    if leased:
        rows = ClaimRows.of(start, await fetched(reading))
        return claimed_run(run, lease_end, history_from, rows), None
    [found] = await fetched(looked) if looked else [[]]
    return None, found[0][0] if found else None


_LEASED_RUN = "approvals.leased_run"
"""The transaction's setting that holds the id of the run its lease took, for the statements after it."""


@cache
def _naming_the_run(lease: Update) -> Update:
    """`lease` (`lease_oldest`), also keeping the leased run's id in `_LEASED_RUN` until the transaction ends."""
    return lease.returning(func.set_config(literal(_LEASED_RUN), RunRow.id, literal(True)))


@cache
def _of_the_leased_run(statement: Executable) -> Executable:
    """`statement` (one of `start_steps`') naming the run the lease took in the server, so it goes in the
    lease's round trip: `run_id` and `in_run` are the run in `_LEASED_RUN` (none when nothing was leased)."""

    def leased_run(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in ("run_id", "in_run"):
            return func.current_setting(literal(_LEASED_RUN), literal(True), type_=Text)
        return None

    return cast(Executable, replacement_traverse(cast(ExternallyTraversible, statement), {}, leased_run))
