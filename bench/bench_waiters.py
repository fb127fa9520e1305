"""Many callers waiting at once on one `approvals serve` (issue 41): memory per waiter, decision -> answer, none lost.

Starts `approvals serve --no-worker` (a subprocess, PostgreSQL and SQLite) and holds N waiting
requests open on it at once from this process (raw sockets, one connection each): half are
Claude Code hooks (`POST /api/hooks/claude-code?wait=`), a quarter gate long polls
(`GET /api/gate/calls/{id}?wait=`), a quarter gate asks again under their key
(`POST /api/gate/calls?wait=`); one call in a hundred has a second long poll, to see that only
one of two waiters is handed the approval. Then:

- memory: the server's RSS (VmRSS) after its calls exist and before the waiters came, and with
  all of them waiting: KiB per waiter;
- decision -> answer: another process (`--helper decide`, the code under test) decides the
  calls straight in the database, the first few hundred one at a time at a steady rate (p50/p95
  from the start of each decision to its waiter's answer, measured on the shared monotonic
  clock), the rest as fast as it can (the time until the last answer);
- exactly once: every request got one HTTP response, each call was handed out once
  (`call.executing` once in the audit log), a call's two waiters got one `handed_out` between them.

`--code PATH` serves another checkout (the code before a change: `git worktree add`); the
database is migrated by the served code. APPROVALS_BENCH_PG_URL names the PostgreSQL server.
Numbers are noisy on a shared machine. Usage: `python bench/bench_waiters.py [--sizes 500,10000]
[--kinds postgresql,sqlite] [--code PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
PG_SERVER = os.environ.get("APPROVALS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
WAIT_SECONDS = 300
PACED = 400
"""Decisions made one at a time at `PACED_RATE` a second, each timed; the rest are made in bulk."""
PACED_RATE = 40.0
DECIDERS = 4


def raise_file_limit() -> None:
    """As many open files as the hard limit allows, for this process and the server it starts."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def code_env(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{code}:{code / 'web'}", "APPROVALS_BENCH_CODE": str(code)}


@contextmanager
def database(kind: str) -> Iterator[str]:
    """An empty database (the server migrates it with its own code), gone afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/approvals.db"
        return
    name = f"approvals_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def server(code: Path, database_url: str) -> Iterator[tuple[int, int]]:
    """`approvals serve --no-worker` of `code` on a free port: its port and process id."""
    port = free_port()
    env = {**code_env(code), "APPROVALS_SECRET_KEY": "bench-waiters", "APPROVALS_GATE_MAX_WAIT": str(WAIT_SECONDS)}
    command = [sys.executable, "-m", "approvals", "serve", "--database-url", database_url, "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--no-worker"], env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("approvals serve did not start")
            time.sleep(0.2)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def helper(code: Path, *args: str) -> str:
    """Run this file's helper under the served code (its store, its models)."""
    done = subprocess.run(
        [sys.executable, __file__, "--helper", *args], env=code_env(code), capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"helper {args[0]} failed:\n{done.stderr}")
    return done.stdout.strip()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def sql_rows(database_url: str, query: str) -> list[tuple[Any, ...]]:
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as conn:
            return list(conn.execute(query))
    with psycopg.connect(database_url) as conn:
        return list(conn.execute(query))


def pg_connections(database_url: str) -> int:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
        return int(row[0]) if row else 0


def hook_body(i: int) -> dict[str, Any]:
    return {
        "session_id": f"h{i}",
        "cwd": "/home/dev/project",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"touch /tmp/h{i}"},
        "tool_use_id": f"h{i}",
    }


def gate_body(i: int) -> dict[str, Any]:
    return {
        "source": "bench",
        "session_id": f"g{i}",
        "tool_name": "deploy",
        "args": {"n": i},
        "idempotency_key": f"g{i}",
    }


async def create_calls(port: int, token: str, n: int) -> float:
    """N pending calls, half by hook and half by the gate, asked with wait=0; returns the seconds it took."""
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=16)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=120
    ) as client:
        queue = iter(range(n))

        async def worker() -> None:
            for i in queue:
                if i % 2 == 0:
                    response = await client.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_body(i))
                else:
                    response = await client.post("/api/gate/calls", params={"wait": 0}, json=gate_body(i))
                response.raise_for_status()

        await asyncio.gather(*(worker() for _ in range(16)))
    return time.perf_counter() - started


@dataclass
class Waiter:
    """One waiting request on its own connection."""

    key: str
    """The call's idempotency key (its `tool_call_id`)."""
    kind: str
    request: bytes
    raw: bytes = b""
    answered_at: float | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def responses(self) -> int:
        return self.raw.count(b"HTTP/1.1 ")

    def body(self) -> Any:
        return json.loads(self.raw.partition(b"\r\n\r\n")[2])


def http_request(method: str, path: str, token: str, body: Any = None) -> bytes:
    payload = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + payload


def waiters_for(n: int, token: str, ids: dict[str, str]) -> list[Waiter]:
    waiters = []
    for i in range(n):
        if i % 2 == 0:
            request = http_request("POST", f"/api/hooks/claude-code?wait={WAIT_SECONDS}", token, hook_body(i))
            waiters.append(Waiter(f"h{i}", "hook", request))
        elif i % 4 == 1:
            request = http_request("GET", f"/api/gate/calls/{ids[f'g{i}']}?wait={WAIT_SECONDS}", token)
            waiters.append(Waiter(f"g{i}", "gate-get", request))
        else:
            request = http_request("POST", f"/api/gate/calls?wait={WAIT_SECONDS}", token, gate_body(i))
            waiters.append(Waiter(f"g{i}", "gate-post", request))
    for i in range(1, n, 200):  # one call in a hundred: a second long poll on the same call
        request = http_request("GET", f"/api/gate/calls/{ids[f'g{i}']}?wait={WAIT_SECONDS}", token)
        waiters.append(Waiter(f"g{i}", "gate-get", request))
    return waiters


async def hold(port: int, waiter: Waiter, opened: asyncio.Semaphore, sent: list[int]) -> None:
    async with opened:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(waiter.request)
        await writer.drain()
    sent[0] += 1
    waiter.raw = await reader.read()
    waiter.answered_at = time.monotonic()
    writer.close()


async def wait_until_idle(pid: int, *, at_most: float) -> None:
    """Until the server spent under 3 % of a core for a second (every waiter parked), or `at_most` seconds."""
    deadline = time.monotonic() + at_most
    last = cpu_ticks(pid)
    quiet = 0
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = cpu_ticks(pid)
        quiet = quiet + 1 if now - last <= 1 else 0
        last = now
        if quiet >= 2:
            return
    print("    (the server never went quiet: waiters keep it busy)")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def run_one(code: Path, kind: str, n: int) -> None:
    with database(kind) as database_url, server(code, database_url) as (port, pid):
        asking = helper(code, "tokens", database_url)
        created = await create_calls(port, asking, n)
        rows = sql_rows(database_url, "SELECT tool_call_id, id FROM tool_calls")
        ids = dict((str(key), str(call_id)) for key, call_id in rows)
        assert len(ids) == n, f"{len(ids)} calls, not {n}"
        await asyncio.sleep(1)
        before = rss_kib(pid)
        waiters = waiters_for(n, asking, ids)
        opened, sent = asyncio.Semaphore(200), [0]
        started = time.perf_counter()
        for waiter in waiters:
            waiter.task = asyncio.create_task(hold(port, waiter, opened, sent))
        while sent[0] < len(waiters):
            await asyncio.sleep(0.1)
        await wait_until_idle(pid, at_most=120)
        parked = time.perf_counter() - started
        during = rss_kib(pid)
        early = sum(1 for w in waiters if w.raw)
        held = f", {pg_connections(database_url)} database connections" if kind == "postgresql" else ""
        per = (during - before) / len(waiters)
        print(
            f"  [{kind}] {len(waiters)} waiting ({n} calls; {created:.0f} s to ask them, {parked:.0f} s to park the "
            f"waiters): +{(during - before) / 1024:.1f} MiB RSS, {per:.1f} KiB a waiter{held}"
            + (f"; {early} answered before any decision!" if early else "")
        )
        order = [ids[f"h{i}" if i % 2 == 0 else f"g{i}"] for i in range(n)]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as listing:
            json.dump(order, listing)
        timings_file = listing.name + ".out"
        deciding = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--helper",
            "decide",
            database_url,
            listing.name,
            timings_file,
            env=code_env(code),
            stderr=subprocess.PIPE,
        )
        _, stderr = await deciding.communicate()
        if deciding.returncode:
            raise RuntimeError(f"deciding failed:\n{stderr.decode()}")
        tasks = [w.task for w in waiters if w.task is not None]
        _done, pending = await asyncio.wait(tasks, timeout=180)
        saved = json.loads(Path(timings_file).read_text())  # noqa: ASYNC240
        timings: dict[str, tuple[float, float]] = {c: (a, b) for c, a, b in saved}
        os.unlink(listing.name)
        os.unlink(timings_file)
        for task in pending:
            task.cancel()
        report(kind, database_url, waiters, ids, timings, order, lost=len(pending))


def bulk_lat_ok(bulk: list[str], answered: dict[str, float]) -> bool:
    return any(c in answered for c in bulk)


def report(
    kind: str,
    database_url: str,
    waiters: list[Waiter],
    ids: dict[str, str],
    timings: dict[str, tuple[float, float]],
    order: list[str],
    *,
    lost: int,
) -> None:
    answered: dict[str, float] = {}
    handed: Counter[str] = Counter()
    problems: list[str] = []
    for waiter in waiters:
        call_id = ids[waiter.key]
        if waiter.responses() != 1:
            problems.append(f"{waiter.kind} {waiter.key}: {waiter.responses()} responses")
            continue
        body = waiter.body()
        if waiter.kind == "hook":
            ok = body.get("hookSpecificOutput", {}).get("permissionDecision") == "allow"
            handed[call_id] += ok
        else:
            ok = body.get("decision") == "approved"
            handed[call_id] += bool(body.get("handed_out"))
        if not ok:
            problems.append(f"{waiter.kind} {waiter.key}: {str(body)[:200]}")
        if waiter.answered_at is not None:
            answered[call_id] = min(answered.get(call_id, waiter.answered_at), waiter.answered_at)
    twice = [c for c, count in handed.items() if count != 1]
    executing = sql_rows(
        database_url,
        "SELECT subject_id, count(*) FROM audit_events WHERE action = 'call.executing' GROUP BY subject_id",
    )
    audit_twice = sum(1 for _, count in executing if count != 1)
    paced = [answered[c] - timings[c][0] for c in order[:PACED] if c in answered and c in timings]
    after_commit = [answered[c] - timings[c][1] for c in order[:PACED] if c in answered and c in timings]
    bulk = order[PACED:]
    bulk_text = ""
    if bulk and bulk_lat_ok(bulk, answered):
        first = min(timings[c][0] for c in bulk)
        last = max(answered.get(c, float("nan")) for c in bulk)
        bulk_lat = [answered[c] - timings[c][0] for c in bulk if c in answered]
        bulk_text = (
            f"; the other {len(bulk)} decided at once: last answer {last - first:.1f} s after the first of them "
            f"(p50 {statistics.median(bulk_lat) * 1e3:.0f} ms queued)"
        )
    if not paced:
        paced = after_commit = [float("nan")]
    print(
        f"  [{kind}] decision -> answer, {len(paced)} decided one at a time at {PACED_RATE:g}/s while the others wait: "
        f"p50 {statistics.median(paced) * 1e3:.1f} ms, p95 {percentile(paced, 0.95) * 1e3:.1f} ms "
        f"(from the commit: p50 {statistics.median(after_commit) * 1e3:.1f} ms){bulk_text}"
    )
    verdict = "every request answered exactly once, every call handed out once"
    if problems or twice or lost or audit_twice or len(executing) != len(ids):
        verdict = (
            f"PROBLEMS: {len(problems)} bad answers {problems[:3]}, {len(twice)} calls handed out != 1 time, "
            f"{lost} never answered, {audit_twice} executing twice in the audit log, "
            f"{len(executing)} of {len(ids)} executing"
        )
    print(f"  [{kind}] {verdict}")


async def decide_all(database_url: str, listing: str, out: str) -> None:
    """The other process: approve the calls straight in the database, timing each on the monotonic clock."""
    from approvals.calls.actors import Actor
    from approvals.calls.verdicts import Approve
    from approvals.store import Database, Store

    store = Store(Database(database_url))
    reviewer = Actor("rita", "reviewer")
    order: list[str] = json.loads(Path(listing).read_text())  # noqa: ASYNC240
    timings: list[tuple[str, float, float]] = []
    await store.calls.get_call(order[0])  # connected before the clock starts
    next_at = time.monotonic()
    for call_id in order[:PACED]:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        next_at += 1 / PACED_RATE
        started = time.monotonic()
        await store.calls.decide(call_id, Approve(), actor=reviewer)
        timings.append((call_id, started, time.monotonic()))
    rest = iter(order[PACED:])

    async def decider() -> None:
        for call_id in rest:
            started = time.monotonic()
            await store.calls.decide(call_id, Approve(), actor=reviewer)
            timings.append((call_id, started, time.monotonic()))

    await asyncio.gather(*(decider() for _ in range(DECIDERS)))
    await store.db.dispose()
    Path(out).write_text(json.dumps(timings))  # noqa: ASYNC240


async def make_tokens(database_url: str) -> str:
    from approvals.store import SYSTEM, Database, Store

    store = Store(Database(database_url))
    asking = await store.people.create_token("bench-agent", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    await store.people.create_user("rita", "bench-password-1", role="reviewer", actor=SYSTEM)
    await store.db.dispose()
    return asking


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,10000")
    parser.add_argument("--kinds", default="postgresql,sqlite")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    parser.add_argument("--helper", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.helper:
        sys.path[:0] = [os.environ.get("APPROVALS_BENCH_CODE", str(ROOT))]
        name, *rest = args.helper
        if name == "tokens":
            print(asyncio.run(make_tokens(*rest)))
        else:
            asyncio.run(decide_all(*rest))
        return
    raise_file_limit()
    print(f"waiters on one `approvals serve` of {args.code.resolve()} (noisy: a shared 2-core machine)")
    for kind in args.kinds.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            asyncio.run(run_one(args.code.resolve(), kind, size))


if __name__ == "__main__":
    main()
