"""Run the real Codex CLI (`codex exec`) in a temporary project, against a scripted model.

The CLI comes from tests/clis/install.sh (`make clis`), which prints the folder to export as
`APPROVALS_CLIS_DIR`; `codex_binary()` finds Codex there (bin/codex, or the npm package's
native binary) and skips the test, saying how to install it, when it is missing.

    binary = codex_binary()
    with ScriptedResponses([shell("touch x"), text("Done.")]) as api:
        home = make_codex_home(tmp_path, api.base_url, hooks={"PreToolUse": [matcher("Bash", command_hook(cmd))]})
        run = run_codex(binary, make_project(tmp_path), "Make x", codex_home=home)

What Codex 0.169.0 needs here (found by running it):

- `$CODEX_HOME/config.toml` with a custom provider (`base_url` ending in `/v1`,
  `wire_api = "responses"`, `env_key` naming the variable that holds any API key) chosen by
  `model_provider`; `[analytics] enabled = false` (otherwise it resolves ab.chatgpt.com) and
  `[features] plugins = false` (otherwise it resolves github.com for the plugin marketplace).
  With these a run touches no address but the scripted server's.
- `$CODEX_HOME/hooks.json`: `{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks":
  [{"type": "command", "command": "...", "timeout": 30}]}]}}`. The matcher is a regex that must
  match the whole tool name (`Bash`, `^Bash$`, `Bash|apply_patch`, `*` or no matcher: all;
  `Ba`, `bash`, `exec_command` or `shell` do not match the shell). `timeout` is in seconds.
- `codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
  --dangerously-bypass-hook-trust`: without the last flag hooks are untrusted and silently
  skipped (the command runs); the first lets it run outside a git repository, the second
  runs commands without asking (`exec` cannot ask) and without its bubblewrap sandbox.

Hook behaviour (PreToolUse, shell commands; the tool the model calls is `exec_command`, the hook
sees `tool_name: "Bash"`, `tool_input: {"command": "<the command string>"}` and `tool_use_id`,
the Responses API `call_id`):

- blocks: exit 0 with `{"hookSpecificOutput": {"hookEventName": "PreToolUse",
  "permissionDecision": "deny", "permissionDecisionReason": R}}` or the older
  `{"decision": "block", "reason": R}`; exit 2 with a reason on stderr. The model gets
  `"Command blocked by PreToolUse hook: R. Command: <command>"` as the call's output.
- runs: exit 0 with `{}`, empty or non-JSON stdout. Also every *failure*, which Codex reports
  as "hook: PreToolUse Failed" on stderr and then runs the command (fails open): output that
  looks like JSON but is invalid, unknown fields, `permissionDecision` `allow` or `ask`
  (unsupported), `continue: false`, exit 2 with nothing on stderr, any other exit code, a
  hook that outlives its timeout.
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

from .scripted_responses import MODEL_ID

CLIS_DIR_ENV = "APPROVALS_CLIS_DIR"
"""The folder tests/clis/install.sh printed (`make clis`): holds node_modules (and bin/)."""
CODEX_VERSION = "0.169.0"
"""The version pinned in tests/clis/package-lock.json."""
API_KEY_ENV = "APPROVALS_SCRIPTED_API_KEY"
"""The variable the scripted provider's `env_key` names (Codex sends it as the bearer token)."""
DEFAULT_TIMEOUT = 60.0
EXEC_FLAGS = (
    "--skip-git-repo-check",
    "--dangerously-bypass-approvals-and-sandbox",
    "--dangerously-bypass-hook-trust",
    "--strict-config",
)
"""`codex exec` flags of every run: see the module's docstring."""


def clis_dir(tool: str) -> Path:
    """`$APPROVALS_CLIS_DIR`, or skip the test saying how to install `tool`."""
    folder = os.environ.get(CLIS_DIR_ENV)
    if not folder:
        pytest.skip(f"{tool} is not installed: run `make clis` (tests/clis/install.sh) and export {CLIS_DIR_ENV}")
    root = Path(folder)
    if not (root / "node_modules").is_dir():
        pytest.skip(f"{CLIS_DIR_ENV}={folder} holds no node_modules: run tests/clis/install.sh again")
    return root


def codex_binary() -> Path:
    """The Codex CLI installed by tests/clis/install.sh, or skip the test."""
    root = clis_dir("Codex")
    candidates = [
        root / "bin" / "codex",
        root / "node_modules" / ".bin" / "codex",
        *sorted(root.glob("node_modules/@openai/codex-*/vendor/*/bin/codex")),
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(f"{CLIS_DIR_ENV}={root} holds no Codex (bin/codex): run tests/clis/install.sh again")


# -- configuration ------------------------------------------------------------------------------


def command_hook(command: str, *, timeout: float = 30, status_message: str | None = None) -> dict[str, Any]:
    """A command hook: the hook input on stdin, the JSON answer on stdout; `timeout` in seconds."""
    hook: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout}
    if status_message:
        hook["statusMessage"] = status_message
    return hook


def matcher(tool_pattern: str | None, *hooks: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of an event's list: the hooks that run for tools whose whole name matches the regex."""
    entry: dict[str, Any] = {"hooks": [dict(h) for h in hooks]}
    if tool_pattern is not None:
        entry["matcher"] = tool_pattern
    return entry


def deny(reason: str) -> dict[str, Any]:
    """The PreToolUse output that blocks the call; the model sees `reason`."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


ALLOW: dict[str, Any] = {}
"""The PreToolUse output that lets the call run (Codex rejects `permissionDecision: "allow"`)."""


def make_codex_home(
    root: Path,
    base_url: str,
    *,
    hooks: Mapping[str, Any] | None = None,
    model: str = MODEL_ID,
    config: str = "",
) -> Path:
    """A `CODEX_HOME` under `root`: config.toml for the scripted provider at `base_url`, and hooks.json.

    `config` is more TOML appended as is (top-level keys must come before any table in it).
    """
    home = root / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {_toml(model)}",
        'model_provider = "scripted"',
        "check_for_update_on_startup = false",
        "",
        config,
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "remote_plugin = false",
        "apps = false",
        "",
        "[model_providers.scripted]",
        'name = "Scripted"',
        f"base_url = {_toml(base_url)}",
        'wire_api = "responses"',
        f"env_key = {_toml(API_KEY_ENV)}",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
    ]
    (home / "config.toml").write_text("\n".join(lines))
    if hooks is not None:
        (home / "hooks.json").write_text(json.dumps({"hooks": dict(hooks)}, indent=2))
    return home


def make_project(root: Path) -> Path:
    """An empty project folder under `root` (not a git repository)."""
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    return project


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


# -- running ----------------------------------------------------------------------------------


@dataclass
class CliRun:
    """What one headless CLI run left: exit code, output, and how long it took."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json_lines(self) -> list[dict[str, Any]]:
        """The JSON objects of a run that prints one a line (`codex exec --json`)."""
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


def codex_env(codex_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH and the locale.

    Hooks inherit it: `extra` is the way to hand a hook variables.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(codex_home.parent / "home"),
        "CODEX_HOME": str(codex_home),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        API_KEY_ENV: "sk-scripted-test-key",
        "NO_COLOR": "1",
    }
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    env.update(extra or {})
    return env


def run_codex(
    binary: Path,
    project: Path,
    prompt: str,
    *,
    codex_home: Path,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> CliRun:
    """Run `codex exec EXEC_FLAGS ARGS PROMPT` in `project` with `codex_home` (see make_codex_home).

    It exits 0 after the model's final answer, whatever the hooks decided; stdout holds the
    final answer (or JSON lines with `args=["--json"]`), stderr the transcript, including
    `hook: PreToolUse Completed|Blocked|Failed` lines.
    """
    command = [str(binary), "exec", *EXEC_FLAGS, *args, "--", prompt]
    return run_process(command, cwd=project, env=codex_env(codex_home, env), timeout=timeout)
