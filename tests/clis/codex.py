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

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cli_process import (
    CLIS_DIR_ENV,
    DEFAULT_TIMEOUT,
    CliRun,
    cli_env,
    clis_dir,
    find_binary,
    make_project,
    run_process,
)
from .scripted_responses import MODEL_ID

CODEX_VERSION = "0.169.0"
"""The version pinned in tests/clis/package-lock.json."""
API_KEY_ENV = "APPROVALS_SCRIPTED_API_KEY"
"""The variable the scripted provider's `env_key` names (Codex sends it as the bearer token)."""
EXEC_FLAGS = (
    "--skip-git-repo-check",
    "--dangerously-bypass-approvals-and-sandbox",
    "--dangerously-bypass-hook-trust",
    "--strict-config",
)
"""`codex exec` flags of every run: see the module's docstring."""


def codex_binary() -> Path:
    """The Codex CLI installed by tests/clis/install.sh, or skip the test."""
    root = clis_dir("Codex")
    candidates = [
        root / "bin" / "codex",
        root / "node_modules" / ".bin" / "codex",
        *sorted(root.glob("node_modules/@openai/codex-*/vendor/*/bin/codex")),
    ]
    return find_binary(root, candidates, "Codex (bin/codex)")


__all__ = [
    "ALLOW",
    "CLIS_DIR_ENV",
    "CODEX_VERSION",
    "DEFAULT_TIMEOUT",
    "CliRun",
    "clis_dir",
    "codex_binary",
    "command_hook",
    "deny",
    "make_codex_home",
    "make_project",
    "matcher",
    "run_codex",
    "run_process",
]


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


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


# -- running ----------------------------------------------------------------------------------


def codex_env(codex_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH and the locale.

    Hooks inherit it: `extra` is the way to hand a hook variables.
    """
    home = codex_home.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    values = {"CODEX_HOME": str(codex_home), API_KEY_ENV: "sk-scripted-test-key", "NO_COLOR": "1"}
    return cli_env(home, values, extra)


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
