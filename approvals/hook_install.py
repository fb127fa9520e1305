"""`approvals hook install <cli>`: merge our pre-tool hook into a coding CLI's settings, keeping the rest.

Each CLI keeps its hooks in its own JSON file. We add one entry (or replace the one we
added before, found by its command or URL), leave every other setting and hook as it is,
refuse a file that is not a JSON object rather than overwrite it, and write the result
atomically. What the user must still do (set the token, trust the hook) is returned as text.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ("InstallError", "Installed", "install_hook")

_OURS = ("/api/hooks/", " hook claude-code", " hook codex", " hook gemini", " hook cursor")
"""What marks a hook entry as ours: the HTTP hook's URL, or the command client's arguments."""


class InstallError(Exception):
    """The settings cannot be merged (not JSON, not an object, a hook list of another shape); nothing was written."""


@dataclass(frozen=True)
class Installed:
    path: Path
    replaced: bool
    """Whether an entry of ours was there already (and is now the new one)."""
    next_steps: list[str]


def _command(cli: str, wait: float, fallback: str | None, url: str) -> str:
    """The command client, by the interpreter that runs this, so the CLI finds it without a PATH."""
    words = [sys.executable, "-m", "approvals", "hook", cli, "--wait", f"{wait:g}", "--url", url]
    if fallback:
        words += ["--fallback", fallback]
    return shlex.join(words)


def _is_ours(hook: Any) -> bool:
    text = json.dumps(hook) if isinstance(hook, dict) else ""
    return "approvals" in text and any(mark in text for mark in _OURS)


def _merge_matcher_groups(settings: dict[str, Any], event: str, matcher: str, hook: dict[str, Any], path: Path) -> bool:
    """Claude Code's shape, also Codex's and Gemini's: hooks.<event> is a list of {matcher, hooks: [...]}."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: 'hooks' is not an object; fix it by hand, nothing was written")
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
        raise InstallError(f"{path}: 'hooks.{event}' is not a list of objects; nothing was written")
    replaced = False
    emptied = []
    for group in groups:
        inner = group.get("hooks")
        if isinstance(inner, list) and any(_is_ours(entry) for entry in inner):
            replaced = True
            group["hooks"] = [entry for entry in inner if not _is_ours(entry)]
            if not group["hooks"]:
                emptied.append(group)  # it held only ours
    groups[:] = [group for group in groups if not any(group is gone for gone in emptied)]
    groups.append({"matcher": matcher, "hooks": [hook]})
    return replaced


def _merge_before_and_after(settings: dict[str, Any], hook: dict[str, Any], path: Path, matcher: str) -> bool:
    """Claude Code's and Codex's shape: the hook asks before a matching tool runs and reports after it
    (`PostToolUse`), which settles the call it ran."""
    replaced = _merge_matcher_groups(settings, "PreToolUse", matcher, hook, path)
    return _merge_matcher_groups(settings, "PostToolUse", matcher, hook, path) or replaced


def _merge_gemini(settings: dict[str, Any], hook: dict[str, Any], path: Path, matcher: str) -> bool:
    """Gemini CLI's hook, and the token let through its environment redaction (on under GitHub Actions), which
    would otherwise hand the hook no APPROVALS_TOKEN: its name contains TOKEN."""
    replaced = _merge_matcher_groups(settings, "BeforeTool", matcher, hook, path)
    _merge_matcher_groups(settings, "AfterTool", matcher, hook, path)  # reports how it went
    redaction = settings.setdefault("security", {})
    if isinstance(redaction, dict):
        redaction = redaction.setdefault("environmentVariableRedaction", {})
    if not isinstance(redaction, dict) or not isinstance(redaction.setdefault("allowed", []), list):
        raise InstallError(f"{path}: 'security.environmentVariableRedaction' is not as Gemini CLI writes it")
    if "APPROVALS_TOKEN" not in redaction["allowed"]:
        redaction["allowed"].append("APPROVALS_TOKEN")
    return replaced


def _merge_cursor(settings: dict[str, Any], event: str, hook: dict[str, Any], path: Path) -> bool:
    """Cursor's shape: {version: 1, hooks: {<event>: [{command, ...}]}}."""
    settings.setdefault("version", 1)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: 'hooks' is not an object; nothing was written")
    entries = hooks.setdefault(event, [])
    if not isinstance(entries, list):
        raise InstallError(f"{path}: 'hooks.{event}' is not a list; nothing was written")
    kept = [entry for entry in entries if not _is_ours(entry)]
    replaced = len(kept) != len(entries)
    entries[:] = [*kept, hook]
    return replaced


@dataclass(frozen=True)
class _Target:
    default_path: Callable[[Path, bool], Path]
    """The settings file for a project folder, or the user's (`True`)."""
    merge: Callable[[dict[str, Any], dict[str, Any], Path, str], bool]
    """Merge the hook entry into the settings for tools matching the pattern; whether it replaced one of ours."""
    matcher: str | None
    """The tools hooked by default (a regular expression of tool names); None: the CLI hooks every tool."""
    entry: Callable[[str, float, str | None, bool], dict[str, Any]]
    """The hook entry for (url, wait, fallback, http)."""
    next_steps: list[str]


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _claude_entry(url: str, wait: float, fallback: str | None, http: bool) -> dict[str, Any]:
    timeout = int(wait + 30)
    if http:
        query = f"wait={wait:g}" + (f"&fallback={fallback}" if fallback else "")
        return {
            "type": "http",
            "url": f"{url.rstrip('/')}/api/hooks/claude-code?{query}",
            "timeout": timeout,
            "headers": {"Authorization": "Bearer $APPROVALS_TOKEN"},
            "allowedEnvVars": ["APPROVALS_TOKEN"],
            "onFailure": "block",  # Claude Code runs the tool when a hook fails, unless told to block
        }
    command = _command("claude-code", wait, fallback, url)
    return {"type": "command", "command": command, "timeout": timeout, "onFailure": "block"}


def _command_entry(cli: str, timeout_scale: int) -> Callable[[str, float, str | None, bool], dict[str, Any]]:
    def entry(url: str, wait: float, fallback: str | None, http: bool) -> dict[str, Any]:
        return {
            "type": "command",
            "command": _command(cli, wait, fallback, url),
            "timeout": int(wait + 30) * timeout_scale,
        }

    return entry


def _cursor_entry(url: str, wait: float, fallback: str | None, http: bool) -> dict[str, Any]:
    return {"command": _command("cursor", wait, fallback, url), "timeout": int(wait + 30), "failClosed": True}


_FIRST_STEP = (
    "Create a token that may only ask (`approvals tokens create <name> --role reviewer --scope calls:ask`) "
    "and export it as APPROVALS_TOKEN where the CLI runs."
)
_TARGETS: dict[str, _Target] = {
    "claude-code": _Target(
        default_path=lambda project, user: (_home() if user else project) / ".claude" / "settings.json",
        merge=_merge_before_and_after,
        matcher="Bash",
        entry=_claude_entry,
        next_steps=[
            _FIRST_STEP,
            "The hook blocks the tool when it gets no decision (onFailure: block). Removing that setting makes "
            "Claude Code run the tool whenever our server cannot be reached.",
        ],
    ),
    "codex": _Target(
        default_path=lambda project, user: Path(os.environ.get("CODEX_HOME") or _home() / ".codex") / "hooks.json",
        merge=_merge_before_and_after,
        matcher="Bash",
        entry=_command_entry("codex", 1),
        next_steps=[_FIRST_STEP, "Codex runs a hook only once you trust it: start codex and accept the new hook."],
    ),
    "gemini": _Target(
        default_path=lambda project, user: (_home() if user else project) / ".gemini" / "settings.json",
        merge=_merge_gemini,
        matcher="run_shell_command",
        entry=_command_entry("gemini", 1000),
        next_steps=[_FIRST_STEP],
    ),
    "cursor": _Target(
        default_path=lambda project, user: (_home() if user else project) / ".cursor" / "hooks.json",
        merge=lambda settings, hook, path, matcher: (
            _merge_cursor(settings, "preToolUse", hook, path) | _merge_cursor(settings, "postToolUse", hook, path)
        ),
        matcher=None,
        entry=_cursor_entry,
        next_steps=[_FIRST_STEP, "Restart Cursor so it reads the new hook."],
    ),
}
CLIS = tuple(_TARGETS)


def install_hook(
    cli: str,
    *,
    url: str,
    wait: float,
    fallback: str | None = None,
    project: Path | None = None,
    user: bool = False,
    path: Path | None = None,
    http: bool = True,
    matcher: str | None = None,
) -> Installed:
    """Merge our hook for `cli` into its settings (`path`, else the project's or the user's file), for the tools
    `matcher` names (a regular expression; by default the shell tool: `Bash`, `run_shell_command`)."""
    target = _TARGETS.get(cli)
    if target is None:
        raise InstallError(f"No hook for {cli!r}; known: {', '.join(CLIS)}")
    settings_path = path or target.default_path((project or Path.cwd()).resolve(), user)
    settings: Any = {}
    if settings_path.exists():
        try:
            settings = json.loads(settings_path.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise InstallError(f"{settings_path} is not JSON ({exc}); fix it by hand, nothing was written") from None
    if not isinstance(settings, dict):
        raise InstallError(f"{settings_path} does not hold a JSON object; nothing was written")
    if matcher is not None and target.matcher is None:
        raise InstallError(f"{cli} hooks every tool; it takes no --matcher")
    entry = target.entry(url, wait, fallback, http and cli == "claude-code")
    replaced = target.merge(settings, entry, settings_path, matcher or target.matcher or "")
    _write_atomically(settings_path, json.dumps(settings, indent=2) + "\n")
    return Installed(settings_path, replaced, list(target.next_steps))


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o777)  # keep who may read the settings
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
