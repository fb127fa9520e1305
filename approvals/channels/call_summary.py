"""A call as a reviewer reads it away from the inbox: one text shared by Slack messages and mails.

Arguments become short `name: value` lines (long values cut, at most a few lines, with a
note of what was left out), and a decided call becomes one sentence saying who decided
it and how. The full arguments are always one link away, on the call's page.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..calls.states import CallStatus
from ..policy.evaluation import RULE_ACTOR_PREFIX
from ..store.models import ToolCallRow

__all__ = ("ArgumentLine", "argument_lines", "call_url", "decided_sentence", "quorum_sentence")

MAX_LINES = 8
MAX_VALUE = 200


@dataclass(frozen=True)
class ArgumentLine:
    name: str
    value: str


def argument_lines(args: Any, *, max_lines: int = MAX_LINES, max_value: int = MAX_VALUE) -> list[ArgumentLine]:
    """`name: value` lines, sorted by name; the last line says how many arguments were left out."""
    if not isinstance(args, dict):
        return [ArgumentLine("arguments", _cut(_text(args), max_value))]
    names = sorted(args)
    shown = names if len(names) <= max_lines else names[: max_lines - 1]
    lines = [ArgumentLine(name, _cut(_text(args[name]), max_value)) for name in shown]
    if len(shown) < len(names):
        lines.append(ArgumentLine("…", f"{len(names) - len(shown)} more on the call's page"))
    return lines


def call_url(public_url: str | None, call_id: str) -> str | None:
    """The call's page in the inbox, or None when the inbox's address is unknown."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/calls/{quote(call_id, safe='')}"


def decided_sentence(call: ToolCallRow) -> str:
    """What became of a call that no longer waits, e.g. "Approved by alice" or "Denied by bob: too large"."""
    who = _who(call.decided_by)
    status = call.status
    if status in (CallStatus.APPROVED, CallStatus.EXECUTING, CallStatus.SUCCEEDED, CallStatus.FAILED):
        edited = " with edited arguments" if call.verdict == "edit" else ""
        return f"Approved{edited} by {who}" if who else f"Approved{edited}"
    if status == CallStatus.DENIED:
        reason = f": {call.denial_reason}" if call.denial_reason else ""
        return f"Denied by {who}{reason}" if who else f"Denied{reason}"
    if status == CallStatus.ANSWERED:
        return f"Answered by {who}" if who else "Answered"
    if status == CallStatus.EXPIRED:
        return "Expired: nobody decided in time"
    if status == CallStatus.CANCELLED:
        return "Cancelled: the run was cancelled"
    return f"Waiting ({status})"


def quorum_sentence(approvals: int, required: int, approvers: list[str]) -> str:
    """E.g. "1 of 2 approvals (alice): one more needed"."""
    names = f" ({', '.join(approvers)})" if approvers else ""
    left = required - approvals
    return f"{approvals} of {required} approvals{names}: {left} more needed"


def _who(actor: str | None) -> str | None:
    if actor and actor.startswith(RULE_ACTOR_PREFIX):
        return f"rule {actor.removeprefix(RULE_ACTOR_PREFIX)}"
    return actor


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
