"""The driver: starts runs, decides their calls as people would, and SIGKILLs worker processes.

Kill points come from one seeded RNG (`CHAOS_SEED`), two ways:

- from outside: every 0.2 to 2x `kill_interval` seconds the launcher SIGKILLs a live worker,
  nine times out of ten one with runs in flight; its phase file says afterwards where each
  of its runs was (the last hook point passed: claim, model request, tool effect, store write);
- from inside: a worker is spawned armed, with probability `self_kill_share`, to SIGKILL
  itself the n-th time (n from 1 to 3) it passes one of `agent.HOOK_POINTS`.

Timing decides the rest (which run a worker claims, where a kill from outside lands), so a
seed replays the same schedule of kills and verdicts, not the same interleaving.

Dead workers are replaced at once. Reviewers (never the actor who started the runs) approve
pending calls (two where two are needed), now and then deny or answer them instead; a call
left `outcome_unknown` is settled as a person would: answered when the execution log shows
it ran, or when its worker may still be alive; approved again when it never ran and its
worker is dead. Kills stop at the target; the driver then waits until every run completed,
or fails at the deadline saying which runs are stuck where.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteSendStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream
from sqlalchemy import select

from approvals.calls.verdicts import Answer, Approve, Deny, Verdict
from approvals.exceptions import Conflict
from approvals.store import Actor, Store
from approvals.store.models import RunRow, ToolCallRow

from .agent import AGENT_NAME, HOOK_POINTS, read_executions, read_phases

ROOT = Path(__file__).resolve().parents[2]
STARTER = Actor("chaos-starter", "reviewer")
REVIEWERS = [Actor(f"chaos-reviewer-{i}", "reviewer") for i in range(1, 9)]
OPEN_RUN_STATUSES = frozenset({"ready", "resuming", "awaiting_approval"})


def _env(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class ChaosConfig:
    """How hard to shake; every field but `seed` has an environment variable (`CHAOS_...`)."""

    seed: int
    kills: int = 30
    """Worker processes SIGKILLed per database (`CHAOS_TRIALS`)."""
    workers: int = 3
    concurrency: int = 2
    in_flight: int = 6
    """Runs kept unfinished while kills remain."""
    kill_interval: float = 0.8
    """Mean seconds between kills from outside."""
    self_kill_share: float = 0.35
    lease_seconds: float = 1.0
    latency: float = 0.02
    deadline: float = 210.0
    """Seconds until the driver gives up and reports what is stuck."""

    @classmethod
    def from_env(cls) -> ChaosConfig:
        """The configuration, from `CHAOS_SEED`, `CHAOS_TRIALS`, `CHAOS_WORKERS`, ... (defaults otherwise)."""
        kills = int(_env("CHAOS_TRIALS", 30))
        return cls(
            seed=int(os.environ.get("CHAOS_SEED") or secrets.randbelow(2**31)),
            kills=kills,
            workers=int(_env("CHAOS_WORKERS", 3)),
            concurrency=int(_env("CHAOS_CONCURRENCY", 2)),
            in_flight=int(_env("CHAOS_IN_FLIGHT", 6)),
            kill_interval=_env("CHAOS_KILL_INTERVAL", 0.8),
            self_kill_share=_env("CHAOS_SELF_KILL_SHARE", 0.35),
            lease_seconds=_env("CHAOS_LEASE", 1.0),
            latency=_env("CHAOS_LATENCY", 0.02),
            deadline=_env("CHAOS_DEADLINE", 90 + 4 * kills),
        )

    def replay(self, backend: str) -> str:
        """The command that replays this schedule (with the other `CHAOS_` settings of this session)."""
        settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith("CHAOS_")}
        settings.update(CHAOS_SEED=str(self.seed), CHAOS_TRIALS=str(self.kills))
        assignments = " ".join(f"{k}={v}" for k, v in settings.items())
        return (
            f"seed {self.seed}; replay: {assignments} "
            f".venv/bin/pytest -p no:cacheprovider tests/chaos/test_chaos.py -k {backend}"
        )


class ChaosFailure(AssertionError):
    """The driver could not bring every run to its end: the message says what is stuck where."""


@dataclass
class WorkerProcess:
    """A worker the launcher forked, and what became of it."""

    name: str
    die_at: str | None
    die_after: int
    workdir: Path
    pid: int | None = None
    killed: bool = False
    """The driver had the launcher SIGKILL it."""
    exit_code: int | None = None

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    @property
    def phase_file(self) -> Path:
        return self.workdir / f"phase-{self.name}"

    @property
    def log_file(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log_tail(self, lines: int = 12) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no output)"


@dataclass
class Tally:
    """What the driver did and saw."""

    spawned: int = 0
    external_kills: int = 0
    self_kills: int = 0
    external_kill_phases: Counter[str] = field(default_factory=Counter)
    """Where the runs in flight of workers killed from outside were ("idle": none in flight)."""
    self_kill_points: Counter[str] = field(default_factory=Counter)
    unexpected_exits: list[str] = field(default_factory=list)
    verdicts: Counter[str] = field(default_factory=Counter)
    settled_unknown: Counter[str] = field(default_factory=Counter)
    runs_started: int = 0
    worker_log: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def kills(self) -> int:
        return self.external_kills + self.self_kills


class Chaos:
    """One chaos session against one database (see the module docstring)."""

    def __init__(self, store: Store, url: str, workdir: Path, config: ChaosConfig) -> None:
        self.store = store
        self.url = url
        self.workdir = workdir
        self.config = config
        self.rng = random.Random(config.seed)
        self.log_path = workdir / "executions.log"
        self.tally = Tally()
        self.workers: dict[str, WorkerProcess] = {}
        self.run_ids: list[str] = []
        self.unfinished: set[str] = set()
        self.ended_badly: dict[str, str] = {}
        self.verdict_of: dict[str, str] = {}
        self.journal: list[str] = []
        self.started = time.monotonic()
        self.next_kill = self.started + 1.0
        self.stopping = False
        self.launcher_gone = False
        self._commands: ByteSendStream | None = None
        self._ready = anyio.Event()

    # -- the session ------------------------------------------------------------------------

    async def run(self) -> Tally:
        """Run the session to its end; `ChaosFailure` when runs are still unfinished at the deadline."""
        self.note(f"seed {self.config.seed}, {self.config}")
        failure: BaseException | None = None
        with (self.workdir / "launcher.log").open("wb") as launcher_log:
            process = await anyio.open_process(
                [sys.executable, "-m", "tests.chaos.worker", "launcher", self.url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=launcher_log,
                cwd=ROOT,
            )
            async with process, anyio.create_task_group() as group:
                assert process.stdin is not None
                self._commands = process.stdin
                group.start_soon(self._listen, process)
                try:
                    with anyio.fail_after(60):
                        await self._ready.wait()
                    await self._loop()
                    await self._stop_workers()
                except (ChaosFailure, TimeoutError) as exc:  # raised here, not wrapped in the task group's group
                    failure = exc
                finally:
                    with anyio.CancelScope(shield=True):
                        await process.stdin.aclose()  # the launcher kills what is left and exits
                        with anyio.move_on_after(20):
                            await process.wait()
                    group.cancel_scope.cancel()
        if isinstance(failure, TimeoutError):
            raise ChaosFailure(f"the launcher did not start: {(self.workdir / 'launcher.log').read_text()[-3000:]}")
        if failure is not None:
            raise failure
        for worker in self.workers.values():
            text = worker.log_tail(lines=100_000)
            self.tally.worker_log["lost a lease"] += text.count("lost the lease")
            self.tally.worker_log["could not record progress"] += text.count("could not record its progress")
            self.tally.worker_log["LeaseLost logged as an error"] += text.count("exceptions.LeaseLost:")
            self.tally.worker_log["tracebacks"] += text.count("Traceback")
        self.tally.seconds = time.monotonic() - self.started
        return self.tally

    async def _loop(self) -> None:
        while True:
            if time.monotonic() - self.started > self.config.deadline:
                raise ChaosFailure(await self.diagnosis(f"not every run ended within {self.config.deadline:.0f} s"))
            if self.launcher_gone:
                raise ChaosFailure(await self.diagnosis("the launcher died"))
            if len(self.tally.unexpected_exits) > max(20, 2 * self.config.kills):
                raise ChaosFailure(await self.diagnosis("workers keep dying on their own"))
            await self._keep_workers()
            await self._top_up_runs()
            await self._decide()
            if self.tally.kills < self.config.kills and time.monotonic() >= self.next_kill:
                await self._kill_one()
            await self._refresh()
            if self.tally.kills >= self.config.kills and not self.unfinished:
                return
            await anyio.sleep(0.05)

    async def _stop_workers(self) -> None:
        self.stopping = True
        for worker in self.workers.values():
            if worker.alive:
                await self._command(f"term {worker.name}")
        with anyio.move_on_after(30):
            while any(worker.alive for worker in self.workers.values()):
                await anyio.sleep(0.05)

    # -- workers ----------------------------------------------------------------------------

    async def _keep_workers(self) -> None:
        live = sum(1 for worker in self.workers.values() if worker.alive and not worker.killed)
        for _ in range(self.config.workers - live):
            await self._spawn()

    async def _spawn(self) -> None:
        name = f"w{self.tally.spawned + 1}"
        self.tally.spawned += 1
        die_at, die_after = None, 0
        if self.tally.kills < self.config.kills and self.rng.random() < self.config.self_kill_share:
            die_at, die_after = self.rng.choice(HOOK_POINTS), self.rng.randrange(3)
        worker = WorkerProcess(name, die_at, die_after, self.workdir)
        self.workers[name] = worker
        options: dict[str, Any] = {
            "concurrency": self.config.concurrency,
            "lease_seconds": self.config.lease_seconds,
            "poll_interval": 0.2,
            "latency": self.config.latency,
            "seed": self.rng.randrange(2**31),
            "die_at": die_at,
            "die_after": die_after,
            "phase_file": str(worker.phase_file),
            "log_file": str(worker.log_file),
        }
        await self._command(f"spawn {name} {json.dumps(options)}")
        self.note(f"spawn {name}" + (f" armed to die at {die_at} #{die_after + 1}" if die_at else ""))

    async def _kill_one(self) -> None:
        interval = self.config.kill_interval
        self.next_kill = time.monotonic() + self.rng.uniform(min(0.2, interval), 2 * interval)
        live = sorted(
            (w for w in self.workers.values() if w.alive and not w.killed and w.pid is not None), key=lambda w: w.name
        )
        if not live:
            return
        busy = [w for w in live if read_phases(w.phase_file)]
        victim = self.rng.choice(busy if busy and self.rng.random() < 0.9 else live)
        victim.killed = True
        self.tally.external_kills += 1
        await self._command(f"kill {victim.name}")
        self.note(f"kill {victim.name} (pid {victim.pid})")

    async def _command(self, line: str) -> None:
        assert self._commands is not None
        await self._commands.send(line.encode() + b"\n")

    async def _listen(self, process: Process) -> None:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        try:
            while True:
                words = (await lines.receive_until(b"\n", 4096)).decode().split()
                if words[0] == "ready":
                    self._ready.set()
                elif words[0] == "spawned":
                    self.workers[words[1]].pid = int(words[2])
                elif words[0] == "exited":
                    self._exited(self.workers[words[1]], int(words[3]))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.launcher_gone = True

    def _exited(self, worker: WorkerProcess, code: int) -> None:
        worker.exit_code = code
        phases = read_phases(worker.phase_file)
        if worker.killed and code == -9:
            self.tally.external_kill_phases.update(phases or ["idle"])
            self.note(f"{worker.name} died of the kill, runs at: {', '.join(phases) or 'none'}")
        elif code == -9 and worker.die_at is not None:
            self.tally.self_kills += 1
            self.tally.self_kill_points[worker.die_at] += 1
            self.note(f"{worker.name} killed itself at {worker.die_at}, runs at: {', '.join(phases) or 'none'}")
        elif self.stopping and code == 0:
            self.note(f"{worker.name} stopped")
        else:
            elapsed = time.monotonic() - self.started
            report = f"{worker.name} exited with {code} at {elapsed:.1f} s:\n{worker.log_tail()}"
            self.tally.unexpected_exits.append(report)
            self.note(f"{worker.name} exited on its own with {code}")

    # -- people -----------------------------------------------------------------------------

    async def _top_up_runs(self) -> None:
        if self.tally.kills >= self.config.kills:
            return
        while len(self.unfinished) < self.config.in_flight:
            number = len(self.run_ids) + 1
            run_id = await self.store.runs.start_run(
                AGENT_NAME, f"errand {number}", actor=STARTER, deps={"log": str(self.log_path)}
            )
            self.run_ids.append(run_id)
            self.unfinished.add(run_id)
            self.tally.runs_started += 1

    async def _decide(self) -> None:
        for call in (await self.store.calls.list_calls(status="pending", limit=500)).items:
            verdict = self.verdict_of.get(call.id)
            if verdict is None:
                verdict = self.verdict_of[call.id] = self._pick_verdict()
                self.tally.verdicts[verdict] += 1
            if verdict == "approve":
                await self._approve(call)
            elif verdict == "deny":
                await self._settle(call, Deny(reason="Not this one."))
            else:
                await self._settle(call, Answer(content=f"{call.tool_name}: done by hand"))
        unknown = (await self.store.calls.list_calls(status="outcome_unknown", limit=500)).items
        if unknown:
            executions = read_executions(self.log_path)
            for call in unknown:
                ran = [e for e in executions if (e.run_id, e.tool_call_id) == (call.run_id, call.tool_call_id)]
                await self._settle_unknown(call, bool(ran))

    def _pick_verdict(self) -> str:
        roll = self.rng.random()
        return "approve" if roll < 0.88 else "deny" if roll < 0.95 else "answer"

    async def _approve(self, call: ToolCallRow) -> bool:
        """Approve as reviewers new to this call until it is approved; False when refused."""
        while True:
            row = await self._decide_as(await self._fresh_reviewer(call), call, Approve())
            if row is None or row.status not in ("pending", "outcome_unknown"):
                return row is not None

    async def _settle(self, call: ToolCallRow, verdict: Deny | Answer) -> bool:
        """Deny or answer as a reviewer new to this call; False when refused."""
        return await self._decide_as(await self._fresh_reviewer(call), call, verdict) is not None

    async def _decide_as(self, reviewer: Actor, call: ToolCallRow, verdict: Verdict) -> ToolCallRow | None:
        try:
            return await self.store.calls.decide(call.id, verdict, actor=reviewer)
        except Conflict as exc:
            self.note(f"{type(verdict).__name__} of {call.tool_call_id} of {call.run_id[:8]} refused: {exc}")
            return None

    async def _fresh_reviewer(self, call: ToolCallRow) -> Actor:
        used = {decision.actor for decision in await self.store.calls.decisions_for(call.id)}
        for reviewer in REVIEWERS:
            if reviewer.id not in used:
                return reviewer
        raise ChaosFailure(await self.diagnosis(f"ran out of reviewers for call {call.id}"))

    async def _settle_unknown(self, call: ToolCallRow, ran: bool) -> None:
        """Settle a call whose worker died mid-execution, as a person checking the outside world would.

        The reviewer who approved it tries first, as they would; the store refuses any verdict
        of theirs on a call they approved (one decision per reviewer and arguments), which is
        counted, and a reviewer new to the call settles it instead.
        """
        events = await self.store.audit.audit_events(action="call.executing", run_id=call.run_id, limit=100)
        holder = next((e.actor for e in events.items if e.subject_id == call.id), "")
        worker = self.workers.get(holder.removeprefix("chaos-"))
        verdict: Verdict
        if not ran and worker is not None and not worker.alive:
            how, verdict = "approved again (never ran, its worker is dead)", Approve()
        else:
            how = "answered (it ran)" if ran else "answered (its worker may still run it)"
            verdict = Answer(content=f"{call.tool_name}: {'it happened' if ran else 'nobody can tell'}")
        approvers = [d.actor for d in await self.store.calls.decisions_for(call.id) if d.verdict in ("approve", "edit")]
        settled = False
        if approvers:
            row = await self._decide_as(Actor(approvers[-1], "reviewer"), call, verdict)
            if row is None:
                self.tally.settled_unknown["refused to the reviewer who approved the call"] += 1
            settled = row is not None and row.status not in ("pending", "outcome_unknown")
        if not settled:
            settled = await self._approve(call) if isinstance(verdict, Approve) else await self._settle(call, verdict)
        if settled:
            self.tally.settled_unknown[how] += 1
            self.note(f"outcome_unknown {call.tool_call_id} ({call.tool_name}) of {call.run_id[:8]}: {how}")

    async def _refresh(self) -> None:
        if not self.unfinished:
            return
        async with self.store.db.read() as session:
            rows = (
                await session.execute(
                    select(RunRow.id, RunRow.status, RunRow.error).where(RunRow.id.in_(list(self.unfinished)))
                )
            ).all()
        for run_id, status, error in rows:
            if status not in OPEN_RUN_STATUSES:
                self.unfinished.discard(run_id)
                if status != "completed":
                    self.ended_badly[run_id] = f"{status}: {error}"
                    self.note(f"run {run_id[:8]} ended {status}: {error}")

    # -- reporting --------------------------------------------------------------------------

    def note(self, line: str) -> None:
        self.journal.append(f"{time.monotonic() - self.started:7.2f} {line}")

    async def diagnosis(self, headline: str) -> str:
        """What is stuck where: unfinished runs with their calls, the workers, and the latest events."""
        lines = [headline, f"kills {self.tally.kills}/{self.config.kills}, {len(self.unfinished)} runs unfinished:"]
        async with self.store.db.read() as session:
            runs = (await session.scalars(select(RunRow).where(RunRow.id.in_(list(self.unfinished))))).all()
            calls = (await session.scalars(select(ToolCallRow).where(ToolCallRow.run_id.in_(self.unfinished)))).all()
        for run in runs:
            mine = ", ".join(f"{c.tool_call_id} {c.tool_name} {c.status}" for c in calls if c.run_id == run.id)
            lines.append(
                f"  run {run.id} {run.status} (lease {run.lease_owner} until {run.lease_expires_at}, "
                f"updated {run.updated_at}, {run.message_count} messages): {mine or 'no calls'}"
            )
        lines.extend(f"  run {run_id} ended {how}" for run_id, how in self.ended_badly.items())
        for worker in self.workers.values():
            if worker.alive:
                lines.append(f"  worker {worker.name} pid {worker.pid} alive, runs at {read_phases(worker.phase_file)}")
        lines.append(f"unexpected worker exits: {len(self.tally.unexpected_exits)}")
        lines.extend(self.tally.unexpected_exits[-3:])
        lines.append("latest events:")
        lines.extend(self.journal[-60:])
        return "\n".join(lines)


def summary(backend: str, config: ChaosConfig, tally: Tally, stats: Counter[str]) -> str:
    """The numbers of one session, for the terminal summary."""
    where = ", ".join(f"{k} {v}" for k, v in tally.external_kill_phases.most_common())
    points = ", ".join(f"{k} {v}" for k, v in tally.self_kill_points.most_common())
    facts = ", ".join(f"{k} {v}" for k, v in sorted(stats.items()))
    settled = ", ".join(f"{k} {v}" for k, v in tally.settled_unknown.items()) or "none"
    return (
        f"{backend}: seed {config.seed}, {tally.seconds:.1f} s, {tally.kills} kills "
        f"({tally.external_kills} from outside, {tally.self_kills} self-inflicted), "
        f"{tally.spawned} workers spawned, {tally.runs_started} runs, "
        f"{len(tally.unexpected_exits)} unexpected worker exits\n"
        f"    runs in flight at kills from outside: {where or 'none'}\n"
        f"    self-kill points: {points or 'none'}\n"
        f"    outcome_unknown settled: {settled}; verdicts {dict(tally.verdicts)}\n"
        f"    worker logs: {dict(tally.worker_log)}\n"
        f"    {facts}"
    )
