"""What the instrumentation left in place costs with tracing off: this checkout against an older one.

    python bench/bench_untraced_cost.py [CHECKOUT|-] [sqlite|postgresql] [pairs]

CHECKOUT is an older checkout (`git worktree add /tmp/before <rev>`); without one (or `-`) a
temporary worktree of `BEFORE`, the commit before metrics and tracing, is made and removed.

Each pair runs the same timing (`ROUNDS` runs of the scripted agent: start → pause, a decision
through `ApprovalService.decide`, the resume) once in a process importing the older checkout
and once in one importing this one, the order swapped every pair, each on a new database
migrated by this checkout (a superset of the older schema). Prints the median over pairs of
each process's p50. Processes with the very same code differ by up to ±5 % on this 2-core
machine, so use 20 pairs or more. Target (issue 29): a decision at most 5 % slower.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

HERE = Path(__file__).resolve().parent
BEFORE = "519047e"
"""The commit before metrics and tracing (issue 29): compared with when no checkout is named."""

ROUNDS = 160
WARMUP = 10
STEPS = ("agent step", "decision", "resume")

_TIMING = """
import json, statistics, sys, time
import anyio
from approvals import Agent, Tool
from approvals.calls.verdicts import Approve
from approvals.engines.native.models import TestModel
from approvals.service import ApprovalService
from approvals.store import Actor, Database, Store
from approvals.worker.resumer import AgentRegistry

def look(n: int) -> int:
    "Runs at once."
    return n

def act(n: int) -> int:
    "Waits for a person."
    return n

agent = Agent(TestModel([[("look", {"n": 1}), ("act", {"n": 1})]], final_text="ok"), name="bench",
              tools=[Tool(look), Tool(act, requires_approval=True)])
url, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

async def main():
    database = Database(url)
    store = Store(database)
    service = ApprovalService(store, AgentRegistry([agent]))
    times = {"agent step": [], "decision": [], "resume": []}
    for round_ in range(rounds + warmup):
        run_id = await store.runs.start_run("bench", "go", actor=Actor("svc", "reviewer"))
        started = time.perf_counter()
        await service.resumer.resume(run_id)
        paused = time.perf_counter()
        [call] = await store.calls.run_calls(run_id)
        deciding = time.perf_counter()
        await service.decide(call.id, Approve(), actor=Actor("alice", "reviewer"))
        decided = time.perf_counter()
        await service.resumer.resume(run_id)
        done = time.perf_counter()
        if round_ >= warmup:
            for name, ms in (("agent step", paused - started), ("decision", decided - deciding), ("resume", done - decided)):
                times[name].append(ms * 1000)
    await database.dispose()
    print(json.dumps({name: statistics.median(values) for name, values in times.items()}))

anyio.run(main)
"""


def timed(root: Path, url: str) -> dict[str, float]:
    """One process's p50s, importing the checkout at `root`."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMING, url, str(ROUNDS), str(WARMUP)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
    kinds = [sys.argv[2]] if len(sys.argv) > 2 else ["sqlite", "postgresql"]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    if named is not None:
        for kind in kinds:
            compare(Path(named).resolve(), kind, pairs)
        return
    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder) / "before"
        git = ["git", "-C", str(HERE.parent)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(before), BEFORE], check=True)
        try:
            for kind in kinds:
                compare(before, kind, pairs)
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(before)], check=True)


def compare(before: Path, kind: str, pairs: int) -> None:
    """Time `pairs` interleaved pairs of processes, one importing `before`, one this checkout."""
    roots = {"before": before, "now": HERE.parent}
    results: dict[tuple[str, str], list[float]] = {}
    for pair in range(pairs):
        for name in ("before", "now") if pair % 2 else ("now", "before"):
            with migrated_database(kind) as url:
                for step, ms in timed(roots[name], url).items():
                    results.setdefault((step, name), []).append(ms)
    print(f"\n{kind}: median of {pairs} interleaved pairs of processes' p50 (tracing off)")
    print(f"  {'':12} {'before ms':>10} {'now ms':>8} {'change':>8}")
    for step in STEPS:
        old, new = statistics.median(results[(step, "before")]), statistics.median(results[(step, "now")])
        print(f"  {step:12} {old:10.3f} {new:8.3f} {100 * (new - old) / old:+7.1f}%")


if __name__ == "__main__":
    main()
