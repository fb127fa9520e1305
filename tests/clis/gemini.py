"""Run the real Gemini CLI (`gemini -p ... --yolo`) in a temporary project, against a scripted model.

The CLI comes from tests/clis/install.sh (`make clis`), which prints the folder to export as
`APPROVALS_CLIS_DIR`; `gemini_binary()` finds it there (bin/gemini, a node script) and skips
the test, saying how to install it, when it is missing.

    binary = gemini_binary()
    with ScriptedGemini([shell("touch x"), text("Done.")]) as api:
        home = make_gemini_home(tmp_path, hooks={"BeforeTool": [matcher("run_shell_command", command_hook(cmd))]})
        run = run_gemini(binary, make_project(tmp_path), "Make x", home=home, base_url=api.base_url)

What Gemini CLI 0.61.0 needs here (found by running it):

- `GOOGLE_GEMINI_BASE_URL` (our server), any `GEMINI_API_KEY`, and in
  `$HOME/.gemini/settings.json` `security.auth.selectedType: "gemini-api-key"` (without it a
  non-interactive run exits 41) and `security.folderTrust.enabled: false` (otherwise the
  project is untrusted: `--yolo` is turned back into `default` and the run exits 55; the
  alternatives are `--skip-trust` or `GEMINI_CLI_TRUST_WORKSPACE=true`). Auto-update,
  usage statistics and telemetry off; with these a run touches no address but the server's.
- Hooks in the same settings.json (user level: hooks in a project's .gemini/settings.json need
  a trusted folder): `{"hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks":
  [{"type": "command", "command": "...", "timeout": 30000}]}]}}`. Hooks are on by default
  (`hooksConfig.enabled`). The matcher is a regex *searched* in the tool name (`shell` matches
  `run_shell_command`; `*` or empty matches all). `timeout` is in milliseconds (default 60000).
- `gemini -p PROMPT --yolo` runs tool calls without asking (a `BeforeTool` hook still runs).

Hook behaviour (BeforeTool; the hook gets `tool_name: "run_shell_command"`, `tool_input:
{"command": ..., "description": ...}` and *no* tool-call id):

- blocks: exit 0 with `{"decision": "deny"|"block", "reason": R}`; a non-zero exit other than 1
  (2, 3, ...) with plain text on stdout or stderr, the text being the reason. The model gets
  `{"error": "Tool execution blocked: R"}` as the call's `functionResponse.response`.
- runs: exit 0 with `{}`, `{"decision": "allow"}`, Claude-style `hookSpecificOutput`
  (ignored), or any non-JSON text (shown as a "system message"); exit 1 (a warning); exit 2
  with nothing printed, or with JSON on stdout that does not deny (the exit code alone
  decides nothing: the CLI parses the output); a hook that outlives its timeout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cli_process import DEFAULT_TIMEOUT, CliRun, cli_env, clis_dir, find_binary, make_project, run_process
from .scripted_gemini import SHELL_TOOL

GEMINI_VERSION = "0.61.0"
"""The version pinned in tests/clis/package-lock.json."""

__all__ = [
    "GEMINI_VERSION",
    "SHELL_TOOL",
    "CliRun",
    "command_hook",
    "deny",
    "gemini_binary",
    "make_gemini_home",
    "make_project",
    "matcher",
    "run_gemini",
]


def gemini_binary() -> Path:
    """The Gemini CLI installed by tests/clis/install.sh, or skip the test."""
    root = clis_dir("Gemini CLI")
    candidates = [
        root / "bin" / "gemini",
        root / "node_modules" / ".bin" / "gemini",
        root / "node_modules" / "@google" / "gemini-cli" / "bundle" / "gemini.js",
    ]
    return find_binary(root, candidates, "Gemini CLI (bin/gemini)", executable=False)


# -- configuration ------------------------------------------------------------------------------


def command_hook(command: str, *, timeout_ms: int = 30_000, name: str | None = None) -> dict[str, Any]:
    """A command hook: the hook input on stdin, the JSON answer on stdout; the timeout in milliseconds."""
    hook: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout_ms}
    if name:
        hook["name"] = name
    return hook


def matcher(tool_pattern: str | None, *hooks: Mapping[str, Any], sequential: bool = False) -> dict[str, Any]:
    """One entry of an event's list: the hooks that run for tools whose name the regex is found in."""
    entry: dict[str, Any] = {"hooks": [dict(h) for h in hooks]}
    if tool_pattern is not None:
        entry["matcher"] = tool_pattern
    if sequential:
        entry["sequential"] = True
    return entry


def deny(reason: str) -> dict[str, Any]:
    """The BeforeTool output that blocks the call; the model sees `reason`."""
    return {"decision": "deny", "reason": reason}


ALLOW: dict[str, Any] = {}
"""The BeforeTool output that lets the call run."""

BASE_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "ui": {"hideTips": True, "hideBanner": True},
}
"""settings.json of every run: see the module's docstring."""


def make_gemini_home(
    root: Path,
    *,
    hooks: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """A `HOME` under `root` with `.gemini/settings.json`: BASE_SETTINGS, `settings` (merged one
    level deep) and `hooks`."""
    home = root / "gemini-home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    content: dict[str, Any] = json.loads(json.dumps(BASE_SETTINGS))
    for key, value in (settings or {}).items():
        if isinstance(value, Mapping) and isinstance(content.get(key), dict):
            content[key].update(value)
        else:
            content[key] = value
    if hooks is not None:
        content["hooks"] = dict(hooks)
    (home / ".gemini" / "settings.json").write_text(json.dumps(content, indent=2))
    return home


# -- running ----------------------------------------------------------------------------------


def gemini_env(home: Path, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing inherited but PATH and the locale.

    Hooks inherit it (less what the CLI's redaction removes): `extra` is the way to hand a hook
    variables.
    """
    values = {"GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": "scripted-test-key", "NO_COLOR": "1", "CI": "1"}
    return cli_env(home, values, extra)


def run_gemini(
    binary: Path,
    project: Path,
    prompt: str,
    *,
    home: Path,
    base_url: str,
    args: Sequence[str] = ("--yolo",),
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> CliRun:
    """Run `gemini -p PROMPT ARGS` in `project` with `home` (see make_gemini_home) against `base_url`.

    It exits 0 after the model's final answer, whatever the hooks decided; stdout holds the
    answer (JSON with `args=["--yolo", "--output-format", "json"]`), stderr the CLI's notes,
    including "Error executing tool run_shell_command: Tool execution blocked: R".
    """
    command = [str(binary), "-p", prompt, *args]
    if binary.suffix == ".js":
        command.insert(0, "node")
    return run_process(command, cwd=project, env=gemini_env(home, base_url, env), timeout=timeout)
