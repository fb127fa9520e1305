"""Chaos worker processes: `run_worker` over a store whose operations pass the agent's hooks.

`python -m tests.chaos.worker serve URL [OPTIONS_JSON]` is one worker, like `approvals
worker`. `python -m tests.chaos.worker launcher URL` imports everything once and then
forks workers on request, which saves the second or so each fresh interpreter spends on
imports: the driver restarts a worker after every kill. It reads commands on stdin, one a
line, and answers on stdout:

    spawn NAME OPTIONS_JSON  ->  spawned NAME PID
    kill NAME                ->  (SIGKILL; the exit is reported like any other)
    term NAME                ->  (SIGTERM: the worker finishes its runs in progress, then exits)
                             <-  exited NAME PID CODE   (CODE: exit status, or -signal)

Only the launcher signals its children, and only ones it has not reaped, so a signal can
never reach a process that reused a dead worker's pid. When stdin closes, it kills its
children and exits; a child whose launcher died exits too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import sys
import traceback
from collections.abc import Awaitable
from typing import Any

import anyio
from sqlalchemy import event

from approvals.store import ClaimedRun, Database, Runs, Store
from approvals.worker.resumer import AgentRegistry, run_worker

from .agent import PROCESS, chaos_agent

DEFAULTS: dict[str, Any] = {
    "concurrency": 2,
    "lease_seconds": 1.0,
    "poll_interval": 0.2,
    "latency": 0.02,
    "die_at": None,
    "die_after": 0,
    "seed": 0,
    "phase_file": None,
}


CLAIMING = "(claiming)"
"""Where a claim in progress is recorded among the runs in flight."""


class ChaosRuns(Runs):
    """Run writes that pass the process's hooks before and after they happen."""

    async def claim(self, *args: Any, **kwargs: Any) -> ClaimedRun | None:
        PROCESS.at(CLAIMING, "claim:in")  # a kill now lands inside a claim, whether or not it finds a run
        try:
            claimed = await super().claim(*args, **kwargs)
        finally:
            PROCESS.at(CLAIMING, "claim:in", done=True)
        if claimed is not None:
            PROCESS.at(claimed.run_id, "claim:after")
        return claimed

    async def mark_executing(self, run_id: str, *args: Any, **kwargs: Any) -> None:
        await _hooked(run_id, "mark_executing", super().mark_executing(run_id, *args, **kwargs))

    async def append_step(self, run_id: str, *args: Any, **kwargs: Any) -> None:
        await _hooked(run_id, "append_step", super().append_step(run_id, *args, **kwargs))

    async def pause(self, run_id: str, *args: Any, **kwargs: Any) -> None:
        await _hooked(run_id, "pause", super().pause(run_id, *args, **kwargs), done=True)

    async def finish(self, run_id: str, *args: Any, **kwargs: Any) -> None:
        await _hooked(run_id, "finish", super().finish(run_id, *args, **kwargs), done=True)


class ChaosStore(Store):
    """A store whose run writes pass the process's hooks before and after they happen (`ChaosRuns`)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.runs = ChaosRuns(db, self.notifier, policy=self.policy)


async def _hooked(run_id: str, name: str, write: Awaitable[None], *, done: bool = False) -> None:
    """Pass `name:before`, make the write, pass `name:after`; a run whose write raised has left (for the phases)."""
    PROCESS.at(run_id, f"{name}:before")
    try:
        await write
    except BaseException:
        PROCESS.at(run_id, f"{name}:raised", done=True)
        raise
    PROCESS.at(run_id, f"{name}:after", done=done)


def _committing(_connection: Any) -> None:
    """An ORM transaction is about to commit: a kill point while runs are in flight (not for idle polls)."""
    if any(run != CLAIMING for run in PROCESS.where):
        PROCESS.cross("commit")


async def serve(url: str, name: str, options: dict[str, Any]) -> None:
    """Run one worker until SIGTERM, or until the launcher that forked it is gone."""
    settings = {**DEFAULTS, **options}
    PROCESS.configure(
        phase_file=settings["phase_file"],
        die_at=settings["die_at"],
        die_after=settings["die_after"],
        latency=settings["latency"],
        seed=settings["seed"],
    )
    database = Database(url)
    event.listen(database.engine.sync_engine, "commit", _committing)
    registry = AgentRegistry()
    registry.register(chaos_agent)
    stop = anyio.Event()
    parent = os.getppid()

    async def orphaned() -> None:
        while os.getppid() == parent:
            await anyio.sleep(0.5)
        os._exit(3)

    try:
        async with anyio.create_task_group() as group:
            if settings.get("exit_when_orphaned"):
                group.start_soon(orphaned)
            await run_worker(
                ChaosStore(database),
                registry,
                worker_id=f"chaos-{name}",
                concurrency=settings["concurrency"],
                lease_seconds=settings["lease_seconds"],
                poll_interval=settings["poll_interval"],
                expire_interval=3600,
                stop=stop,
                handle_signals=True,
            )
            group.cancel_scope.cancel()
    finally:
        await database.dispose()


def _child(url: str, name: str, options: dict[str, Any]) -> None:
    """In a forked child: the worker, its output to its log file; never returns."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(options["log_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {name} %(name)s %(levelname)s %(message)s")
        anyio.run(serve, url, name, {**options, "exit_when_orphaned": True})
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _warm_up(url: str) -> None:
    """Import what a worker imports lazily, before any fork, without opening a connection."""
    import aiosqlite  # noqa: F401
    import psycopg  # noqa: F401

    database = Database(url)
    del database


def launcher(url: str) -> None:
    """Fork workers on request and report their exits (see the module docstring)."""
    _warm_up(url)
    children: dict[int, str] = {}
    pids: dict[str, int] = {}
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    pending = b""

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def reap() -> None:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            name = children.pop(pid)
            pids.pop(name, None)
            say(f"exited {name} {pid} {os.waitstatus_to_exitcode(status)}")

    def command(line: str) -> None:
        verb, _, rest = line.partition(" ")
        if verb == "spawn":
            name, _, options = rest.partition(" ")
            pid = os.fork()
            if pid == 0:
                selector.close()
                _child(url, name, json.loads(options))
            children[pid] = name
            pids[name] = pid
            say(f"spawned {name} {pid}")
        elif verb in ("kill", "term") and rest in pids:
            os.kill(pids[rest], signal.SIGKILL if verb == "kill" else signal.SIGTERM)

    say("ready")
    try:
        while True:
            reap()
            if not selector.select(timeout=0.01):
                continue
            data = os.read(sys.stdin.fileno(), 65536)
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                command(line.decode())
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        while children:
            pid, _ = os.waitpid(-1, 0)
            children.pop(pid, None)


if __name__ == "__main__":
    mode, database_url = sys.argv[1:3]
    if mode == "launcher":
        launcher(database_url)
    else:
        logging.basicConfig(level=logging.WARNING)
        worker_options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        anyio.run(serve, database_url, worker_options.pop("name", "solo"), worker_options)
