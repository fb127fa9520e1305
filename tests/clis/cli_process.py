"""What running any of the real CLIs (claude_code, codex, gemini) takes: finding it, its environment, the run.

The CLIs come from tests/clis/install.sh (`make clis`), which prints the folder to export as
`APPROVALS_CLIS_DIR`. `find_binary` looks for a CLI there and skips the test, saying how to
install it, when it is missing. `cli_env` builds a run's whole environment from scratch (nothing
of the caller's that could point a CLI elsewhere), and `run_process` runs it in a session of
its own, killing its whole process group past the timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CLIS_DIR_ENV = "APPROVALS_CLIS_DIR"
"""The folder tests/clis/install.sh printed (`make clis`): holds node_modules (and bin/)."""
DEFAULT_TIMEOUT = 60.0


def clis_dir(tool: str) -> Path:
    """`$APPROVALS_CLIS_DIR`, or skip the test saying how to install `tool`."""
    folder = os.environ.get(CLIS_DIR_ENV)
    if not folder:
        pytest.skip(f"{tool} is not installed: run `make clis` (tests/clis/install.sh) and export {CLIS_DIR_ENV}")
    root = Path(folder)
    if not (root / "node_modules").is_dir():
        pytest.skip(f"{CLIS_DIR_ENV}={folder} holds no node_modules: run tests/clis/install.sh again")
    return root


def find_binary(root: Path, candidates: Iterable[Path], what: str, *, executable: bool = True) -> Path:
    """The first of `candidates` that is a file (an executable one unless `executable=False`), or
    skip the test saying `root` holds no `what`."""
    for candidate in candidates:
        if candidate.is_file() and (not executable or os.access(candidate, os.X_OK)):
            return candidate
    pytest.skip(f"{CLIS_DIR_ENV}={root} holds no {what}: run tests/clis/install.sh again")


def make_project(root: Path) -> Path:
    """An empty project folder under `root` (not a git repository)."""
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    return project


def cli_env(home: Path, values: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH, TMPDIR and the locale; `HOME`,
    the CLI's own `values`, then `extra` (hooks inherit it: the way to hand a hook variables)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        **values,
    }
    env.update(extra or {})
    return env


@dataclass
class CliRun:
    """What one headless CLI run left: exit code, output, and how long it took."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json_lines(self) -> list[dict[str, Any]]:
        """The JSON objects of a run that prints one a line (`codex exec --json`, `claude
        --output-format stream-json`)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def describe(self) -> str:
        name = Path(self.args[0]).name if self.args else "cli"
        head = f"{name} exited {self.returncode} after {self.seconds:.1f} s"
        return f"{head}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def run_process(command: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> CliRun:
    """Run `command` in a session of its own with no stdin; past `timeout` seconds kill its whole
    process group (the shells it started too) and raise `subprocess.TimeoutExpired`."""
    command = [str(part) for part in command]
    started = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
    return CliRun(command, process.returncode, stdout, stderr, time.monotonic() - started)
