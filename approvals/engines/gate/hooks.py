"""The coding CLIs' pre-tool hooks: their input read into a `CallRequest`, an answer written in their format.

Each CLI asks before a tool runs and reads a decision back, each in its own JSON:

- **Claude Code** (`PreToolUse`, an HTTP or a command hook): `hookSpecificOutput` with
  `permissionDecision` allow, deny, ask or defer, a reason the model reads, and
  `updatedInput` to run the tool with other input.
- **Codex CLI** (`PreToolUse`, command hooks): only a deny is honoured, in Claude Code's
  shape; allow is exactly `{}` (any other field makes the hook fail, and the tool run).
- **Gemini CLI** (`BeforeTool`, command hooks): `{"decision": "deny", "reason": ...}`; allow `{}`.
- **Cursor** (`preToolUse`, `beforeShellExecution`, `beforeMCPExecution`): `permission`
  allow, deny or ask, `user_message`, `agent_message`, and `updated_input` on `preToolUse`.

What cannot be said in a CLI's format is said as a denial the model can act on: an edit a
CLI cannot apply, a reviewer's answer in the tool's place, a call still waiting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ...calls.canonical import canonical_json, digest
from ...calls.requests import CallRequest, ReportedOutcome
from ...policy.evaluation import RULE_ACTOR_PREFIX
from .answers import Decision, GateAnswer

__all__ = (
    "FORMATS",
    "Fallback",
    "HookFormat",
    "HookInputError",
    "ReportedOutcome",
    "Permission",
    "Verdict",
    "hook_format",
    "verdict_for",
)


class HookInputError(ValueError):
    """The hook's input is not a tool call this format can ask about; the message says why (the model reads it)."""


class Permission(StrEnum):
    """What a hook tells its CLI, in the words of Claude Code's `permissionDecision`."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"
    """Ask the person at the terminal instead (interactive sessions)."""
    DEFER = "defer"
    """End a headless run; `claude -p --resume <session>` asks again (Claude Code only)."""


class Fallback(StrEnum):
    """What a hook answers when nobody decided before it had to answer."""

    DENY = "deny"
    """Deny, naming the waiting call and where to decide it, so the model can say so and retry."""
    ASK = "ask"
    DEFER = "defer"


@dataclass(frozen=True)
class Verdict:
    """A hook's answer before it is written in a CLI's format."""

    permission: Permission
    reason: str | None = None
    updated_input: Mapping[str, Any] | None = None


_SHELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "description": "The shell command to run."},
        "description": {"type": "string"},
        "timeout": {"type": "number"},
        "run_in_background": {"type": "boolean"},
    },
    "required": ["command"],
}
"""A shell command tool's input: what an edit of it is validated against (other fields pass through)."""
_GEMINI_SHELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "directory": {"type": "string"},
    },
    "required": ["command"],
}
_MAX_INPUT_TEXT = 200


MAX_RESULT_TEXT = 16_000
"""The most of a tool's output a post-tool hook's report keeps with the call (as JSON text)."""


@dataclass(frozen=True)
class HookFormat:
    """One CLI's hook: the events it asks on, how to read its input and write an answer."""

    cli: str
    """The name in URLs and on the command line (`claude-code`)."""
    engine: str
    """The gate engine its sessions belong to (`approvals.engines.gate.HOOK_ENGINES`)."""
    events: tuple[str, ...]
    fallbacks: tuple[Fallback, ...]
    """The fallbacks its CLI understands; the first is the default."""
    shell_tools: Mapping[str, Mapping[str, Any]]
    """Its shell tools by name, with the schema their input is validated against."""
    applies_edits: bool
    """Whether it can run a tool with a reviewer's edited input."""
    after_events: tuple[str, ...] = ()
    """The events it reports a tool's outcome on, once the tool ran (`reported`)."""

    def reports_outcome(self, body: Any) -> bool:
        """Whether this hook input reports how a tool went, rather than asks before it runs."""
        return isinstance(body, Mapping) and body.get("hook_event_name") in self.after_events

    def reported(self, body: Mapping[str, Any]) -> ReportedOutcome:
        """What a post-tool hook input says: which call (by its key, else its tool and input) and its result."""
        event = _text(body, "hook_event_name")
        asked_on = "beforeShellExecution" if event == "afterShellExecution" else event  # Cursor's shell hooks
        tool_name, tool_input, _ = self._tool_call(body, asked_on)
        session_id = _text(body, "session_id" if "session_id" in body else "conversation_id")
        response = body.get("tool_response", body.get("output"))
        text = canonical_json(response) if response is not None else None
        result = response if text is None or len(text) <= MAX_RESULT_TEXT else {"truncated": text[:MAX_RESULT_TEXT]}
        return ReportedOutcome(
            engine=self.engine,
            source=self.cli,
            session_id=session_id,
            tool_call_id=_first_text(body, "tool_use_id", "toolUseId"),
            tool_name=tool_name,
            args_digest=digest(tool_input),
            result=result,
        )

    def request(self, body: Any, *, approval_ttl: float | None = None) -> CallRequest:
        """The call this hook input asks about; `HookInputError` says what is wrong with it."""
        if not isinstance(body, Mapping):
            raise HookInputError("The hook input must be a JSON object")
        event = _text(body, "hook_event_name")
        if event not in self.events:
            raise HookInputError(f"{self.cli} hooks ask on {', '.join(self.events)}, not on {event!r}")
        tool_name, tool_input, context = self._tool_call(body, event)
        session_id = _text(body, "session_id" if "session_id" in body else "conversation_id")
        key = _first_text(body, "tool_use_id", "toolUseId") or _derived_key(self.cli, body, tool_name, tool_input)
        schema = self.shell_tools.get(tool_name)
        description = ""
        if schema is not None and isinstance(tool_input.get("description"), str):
            description = tool_input["description"]
        return CallRequest(
            engine=self.engine,
            source=self.cli,
            session_id=session_id,
            tool_name=tool_name,
            args=tool_input,
            tool_call_id=key,
            json_schema=dict(schema) if schema is not None else None,
            description=description,
            context=context,
            approval_ttl=approval_ttl,
            same_arguments_same_call=True,
        )

    def _tool_call(self, body: Mapping[str, Any], event: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        context = {
            name: body[name]
            for name in ("cwd", "permission_mode", "transcript_path", "workspace_roots", "model", "turn_id")
            if name in body and isinstance(body[name], str | list)
        }
        context["hook_event_name"] = event
        if event == "beforeShellExecution":  # Cursor names no tool: the command is the call
            return "Shell", {"command": _text(body, "command")}, context
        tool_name = _text(body, "tool_name")
        tool_input = body.get("tool_input")
        if isinstance(tool_input, str):  # Cursor's MCP hook sends the input as JSON text
            try:
                tool_input = json.loads(tool_input)
            except ValueError:
                raise HookInputError("tool_input is text that is not JSON") from None
        if not isinstance(tool_input, Mapping):
            raise HookInputError("tool_input must be a JSON object")
        return tool_name, dict(tool_input), context

    def write(self, verdict: Verdict) -> dict[str, Any]:
        """`verdict` as this CLI reads it (an HTTP hook's body, or a command hook's standard output)."""
        permission = verdict.permission
        if permission is Permission.DEFER and Fallback.DEFER not in self.fallbacks:
            permission = Permission.DENY
        if permission is Permission.ASK and Fallback.ASK not in self.fallbacks:
            permission = Permission.DENY
        if self.cli == "claude-code":
            output: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": permission.value}
            if verdict.reason:
                output["permissionDecisionReason"] = verdict.reason
            if permission is Permission.ALLOW and verdict.updated_input is not None:
                output["updatedInput"] = dict(verdict.updated_input)
            return {"hookSpecificOutput": output}
        if self.cli == "codex":
            if permission is Permission.ALLOW:
                return {}
            reason = (verdict.reason or "Denied by approvals").rstrip(". ")  # Codex adds ". Command: ..."
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason,
                }
            }
        if self.cli == "gemini":
            if permission is Permission.ALLOW:
                return {}
            return {"decision": "deny", "reason": verdict.reason or "Denied by approvals."}
        cursor: dict[str, Any] = {"permission": permission.value}
        if verdict.reason:
            cursor["agent_message"] = verdict.reason
            cursor["user_message"] = verdict.reason
        if permission is Permission.ALLOW and verdict.updated_input is not None:
            cursor["updated_input"] = dict(verdict.updated_input)
        return cursor

    def denial(self, reason: str) -> dict[str, Any]:
        """A denial for `reason` in this CLI's format: what every refusal of bad input is."""
        return self.write(Verdict(Permission.DENY, reason))


FORMATS: dict[str, HookFormat] = {
    hook.cli: hook
    for hook in (
        HookFormat(
            cli="claude-code",
            engine="claude_code",
            events=("PreToolUse",),
            fallbacks=(Fallback.DENY, Fallback.ASK, Fallback.DEFER),
            shell_tools={"Bash": _SHELL_SCHEMA},
            applies_edits=True,
            after_events=("PostToolUse",),
        ),
        HookFormat(
            cli="codex",
            engine="codex",
            events=("PreToolUse",),
            fallbacks=(Fallback.DENY,),
            shell_tools={"Bash": _SHELL_SCHEMA, "shell": _SHELL_SCHEMA},
            applies_edits=False,
            after_events=("PostToolUse",),
        ),
        HookFormat(
            cli="gemini",
            engine="gemini",
            events=("BeforeTool",),
            fallbacks=(Fallback.DENY,),
            shell_tools={"run_shell_command": _GEMINI_SHELL_SCHEMA},
            applies_edits=False,
            after_events=("AfterTool",),
        ),
        HookFormat(
            cli="cursor",
            engine="cursor",
            events=("preToolUse", "beforeShellExecution", "beforeMCPExecution"),
            fallbacks=(Fallback.ASK, Fallback.DENY),
            shell_tools={"Shell": _SHELL_SCHEMA},
            applies_edits=True,
            after_events=("postToolUse", "afterShellExecution", "afterMCPExecution"),
        ),
    )
}
"""Every hook format by its CLI's name."""


def hook_format(cli: str) -> HookFormat:
    """The format of `cli`; `KeyError` names the known ones."""
    try:
        return FORMATS[cli]
    except KeyError:
        raise KeyError(f"No hook format {cli!r}; known: {', '.join(FORMATS)}") from None


def verdict_for(
    hook: HookFormat, answer: GateAnswer, *, fallback: Fallback, call_url: str, asked: Mapping[str, Any] | None = None
) -> Verdict:
    """What the hook answers for a call's decision, or, while it still waits, the fallback.

    `asked` is the input the CLI is about to run: when a reviewer's edit is exactly that (the
    model asked again with the edited input), the CLI may run it as it is.
    """
    decision = answer.decision
    if decision is Decision.APPROVED:
        if not answer.edited or (asked is not None and digest(dict(asked)) == digest(answer.args)):
            return Verdict(Permission.ALLOW)
        if hook.applies_edits:
            return Verdict(Permission.ALLOW, "A reviewer edited the input.", updated_input=answer.args)
        edited = canonical_json(answer.args)
        return Verdict(
            Permission.DENY,
            f"A reviewer approved this call only with other input: {edited}. "
            "Ask again with exactly that input if it still does what you need.",
        )
    if decision is Decision.DENIED:
        who = "A standing rule" if (answer.decided_by or "").startswith(RULE_ACTOR_PREFIX) else "A reviewer"
        return Verdict(Permission.DENY, f"{who} denied this call: {answer.reason or 'no reason given'}")
    if decision is Decision.ANSWERED:
        return Verdict(
            Permission.DENY,
            "A reviewer answered in the tool's place, so it did not run. Their answer: "
            + canonical_json(answer.answer),
        )
    if decision is Decision.EXPIRED:
        return Verdict(Permission.DENY, answer.reason)
    if fallback is Fallback.DENY:
        return Verdict(
            Permission.DENY,
            f"This call waits for a person's approval: {call_url} . It was not run. "
            "Tell the user, and try the same call again once it is approved.",
        )
    return Verdict(Permission(fallback.value), f"Waiting for approval: {call_url}")


def _text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise HookInputError(f"The hook input has no {name}")
    if len(value) > _MAX_INPUT_TEXT and name not in ("command",):
        raise HookInputError(f"{name} is longer than {_MAX_INPUT_TEXT} characters")
    return value


def _first_text(body: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = body.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _derived_key(cli: str, body: Mapping[str, Any], tool_name: str, tool_input: Mapping[str, Any]) -> str:
    """An idempotency key for a CLI that sends no tool call id: the same input of the same moment.

    A turn's id or a timestamp tells two identical commands apart; without either, every ask is a new call.
    """
    moment = _first_text(body, "timestamp", "generation_id", "turn_id")
    if moment is None:
        import uuid

        return uuid.uuid4().hex
    text = canonical_json([cli, body.get("session_id") or body.get("conversation_id"), moment, tool_name, tool_input])
    return hashlib.sha256(text.encode()).hexdigest()[:40]
