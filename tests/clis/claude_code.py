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

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cli_process import DEFAULT_TIMEOUT, CliRun, cli_env, clis_dir, find_binary, run_process

CLAUDE_VERSION = "2.1.328"
"""The version pinned in tests/clis/package-lock.json."""


def claude_binary() -> Path:
    """The native Claude Code binary installed by tests/clis/install.sh, or skip the test."""
    root = clis_dir("Claude Code")
    candidates = [root / "bin" / "claude", *sorted(root.glob("node_modules/@anthropic-ai/claude-code-*/claude"))]
    return find_binary(root, candidates, "Claude Code binary (bin/claude)")


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


class ClaudeRun(CliRun):
    """What one `claude -p` run left: exit code, output, and how long it took."""

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
        return self.json_lines()


def claude_env(home: Path, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH and the locale."""
    values = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CI": "1",
    }
    return cli_env(home, values, extra)


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
    run = run_process(command, cwd=project, env=claude_env(home, base_url, env), timeout=timeout)
    return ClaudeRun(**vars(run))


def resume_args(session_id: str, *more: str) -> list[str]:
    """Arguments that continue session `session_id` (with an empty prompt: `run_claude(..., "", args=...)`).

    A run whose PreToolUse hook answered `defer` stops with `stop_reason: "tool_deferred"`;
    resuming it asks the hook about the same `tool_use_id` again, and runs or refuses the call.
    """
    return ["--resume", session_id, "--output-format", "json", *more]
