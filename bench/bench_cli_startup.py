"""How long the `approvals` command takes to start: `--help`, a real `tokens create`, and a coding CLI's hook.

    python bench/bench_cli_startup.py [runs] [CHECKOUT]

Every figure is over `runs` (default 9) subprocesses of this environment's `approvals` console
script, after one warm-up run each (compiled files, disk cache), as the median and the range
(min-max), in milliseconds. With CHECKOUT (an older checkout, `git worktree add /tmp/before <rev>`)
the same processes import the package from there instead (PYTHONPATH), for a before/after.

- `wall`: from spawning the process to its exit, what a person (or the coding CLI) waits for.
- `imports`: the top-level totals of `-X importtime` (PYTHONPROFILEIMPORTTIME=1, in runs of
  their own: it slows the run it measures), split where `approvals.cli` is imported:
  `to the CLI` is the interpreter's own imports, `approvals.__main__`, `approvals.cli` and
  typer; `in the command` is everything the command imports when it runs: typer's parameter
  handling (pydantic), then for `tokens create` the settings and the store (SQLAlchemy, the
  drivers), which is where the database work begins. The biggest of those are named.
- `python -c pass`: the interpreter alone, for scale.

The commands:
- `approvals --help`;
- `approvals tokens create NAME --database-url sqlite:///...`: a real create (one token per run)
  on a SQLite file in a temporary folder, migrated once before the runs;
- `approvals hook claude-code`, against a tiny HTTP server in this process that answers the hook
  at once: `to request` is from spawning the hook to the server reading its request (start-up,
  reading stdin, connecting), `wall` to the hook's exit after printing the answer.

Target (issue 36): under 0.5 s of start-up and imports before a command touches the database.
On this 2-core machine, shared, the figures move by tens of percent from one run to the next.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
APPROVALS = Path(sys.executable).with_name("approvals")
"""This environment's console script (`approvals = approvals.__main__:main`)."""
HOOK_INPUT = json.dumps(
    {
        "session_id": "bench",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_bench",
        "cwd": "/tmp",
    }
).encode()
HOOK_ANSWER = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})


def _env(checkout: Path | None, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("APPROVALS_", "PYTHONPROFILE"))}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "web"), env.get("PYTHONPATH", "")])
    return env | extra


def _ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values) * 1000:7.0f} ({min(values) * 1000:.0f}-{max(values) * 1000:.0f})"


def _wall(command: Sequence[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-2000:]}")
    return elapsed


def _imports(command: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float, dict[str, float]]:
    """Seconds of top-level imports to `approvals.cli` (included) and after it, with those after by module."""
    done = subprocess.run(
        command, env=env | {"PYTHONPROFILEIMPORTTIME": "1"}, cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    before = after = 0.0
    seen_cli = False
    later: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith("  "):  # imported by another import: counted in its top-level import
            continue
        seconds = int(cumulative) / 1e6
        name = name.strip()
        if seen_cli:
            after += seconds
            later[name] = seconds
        else:
            before += seconds
        seen_cli = seen_cli or name == "approvals.cli"
    return before, after, later


def measure(
    label: str, command: Callable[[int], list[str]], runs: int, env: dict[str, str], cwd: Path, imports: bool = True
) -> None:
    _wall(command(-1), env, cwd)  # warm-up
    walls = [_wall(command(run), env, cwd) for run in range(runs)]
    print(f"{label}\n  wall ms           {_ms(walls)}")
    if not imports:
        return
    measured = [_imports(command(runs + run), env, cwd) for run in range(runs)]
    print(f"  imports ms: to the CLI    {_ms([before for before, _, _ in measured])}")
    print(f"              in the command{_ms([after for _, after, _ in measured])}")
    biggest: dict[str, list[float]] = {}
    for _, _, later in measured:
        for name, seconds in later.items():
            biggest.setdefault(name, []).append(seconds)
    top = sorted(biggest.items(), key=lambda item: -statistics.median(item[1]))[:3]
    named = ", ".join(f"{name} {statistics.median(values) * 1000:.0f}" for name, values in top if values)
    if named:
        print(f"              of which      {named}")


class _Hook(BaseHTTPRequestHandler):
    arrivals: ClassVar[list[float]] = []

    def do_POST(self) -> None:
        type(self).arrivals.append(time.perf_counter())
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = HOOK_ANSWER.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def hook_server() -> Iterator[str]:
    """The URL of a server that answers every hook with an allow, at once."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def measure_hook(runs: int, env: dict[str, str], cwd: Path) -> None:
    with hook_server() as url:
        command = [str(APPROVALS), "hook", "claude-code", "--url", url, "--wait", "5"]
        hook_env = env | {"APPROVALS_TOKEN": "apv_bench"}
        to_request, walls = [], []
        for run in range(runs + 1):
            _Hook.arrivals.clear()
            started = time.perf_counter()
            done = subprocess.run(command, env=hook_env, cwd=cwd, input=HOOK_INPUT, capture_output=True, check=False)
            ended = time.perf_counter()
            if done.returncode != 0 or json.loads(done.stdout) != json.loads(HOOK_ANSWER):
                raise SystemExit(f"the hook failed: {done.stderr.decode()}")
            if run:  # the first is the warm-up
                to_request.append(_Hook.arrivals[0] - started)
                walls.append(ended - started)
    print("approvals hook claude-code (a local server answering at once)")
    print(f"  to request ms     {_ms(to_request)}")
    print(f"  wall ms           {_ms(walls)}")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    checkout = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else None
    env = _env(checkout)
    where = f"the package from {checkout}" if checkout else "this checkout"
    print(f"approvals start-up, {runs} runs each ({where}): median (min-max)\n")
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        database = f"sqlite:///{cwd / 'approvals.db'}"
        subprocess.run([str(APPROVALS), "db", "upgrade", "--database-url", database], env=env, cwd=cwd, check=True)
        measure("python -c pass", lambda run: [sys.executable, "-c", "pass"], runs, env, cwd, imports=False)
        measure("approvals --help", lambda run: [str(APPROVALS), "--help"], runs, env, cwd)
        measure(
            "approvals tokens create (SQLite)",
            lambda run: [str(APPROVALS), "tokens", "create", f"bench-{run + 1}", "--database-url", database],
            runs,
            env,
            cwd,
        )
        measure_hook(runs, env, cwd)


if __name__ == "__main__":
    main()
