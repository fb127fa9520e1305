"""Syslog delivery lag of the audit stream: an event appended to the log, to its line in rsyslog's file.

Debian's rsyslog (`apt-get install rsyslog`) listens on plain TCP on a free port and writes each
message to a file; `stream_to` runs the durable deliverer with one syslog sink, as `approvals
serve` does. Each event is appended in its own transaction with the wake-up a run's write sends
(`RUNS_CHANNEL`), one at a time: the lag is commit returned → the line is in the file (the file is
watched every 0.2 ms). Then a burst: 1,000 events appended at once, and the seconds until the last
arrives (events per second). SQLite and PostgreSQL. Issue 39 asks for the p50.
"""

from __future__ import annotations

import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _databases import migrated_database

from approvals.audit.sinks import SyslogSinkSettings
from approvals.audit.sinks_syslog import SyslogSink
from approvals.audit.stream import stream_to
from approvals.calls.actors import SYSTEM_ACTOR_ID
from approvals.store import RUNS_CHANNEL, Database, Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.audit.rsyslog import Rsyslog

SINGLE = 300
BURST = 1_000


def lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


async def append(store: Store, n: int) -> None:
    async with store.runs.transaction() as tx:
        tx.audit(SYSTEM_ACTOR_ID, "call.approved", "call", f"bench-{n}", details={"n": n, "amount": "249.00"})
        tx.announce(RUNS_CHANNEL, "bench")


async def until_lines(path: Path, count: int, deadline: float = 60.0) -> float:
    start = time.perf_counter()
    while lines(path) < count:
        if time.perf_counter() - start > deadline:
            raise TimeoutError(f"rsyslog has {lines(path)} of {count} lines")
        await anyio.sleep(0.0002)
    return time.perf_counter()


async def measure(url: str, server: Rsyslog) -> tuple[list[float], float]:
    db = Database(url)
    store = Store(db)
    sink = SyslogSink(SyslogSinkSettings(host="127.0.0.1", port=server.port, tls=False))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(stream_to, store, [sink], stop))
            lags = []
            for n in range(SINGLE):
                before = lines(server.output)
                await append(store, n)
                appended = time.perf_counter()
                lags.append(await until_lines(server.output, before + 1) - appended)
            before = lines(server.output)
            start = time.perf_counter()
            for n in range(BURST):
                await append(store, SINGLE + n)
            burst = await until_lines(server.output, before + BURST) - start
            stop.set()
    finally:
        await db.dispose()
    return lags, burst


async def main() -> None:
    for kind in ("sqlite", "postgresql"):
        with tempfile.TemporaryDirectory() as folder, migrated_database(kind) as url:
            server = Rsyslog(Path(folder) / "rsyslog")
            server.start()
            try:
                lags, burst = await measure(url, server)
            finally:
                server.stop()
            ms = sorted(lag * 1000 for lag in lags)
            p95 = ms[int(len(ms) * 0.95) - 1]
            print(
                f"{kind:10} syslog lag append→received: p50 {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms "
                f"({SINGLE} events one at a time); burst of {BURST}: {burst:.2f} s ({BURST / burst:.0f} events/s)"
            )


if __name__ == "__main__":
    anyio.run(main)
