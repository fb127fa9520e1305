"""Run the real Claude Code CLI (`claude -p`) in a temporary project, against a scripted model.

The CLI comes from tests/clis/install.sh (`make clis`), which prints the folder to export as
`APPROVALS_CLIS_DIR`; the native binary is `$APPROVALS_CLIS_DIR/bin/claude`. Without it,
`claude_binary()` skips the test and says how to install it.

    binary = claude_binary()
    project = make_project(tmp_path, hooks={"PreToolUse": [matcher("Bash", http_hook(url))]})
    with ScriptedAnthropic([bash("touch x"), text("Done.")]) as api:
        run = run_claude(binary, project, "Make x", base_url=api.base_url)

What the CLI needs here (Claude Code 2.1.328): `ANTHROPIC_BASE_URL` (our server),
any `ANTHROPIC_API_KEY`, `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (no telemetry, update
checks or other calls that would leave the machine), a `HOME` of its own (it writes
~/.claude.json and ~/.claude/ there), and nothing of the caller's environment that could point
it elsewhere: `run_claude` builds the environment from scratch. It runs as root without
`--dangerously-skip-permissions` (which refuses root); in `-p` mode a Bash command that the
permission rules do not allow is denied (no one can answer a prompt), unless a PreToolUse hook
answers `allow`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CLIS_DIR_ENV = "APPROVALS_CLIS_DIR"
"""The folder tests/clis/install.sh printed (`make clis`): holds bin/claude."""
CLAUDE_VERSION = "2.1.328"
"""The version pinned in tests/clis/package-lock.json."""
DEFAULT_TIMEOUT = 60.0


def claude_binary() -> Path:
    """The native Claude Code binary installed by tests/clis/install.sh, or skip the test."""
    folder = os.environ.get(CLIS_DIR_ENV)
    if not folder:
        pytest.skip(f"Claude Code is not installed: run `make clis` (tests/clis/install.sh) and export {CLIS_DIR_ENV}")
    root = Path(folder)
    candidates = [root / "bin" / "claude", *sorted(root.glob("node_modules/@anthropic-ai/claude-code-*/claude"))]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(f"{CLIS_DIR_ENV}={folder} holds no Claude Code binary (bin/claude): run tests/clis/install.sh again")


# -- settings ---------------------------------------------------------------------------------


def http_hook(
    url: str,
    *,
    timeout: float = 30,
    headers: Mapping[str, str] | None = None,
    allowed_env_vars: Sequence[str] = (),
) -> dict[str, Any]:
    """An HTTP hook: Claude Code POSTs the hook input as JSON to `url` and reads the JSON answer.

    Header values may name environment variables (`"Bearer $APPROVALS_TOKEN"`); Claude Code
    fills in only those listed in `allowed_env_vars`.
    """
    hook: dict[str, Any] = {"type": "http", "url": url, "timeout": timeout}
    if headers:
        hook["headers"] = dict(headers)
    if allowed_env_vars:
        hook["allowedEnvVars"] = list(allowed_env_vars)
    return hook


def command_hook(command: str, *, timeout: float = 30) -> dict[str, Any]:
    """A command hook: the hook input on stdin, the JSON answer on stdout."""
    return {"type": "command", "command": command, "timeout": timeout}


def matcher(tool_pattern: str, *hooks: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of an event's list: the hooks that run for tools matching `tool_pattern`."""
    return {"matcher": tool_pattern, "hooks": [dict(h) for h in hooks]}


def make_project(
    root: Path,
    *,
    hooks: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """A project folder under `root` with `.claude/settings.json` holding `hooks` (and `settings`)."""
    project = root / "project"
    (project / ".claude").mkdir(parents=True, exist_ok=True)
    content: dict[str, Any] = dict(settings or {})
    if hooks is not None:
        content["hooks"] = dict(hooks)
    (project / ".claude" / "settings.json").write_text(json.dumps(content, indent=2))
    return project


# -- running ----------------------------------------------------------------------------------


@dataclass
class ClaudeRun:
    """What one `claude -p` run left: exit code, output, and how long it took."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def result(self) -> dict[str, Any]:
        """The `--output-format json` result object (the last JSON line of stdout)."""
        for line in reversed(self.stdout.strip().splitlines()):
            if line.startswith("{"):
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        raise AssertionError(f"no JSON result in stdout:\n{self.stdout}\nstderr:\n{self.stderr}")

    def events(self) -> list[dict[str, Any]]:
        """The messages of an `--output-format stream-json` run."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def describe(self) -> str:
        return (
            f"claude exited {self.returncode} after {self.seconds:.1f} s\n"
            f"stdout:\n{self.stdout}\nstderr:\n{self.stderr}"
        )


def claude_env(home: Path, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH and the locale."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CI": "1",
    }
    env.update(extra or {})
    return env


def run_claude(
    binary: Path,
    project: Path,
    prompt: str,
    *,
    base_url: str,
    args: Sequence[str] = ("--output-format", "json"),
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ClaudeRun:
    """Run `claude -p PROMPT ARGS` in `project` against the model server at `base_url`.

    `home` defaults to `home/` beside the project (kept between runs, so a later run can
    `--resume` a session: see `resume_args`); `env` adds variables (for example the ones an
    HTTP hook's `allowedEnvVars` names). The CLI runs in a session of its own; past `timeout`
    seconds its whole process group (the shells its Bash tool started too) is killed and
    `subprocess.TimeoutExpired` raised.
    """
    if home is None:
        home = project.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    command = [str(binary), "-p", prompt, *args]
    started = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=project,
        env=claude_env(home, base_url, env),
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
    return ClaudeRun(command, process.returncode, stdout, stderr, time.monotonic() - started)


def resume_args(session_id: str, *more: str) -> list[str]:
    """Arguments that continue session `session_id` (with an empty prompt: `run_claude(..., "", args=...)`).

    A run whose PreToolUse hook answered `defer` stops with `stop_reason: "tool_deferred"`;
    resuming it asks the hook about the same `tool_use_id` again, and runs or refuses the call.
    """
    return ["--resume", session_id, "--output-format", "json", *more]
