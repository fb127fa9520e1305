"""Round trips, statements and client CPU of each store operation on the hot path (issue 37, item 5).

Wall time on a shared machine moves with its load; what a write sends does not. Each
operation a resume makes (claim, mark calls executing, append a step, pause, finish) and
a decision are counted from libpq's own trace of the wire (`PQtrace`): round trips are the
Sync and simple Query messages the client waits on, statements the Bind and Query
messages, Parse the statements the server parsed (an unprepared statement is parsed at
each execution, a prepared one once per connection). Client CPU is the process's CPU time
per operation (`time.process_time`), the median and the 10th percentile (load from other
processes inflates it, rarely deflates it); with APPROVALS_BENCH_COUNT_CALLS=1 also the
function calls it makes (Python and C), which load does not change.

The same flow as `bench_resume`: runs with 200 prior messages, paused on an approved call,
resumed cold (claim, run the call, pause again), decided, resumed warm (claim, finish).
To compare two checkouts, run it from each with its own code first on the path:

    APPROVALS_BENCH_ROOT=/tmp/old .venv/bin/python bench/bench_round_trips.py

APPROVALS_BENCH_RUNS (default 30) runs; APPROVALS_BENCH_DATABASES picks the databases.
"""

from __future__ import annotations

import cProfile
import ctypes
import importlib
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(os.environ.get("APPROVALS_BENCH_ROOT", Path(__file__).resolve().parent.parent))
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path[:0] = [str(ROOT), str(ROOT / "web"), str(ROOT / "bench")]
os.environ.setdefault("APPROVALS_BENCH_RUNS", "30")

from sqlalchemy import event  # noqa: E402

from approvals.store import Database, Store  # noqa: E402

bench_resume: Any = importlib.import_module("bench_resume")
databases: Any = importlib.import_module("_databases")
try:  # where the worker lives in this checkout, or in an older one
    resumer_module: Any = importlib.import_module("approvals.worker.resumer")
except ImportError:
    resumer_module = importlib.import_module("approvals.resumer")
AgentRegistry, Resumer = resumer_module.AgentRegistry, resumer_module.Resumer

PROFILE = os.environ.get("APPROVALS_BENCH_PROFILE", "").split(",")
"""Operations to profile (cProfile), whose top functions by own time are printed at the end."""
_PROFILER = cProfile.Profile(time.process_time)
COUNT_CALLS = os.environ.get("APPROVALS_BENCH_COUNT_CALLS") == "1"
"""Count the Python and C functions each operation calls (slow, but the same on a busy machine as on an idle one)."""
OPERATIONS = ("claim", "mark_executing", "append_step", "pause", "finish", "decide")
_LIBC = ctypes.CDLL(None)
_TRACE_FLAGS = 1 | 2  # PQTRACE_SUPPRESS_TIMESTAMPS | PQTRACE_REGRESS_MODE


class Wire:
    """libpq's trace of every connection the database opens, in one file, read per operation."""

    def __init__(self, database: Database) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115  # read and written for the whole run
        self._read_to = 0
        for engine in {database.engine, database.read_engine}:
            event.listen(engine.sync_engine, "connect", self._trace)

    def _trace(self, dbapi_connection: Any, _record: Any) -> None:
        pgconn = dbapi_connection.driver_connection.pgconn
        pgconn.trace(os.dup(self._file.fileno()))
        pgconn.set_trace_flags(_TRACE_FLAGS)

    def since_last(self) -> dict[str, int]:
        """Messages the client sent since the last call, by kind."""
        _LIBC.fflush(None)  # libpq's stream is buffered
        self._file.seek(self._read_to)
        text = self._file.read().decode(errors="replace")
        self._read_to = self._file.tell()
        counts: dict[str, int] = defaultdict(int)
        for line in text.splitlines():
            fields = line.split("\t")
            if len(fields) >= 3 and fields[0] == "F":
                counts[fields[2].split(" ", 1)[0]] += 1
        return counts


class _Calls:
    """Function calls on this thread from now until `stop`: a measure of client work that load does not change."""

    def __init__(self) -> None:
        self.count = 0
        sys.setprofile(self._seen)

    def _seen(self, _frame: Any, event: str, _arg: Any) -> None:
        if event in ("call", "c_call"):
            self.count += 1

    def stop(self) -> int:
        sys.setprofile(None)
        return self.count


class Meter:
    """Wraps a store's hot-path operations: wire messages and CPU time of each call."""

    def __init__(self, store: Store, wire: Wire | None) -> None:
        self.wire = wire
        self.samples: dict[str, list[tuple[dict[str, int], float]]] = defaultdict(list)
        for name in OPERATIONS:
            aggregate = store.calls if name == "decide" else store.runs
            setattr(aggregate, name, self._wrap(name, getattr(aggregate, name)))

    def _wrap(self, name: str, operation: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def measured(*args: Any, **kwargs: Any) -> Any:
            if self.wire is not None:
                self.wire.since_last()
            if name in PROFILE:
                _PROFILER.enable()
            calls = _Calls() if COUNT_CALLS else None
            start = time.process_time()
            result = await operation(*args, **kwargs)
            cpu = time.process_time() - start
            _PROFILER.disable()
            sent = self.wire.since_last() if self.wire is not None else {}
            if calls is not None:
                sent = {**sent, "calls": calls.stop()}
            self.samples[name].append((sent, cpu))
            return result

        return measured

    def report(self, label: str) -> None:
        print(f"[{label}] per operation, median of each (round trips = Sync + Query; statements = Bind + Query)")
        for name in OPERATIONS:
            samples = self.samples.get(name)
            if not samples:
                continue

            def median(kind: str, samples: list[tuple[dict[str, int], float]] = samples) -> float:
                return statistics.median(sent.get(kind, 0) for sent, _ in samples)

            cpu = statistics.median(cpu for _, cpu in samples) * 1e6
            fastest = statistics.quantiles((cpu for _, cpu in samples), n=10)[0] * 1e6
            wire = ""
            if self.wire is not None:
                trips = statistics.median(sent.get("Sync", 0) + sent.get("Query", 0) for sent, _ in samples)
                statements = statistics.median(sent.get("Bind", 0) + sent.get("Query", 0) for sent, _ in samples)
                wire = f"round trips {trips:4.1f}  statements {statements:4.1f}  parsed {median('Parse'):4.1f}  "
            counted = f"  function calls {median('calls'):6.0f}" if COUNT_CALLS else ""
            print(f"  {name:15s} x{len(samples):3d}  {wire}client CPU {cpu:6.0f} µs (p10 {fastest:5.0f}){counted}")


async def measure(url: str, label: str) -> None:
    database = Database(url)
    store = Store(database)
    wire = Wire(database) if database.is_postgres else None
    warm_up = await bench_resume.paused_runs(store, 10)  # connections made, statements seen
    worker = Resumer(store, AgentRegistry([bench_resume.agent]), worker_id="worker")
    await bench_resume.resume_all(worker, store, warm_up)
    runs = await bench_resume.paused_runs(store, 200)
    meter = Meter(store, wire)
    await bench_resume.resume_all(worker, store, runs)  # cold: the claim reads the history, the run pauses again
    await bench_resume.approve_pending(store, runs)
    await bench_resume.resume_all(worker, store, runs)  # warm: the run finishes
    meter.report(label)
    if PROFILE != [""]:
        stats = pstats.Stats(_PROFILER)
        if dump := os.environ.get("APPROVALS_BENCH_PROFILE_TO"):
            stats.dump_stats(dump)
        stats.sort_stats(os.environ.get("APPROVALS_BENCH_SORT", "tottime")).print_stats(40)
    await database.dispose()


def main() -> None:
    print(f"code at {ROOT}")
    for kind in os.environ.get("APPROVALS_BENCH_DATABASES", "postgresql,sqlite").split(","):
        with databases.migrated_database(kind) as url:
            anyio.run(measure, url, kind)


if __name__ == "__main__":
    main()
