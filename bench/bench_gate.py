"""The gate under load (issue 25): what asking costs, how fast a waiting hook hears a decision, many hooks at once.

1. A gate request's latency when it is answered at once, per database: the first ask of a call
   (validated, stored, the hook's fallback answered; `wait=0`), and an ask of a call that is
   already decided (a retry, or a CLI resuming: the allow a tool waits for).
1b. A hook's overhead on a call a standing rule allows, which is all a hook adds to the tool's
   own run (without the hook the CLI runs the tool at once): the endpoint alone (one keep-alive
   HTTP request: the call stored, decided by the rule, handed out) and the whole `approvals
   hook claude-code` command a CLI spawns (start-up, the request, the answer printed),
   interleaved, N=100 each.
2. Decision -> waiting hook answered: a Claude Code hook long-polls one web process, a reviewer
   decides through another; the time from sending the decision to the hook's answer.
   PostgreSQL (two processes need a shared database); target p50 < 20 ms.
3. 500 hooks waiting at once on one `approvals serve` process, each of its own session: its
   memory per waiting hook, the database connections it holds, and that each hook gets its
   call's decision exactly once.

Each web process is `approvals serve --no-worker` on a database of its own making (SQLite file,
or a throwaway PostgreSQL database: APPROVALS_BENCH_PG_URL). Prints numbers; asserts only that
no decision was lost or given twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _databases import migrated_database

from approvals.store import SYSTEM, Database, Store

SAMPLES = 300
HOOK_RUNS = 100
HANDOFFS = 60
WAITING = 500
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def web_process(database_url: str) -> Iterator[tuple[str, int]]:
    """`approvals serve --no-worker` on a free port: its URL and process id."""
    port = free_port()
    env = {**os.environ, "APPROVALS_SECRET_KEY": "bench-gate", "APPROVALS_GATE_MAX_WAIT": "120"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "approvals",
            "serve",
            "--database-url",
            database_url,
            "--port",
            str(port),
            "--no-worker",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("approvals serve did not start")
            time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def tokens(database_url: str) -> tuple[str, str]:
    """A token that may ask, and a reviewer's own token that decides."""

    async def make() -> tuple[str, str]:
        store = Store(Database(database_url))
        asking = await store.people.create_token("bench-agent", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
        await store.people.create_user("rita", "bench-password-1", role="reviewer", actor=SYSTEM)
        deciding = await store.people.create_token("rita", role="reviewer", actor=SYSTEM, user="rita")
        await store.db.dispose()
        return asking, deciding

    return asyncio.run(make())


def hook_input(session: str, tool_use_id: str) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": "/home/dev/project",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"touch /tmp/{tool_use_id}"},
        "tool_use_id": tool_use_id,
    }


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1e3:6.2f} ms   p99 {p99 * 1e3:6.2f} ms"


def bench_asking(kind: str) -> None:
    with migrated_database(kind) as database_url:
        asking, deciding = tokens(database_url)
        with web_process(database_url) as (url, _):
            agent = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {asking}"})
            reviewer = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {deciding}"})
            first: list[float] = []
            for i in range(SAMPLES + 20):
                started = time.perf_counter()
                answer = agent.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_input("s", f"t{i}"))
                elapsed = time.perf_counter() - started
                assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny"  # waiting: the fallback
                if i >= 20:
                    first.append(elapsed)
            calls = reviewer.get("/api/calls", params={"limit": 200}).json()["items"]
            call_id = calls[0]["id"]
            decided_id = calls[0]["tool_call_id"]
            reviewer.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"}).raise_for_status()
            again: list[float] = []
            for i in range(SAMPLES + 20):
                started = time.perf_counter()
                answer = agent.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_input("s", decided_id))
                elapsed = time.perf_counter() - started
                assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
                if i >= 20:
                    again.append(elapsed)
        print(f"[{kind}] hook, first ask (stored, fallback answered): {percentiles(first)}")
        print(f"[{kind}] hook, ask of a decided call (allow):         {percentiles(again)}")


def allow_bash(database_url: str) -> None:
    """A standing rule that lets Claude Code's Bash calls through."""
    from approvals.policy.files import parse_rules

    async def save() -> None:
        store = Store(Database(database_url))
        [rule] = parse_rules([{"name": "bash", "engine": "claude_code", "tool": "Bash", "effect": "allow"}])
        await store.rules.save_rule(rule, actor=SYSTEM)
        await store.db.dispose()

    asyncio.run(save())


def bench_allowed_hook(kind: str) -> None:
    approvals = Path(sys.executable).parent / "approvals"
    with migrated_database(kind) as database_url:
        asking, _ = tokens(database_url)
        allow_bash(database_url)
        with web_process(database_url) as (url, _):
            agent = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {asking}"})
            hook_env = {**os.environ, "APPROVALS_URL": url, "APPROVALS_TOKEN": asking}
            endpoint: list[float] = []
            command: list[float] = []
            for i in range(HOOK_RUNS + 5):
                started = time.perf_counter()
                answer = agent.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_input("r", f"e{i}"))
                elapsed = time.perf_counter() - started
                assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "allow", answer.text
                started = time.perf_counter()
                done = subprocess.run(
                    [str(approvals), "hook", "claude-code", "--wait", "5"],
                    input=json.dumps(hook_input("r", f"c{i}")).encode(),
                    env=hook_env,
                    capture_output=True,
                    check=False,
                )
                spawned = time.perf_counter() - started
                assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow", done.stderr
                if i >= 5:
                    endpoint.append(elapsed)
                    command.append(spawned)
        print(f"[{kind}] rule-allowed call, hook endpoint alone:       {percentiles(endpoint)}")
        print(
            f"[{kind}] rule-allowed call, `approvals hook` command: {percentiles(command)}  (the hook's whole overhead)"
        )


def bench_handoff() -> None:
    """A hook waits on process A; the decision goes to process B (PostgreSQL's NOTIFY carries it)."""
    with migrated_database("postgresql") as database_url:
        asking, deciding = tokens(database_url)
        with web_process(database_url) as (waiting_url, _), web_process(database_url) as (deciding_url, _):
            agent = httpx.Client(base_url=waiting_url, headers={"Authorization": f"Bearer {asking}"}, timeout=60)
            reviewer = httpx.Client(base_url=deciding_url, headers={"Authorization": f"Bearer {deciding}"})
            latencies = []
            for i in range(HANDOFFS):
                asked = agent.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_input("h", f"h{i}"))
                assert asked.status_code == 200
                [call] = [c for c in reviewer.get("/api/calls").json()["items"] if c["tool_call_id"] == f"h{i}"]
                result: dict[str, Any] = {}

                def wait_for_it(i: int = i, result: dict[str, Any] = result) -> None:
                    response = agent.post("/api/hooks/claude-code", params={"wait": 30}, json=hook_input("h", f"h{i}"))
                    result["answered_at"] = time.perf_counter()
                    result["body"] = response.json()

                waiter = threading.Thread(target=wait_for_it)
                waiter.start()
                time.sleep(0.15)  # the hook is waiting on A
                sent = time.perf_counter()
                reviewer.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"}).raise_for_status()
                waiter.join(timeout=30)
                assert result["body"]["hookSpecificOutput"]["permissionDecision"] == "allow"
                latencies.append(result["answered_at"] - sent)
        print(f"[postgresql] decision on one process -> hook waiting on another answered: {percentiles(latencies)}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connections(database_url: str) -> int:
    name = database_url.rsplit("/", 1)[1]
    server = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
        return int(row[0]) if row else 0


async def many_waiting(url: str, pid: int, asking: str, deciding: str, database_url: str, kind: str) -> None:
    limits = httpx.Limits(max_connections=WAITING + 50, max_keepalive_connections=WAITING + 50)
    async with (
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {asking}"}, limits=limits, timeout=120
        ) as agent,
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {deciding}"}, timeout=60) as reviewer,
    ):
        for i in range(WAITING):  # the calls exist; the hooks then wait on them
            await agent.post("/api/hooks/claude-code", params={"wait": 0}, json=hook_input(f"m{i}", f"m{i}"))
        before = rss_kib(pid)
        answers: dict[str, str] = {}

        async def hook(i: int) -> None:
            response = await agent.post(
                "/api/hooks/claude-code", params={"wait": 100}, json=hook_input(f"m{i}", f"m{i}")
            )
            decision = response.json()["hookSpecificOutput"]["permissionDecision"]
            assert f"m{i}" not in answers, "a hook answered twice"
            answers[f"m{i}"] = decision

        waiting = [asyncio.create_task(hook(i)) for i in range(WAITING)]
        await asyncio.sleep(3)
        during = rss_kib(pid)
        held = connections(database_url) if kind == "postgresql" else None
        calls: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = (
                await reviewer.get("/api/calls", params={"limit": 200, **({"after": cursor} if cursor else {})})
            ).json()
            calls += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                break
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(8)

        async def approve(call_id: str) -> None:
            async with semaphore:
                (await reviewer.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})).raise_for_status()

        await asyncio.gather(*(approve(call["id"]) for call in calls))
        await asyncio.gather(*waiting)
        elapsed = time.perf_counter() - started
        allowed = sum(decision == "allow" for decision in answers.values())
        assert len(calls) == WAITING, len(calls)
        assert allowed == WAITING, allowed
        decisions = [(await reviewer.get(f"/api/calls/{call['id']}")).json()["decisions"] for call in calls[:50]]
        assert all(len(d) == 1 for d in decisions), "a call was decided twice"
    per_hook = (during - before) / WAITING
    held_text = f", {held} database connections held" if held is not None else ""
    print(
        f"[{kind}] {WAITING} hooks waiting on one process: +{(during - before) / 1024:.1f} MiB RSS "
        f"({per_hook:.1f} KiB a hook){held_text}; all {allowed} answered allow exactly once, "
        f"{elapsed:.1f} s from the first decision to the last answer"
    )


def bench_many_waiting(kind: str) -> None:
    with migrated_database(kind) as database_url:
        asking, deciding = tokens(database_url)
        with web_process(database_url) as (url, pid):
            asyncio.run(many_waiting(url, pid, asking, deciding, database_url, kind))


def main() -> None:
    with tempfile.TemporaryDirectory():
        for kind in ("sqlite", "postgresql"):
            bench_asking(kind)
        for kind in ("sqlite", "postgresql"):
            bench_allowed_hook(kind)
        bench_handoff()
        for kind in ("sqlite", "postgresql"):
            bench_many_waiting(kind)


if __name__ == "__main__":
    main()
