"""PostgreSQL: a claim in a pipeline, the statements of `claims` sent three round trips at a time.

A ready run is leased, read and its approved calls started in one transaction of three
round trips (`_lease_ready`); a run whose worker's lease ran out takes the careful path
(`claims.claim_locked`), which settles what the dead worker left behind first.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..backend import Backend
from ..claims import (
    STALE_LEASE_CHECK_SECONDS,
    Claim,
    Claimable,
    ClaimedRun,
    StaleLeaseCheck,
    claim_filters,
    claim_history_from,
    claim_locked,
    claim_shape,
    claim_steps,
    claimed_run,
    lease_oldest,
    stale_lease_step,
)
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
        checked = time.monotonic()
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
    """The claim of the oldest ready run, in three round trips: lease it; read it and start its approved
    calls; audit and commit. With none ready, the run whose worker's lease expired, if asked to look."""
    now = utcnow()
    lease_end = now + dt.timedelta(seconds=ask.lease_seconds)
    lease = {**claim_filters(ask, now), "new_owner": ask.worker_id, "lease_end": lease_end}
    looked: Cursors = []
    async with pipelined(db) as transaction:
        leasing = Step(lease_oldest("ready", *claim_shape(ask), backend), lease, returns=True)
        [leased] = await transaction.run([leasing])
        if leased:
            run = Claimable(*leased[0])
            history_from = claim_history_from(ask, run)
            steps = claim_steps(run, history_from, now)
            results = await transaction.run(steps) if steps else []
            claimed, events = claimed_run(run, lease_end, history_from, ask.worker_id, now, results)
            await transaction.commit(events, [(RUNS_CHANNEL, run.id)])
        else:  # it leased nothing: COMMIT keeps the connection's prepared statements, where ROLLBACK drops them
            then = [stale_lease_step(ask, now, backend)] if look_for_stale else []
            looked = await transaction.end_unchanged(then=then)
    if leased:
        return claimed, None
    [found] = await fetched(looked) if looked else [[]]
    return None, found[0][0] if found else None
