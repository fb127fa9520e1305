"""Audit proof: what signed checkpoints cost on the decision path, and how fast the log is verified.

- decisions/s with the checkpointer running (a checkpoint every 1,000 events, looking every 0.5 s)
  against none, 4 deciders in one process, in alternating blocks on one database so drift hits both
  alike (target: <= 2 %); and the checkpointer's own time (what it adds, free of the machine's noise);
- `verify` online (the database against the checkpoint files) and offline (a bundle file), events/s,
  beside the plain hash-chain check.

Usage: `python bench/bench_audit_proof.py [sqlite|postgresql|both] [--decisions N] [--events N]`.
Needs the local PostgreSQL for `postgresql` (APPROVALS_BENCH_PG_URL); creates and drops its own databases.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import migrated_database
from bench_store import prepare_paused_runs

from approvals.audit.bundle import verify_bundle, write_bundle
from approvals.audit.checkpoint_files import DirectorySink, read_checkpoint_directory
from approvals.audit.checkpoints import CheckpointConfig, Checkpointer, SignedCheckpoint, run_checkpoints
from approvals.audit.checkpoints_verify import verify_database
from approvals.audit.signing import SigningKey
from approvals.calls.verdicts import Approve
from approvals.store import Actor, Database, Store

DECIDERS = 4


class TimedCheckpointer(Checkpointer):
    """A checkpointer that adds up the time its looks take (the work it puts beside the decisions)."""

    busy = 0.0

    async def make(self, *, force: bool = False) -> list[SignedCheckpoint]:
        start = time.perf_counter()
        try:
            return await super().make(force=force)
        finally:
            self.busy += time.perf_counter() - start


async def decide_block(store: Store, ids: list[str], checkpointer: TimedCheckpointer | None) -> float:
    """Seconds to decide `ids` with `DECIDERS` concurrent tasks, the checkpointer running alongside when given."""
    reviewer = Actor("reviewer", "reviewer")
    stop = anyio.Event()

    async def decider(chunk: list[str]) -> None:
        for call_id in chunk:
            await store.calls.decide(call_id, Approve(), actor=reviewer)

    async with anyio.create_task_group() as outer:
        if checkpointer is not None:
            await outer.start(run_checkpoints, checkpointer, stop)
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for i in range(DECIDERS):
                group.start_soon(decider, ids[i::DECIDERS])
        seconds = time.perf_counter() - start
        stop.set()
    return seconds


async def alternate(url: str, ids: list[str], key: SigningKey, folder: Path, block: int) -> dict[str, list[float]]:
    """Blocks of `block` decisions, with and without the checkpointer in turn, on one database: the machine's
    drift and the database's growth hit both alike. Also the checkpointer's own time and the events decided."""
    database = Database(url)
    store = Store(database)
    config = CheckpointConfig(every_events=1_000, interval=3600, poll=0.5, directory=folder)
    checkpointer = TimedCheckpointer(database, key, config, [DirectorySink(folder)])
    await checkpointer.make(force=True)  # the preparation's events: steady state from here on
    checkpointer.busy, checkpointer.health.made = 0.0, 0
    times: dict[str, list[float]] = {"none": [], "checkpoints": [], "busy": [], "events": []}
    events_before = await store.audit.last_audit_event_id()
    for number, offset in enumerate(range(0, len(ids), block)):
        chunk = ids[offset : offset + block]
        variant = "checkpoints" if (number // 2 + number) % 2 else "none"  # none, cp, cp, none, none, cp, ...
        times[variant].append(await decide_block(store, chunk, checkpointer if variant == "checkpoints" else None))
    times["busy"].append(checkpointer.busy)
    times["events"].append(await store.audit.last_audit_event_id() - events_before)
    times["made"] = [float(checkpointer.health.made)]
    await database.dispose()
    return times


async def isolated_costs(url: str, key: SigningKey, folder: Path, rounds: int = 5) -> tuple[float, float, float]:
    """Alone: seconds one checkpoint of 1,000 events takes (read, Merkle root, signature, insert), one idle look,
    and writing its file (fsync'd, in a worker thread: I/O the deciders do not wait for)."""
    database = Database(url)
    store = Store(database)
    checkpointer = Checkpointer(database, key, CheckpointConfig())  # no sink: the file is timed on its own
    sink = DirectorySink(folder)
    await checkpointer.make(force=True)
    checkpoint, look, file = [], [], []
    for _ in range(rounds):
        await fill(store, 1_000)
        start = time.perf_counter()
        (made,) = await checkpointer.make()
        checkpoint.append(time.perf_counter() - start)
        start = time.perf_counter()
        await sink.put(made)
        file.append(time.perf_counter() - start)
        start = time.perf_counter()
        await checkpointer.make()
        look.append(time.perf_counter() - start)
    await database.dispose()
    return statistics.median(checkpoint), statistics.median(look), statistics.median(file)


def bench_decisions(kind: str, count: int, block: int = 250) -> None:
    key = SigningKey.generate()
    with migrated_database(kind) as url, tempfile.TemporaryDirectory() as folder:
        ids = anyio.run(prepare_paused_runs, url, count)
        times = anyio.run(alternate, url, ids, key, Path(folder), block)
        one_checkpoint, one_look, one_file = anyio.run(isolated_costs, url, key, Path(folder))
    none = block * len(times["none"]) / sum(times["none"])
    with_cp = block * len(times["checkpoints"]) / sum(times["checkpoints"])
    cost = (none - with_cp) / none * 100
    events = times["events"][0]
    per_1000 = sum(times["none"]) / (events / 2) * 1000  # seconds deciding 1,000 events' worth, without checkpoints
    looks = per_1000 / 5.0  # the task looks every 5 s by default
    derived = (one_checkpoint + looks * one_look) / per_1000 * 100
    print(
        f"[{kind}] decisions/s, {DECIDERS} deciders, {count} decisions in alternating blocks of {block}: "
        f"no checkpoints {none:.0f}, checkpoint every 1,000 events {with_cp:.0f} "
        f"({times['made'][0]:.0f} checkpoints made): measured difference {cost:+.1f} %. Alone, a checkpoint of 1,000 "
        f"events takes {one_checkpoint * 1000:.1f} ms (+ {one_file * 1000:.1f} ms writing its file in a thread) and an "
        f"idle look {one_look * 1000:.1f} ms; deciding 1,000 events' worth takes {per_1000 * 1000:.0f} ms: "
        f"checkpointing adds {derived:.2f} % of the work"
    )


async def fill(store: Store, events: int) -> None:
    batch = 500
    for start in range(0, events, batch):
        async with store.audit.transaction() as tx:
            for i in range(start, min(events, start + batch)):
                tx.audit(f"user{i % 7}", "call.approved", "call", f"call-{i}", tool_name="refund",
                         details={"amount": f"{i}.00", "order_id": f"A-{i}", "reason": "bench " * 5})  # fmt: skip


async def bench_verify(kind: str, events: int) -> None:
    key = SigningKey.generate()
    with migrated_database(kind) as url, tempfile.TemporaryDirectory() as folder:
        database = Database(url)
        store = Store(database)
        await fill(store, events)
        config = CheckpointConfig(every_events=1_000, max_events=1_000, directory=Path(folder))
        await Checkpointer(database, key, config, [DirectorySink(Path(folder))]).make(force=True)
        checkpoints = read_checkpoint_directory(Path(folder))

        start = time.perf_counter()
        chain = await store.audit.verify_audit()
        chain_seconds = time.perf_counter() - start
        start = time.perf_counter()
        online = await verify_database(database, key.public, checkpoints)
        online_seconds = time.perf_counter() - start
        bundle = Path(folder) / "bundle.jsonl"
        start = time.perf_counter()
        await write_bundle(database, bundle)
        export_seconds = time.perf_counter() - start
        await database.dispose()
        start = time.perf_counter()
        offline = verify_bundle(bundle, key.public)
        offline_seconds = time.perf_counter() - start
        if not (chain.ok and online.ok and offline.ok):
            raise SystemExit(f"verification failed: {chain}, {online.problem}, {offline.problem}")
        size = bundle.stat().st_size / 1e6
        print(
            f"[{kind}] {events} events, {len(checkpoints)} checkpoints: hash chain only {events / chain_seconds:,.0f}"
            f" events/s; online against checkpoints {events / online_seconds:,.0f} events/s; bundle export "
            f"{events / export_seconds:,.0f} events/s ({size:.1f} MB); offline bundle check "
            f"{events / offline_seconds:,.0f} events/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="?", default="both", choices=["sqlite", "postgresql", "both"])
    parser.add_argument("--decisions", type=int, default=4000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--skip-decisions", action="store_true")
    parser.add_argument("--skip-verify", action="store_true")
    args = parser.parse_args()
    kinds = ["sqlite", "postgresql"] if args.kind == "both" else [args.kind]
    for kind in kinds:
        if not args.skip_decisions:
            bench_decisions(kind, args.decisions)
        if not args.skip_verify:
            anyio.run(bench_verify, kind, args.events)


if __name__ == "__main__":
    main()
