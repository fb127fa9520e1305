"""PostgreSQL: pooled connections kept in autocommit mode between the hot path's calls.

A claim, a worker's write or a decision is a pipeline of one or two round trips on a
connection in autocommit mode, BEGIN and COMMIT among its statements (`backends.postgres`). Taking one
from SQLAlchemy's pool, switching it to autocommit and back, and giving it back cost
about a tenth of a millisecond per call, more under load. So a few connections stay
checked out between calls, already in autocommit mode; the pool
still owns every connection, and one kept longer than `KEEP_SECONDS` goes back to it,
so the pool's recycling applies to these too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

__all__ = ("KEEP_SECONDS", "AutocommitConnections")

KEEP_SECONDS = 300.0
"""How long a connection stays out of the pool before it goes back (the pool recycles after 30 minutes)."""
_PLAN_FOR_THE_HOT_PATH = b"SET enable_bitmapscan = off; SET plan_cache_mode = force_generic_plan"
"""For the hot path's statements, which each read or change a few rows by an index. Without bitmap scans: a
planner without statistics (a new database, or one without autovacuum) would read every ready run and sort
them to find the oldest, once per claim. Generic plans from the first execution: a worker's write is one
statement of several CTEs, which takes longer to plan (0.3 to 0.6 ms) than to run, and PostgreSQL would plan
each of its shapes five times on each connection before it kept one plan. Set while a connection is kept
here; reset before it goes back to the pool."""
_PLAN_AS_USUAL = b"RESET enable_bitmapscan; RESET plan_cache_mode"


@dataclass(frozen=True)
class _Kept:
    pooled: PoolProxiedConnection
    since: float


class AutocommitConnections:
    """Up to `keep` idle connections in autocommit mode, last used first."""

    def __init__(self, engine: AsyncEngine, keep: int) -> None:
        self._engine = engine
        self._keep = keep
        self._idle: list[_Kept] = []

    @property
    def idle(self) -> int:
        """Connections kept here, checked out of the pool but in use by nobody."""
        return len(self._idle)

    async def take(self) -> tuple[PoolProxiedConnection, float]:
        """A connection in autocommit mode, and when it left the pool; raises the driver's error if none can be made."""
        now = time.monotonic()
        while self._idle:
            kept = self._idle.pop()
            if now - kept.since < KEEP_SECONDS:
                return kept.pooled, kept.since
            await self.give_back(kept.pooled, kept.since, keep=False)
        pooled = await greenlet_spawn(self._engine.sync_engine.pool.connect)
        connection = _driver(pooled)
        try:
            await connection.set_autocommit(True)
            await connection.execute(_PLAN_FOR_THE_HOT_PATH)
        except BaseException:
            await greenlet_spawn(pooled.invalidate)
            if connection.broken:  # the server dropped it (no pre-ping): it dropped the pool's others too
                await self.close()
                await self._engine.dispose()
            raise
        return pooled, now

    async def give_back(self, pooled: PoolProxiedConnection, since: float, *, keep: bool = True) -> None:
        """Keep the connection for the next call if it is idle and there is room; otherwise back to the pool.

        One in no state to be used again (broken, or inside a transaction) is closed.
        """
        connection = _driver(pooled)
        idle = not connection.broken and connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if keep and idle and len(self._idle) < self._keep:
            self._idle.append(_Kept(pooled, since))
            return
        if idle:
            try:
                await connection.execute(_PLAN_AS_USUAL)
                await connection.set_autocommit(False)  # as the pool hands connections out
            except psycopg.Error:
                idle = False
        await greenlet_spawn(pooled.close if idle else pooled.invalidate)

    async def close(self) -> None:
        """Close the kept connections (the pool's dispose does not reach checked-out ones)."""
        while self._idle:
            await greenlet_spawn(self._idle.pop().pooled.invalidate)


def _driver(pooled: PoolProxiedConnection) -> psycopg.AsyncConnection[Any]:
    return cast("psycopg.AsyncConnection[Any]", pooled.driver_connection)
