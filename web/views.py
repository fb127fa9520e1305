"""What lists and pages show about calls and runs, worked out in Python so templates only display it.

Badges, verdicts in words, one-line summaries and who has approved so far. The schema-driven
edit form lives in `web.forms` and the run's conversation in `web.timeline`. Nothing here
touches the database or the request.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from approvals.store.models import DecisionRow, ToolCallRow

_STATUS_TONE = {
    "pending": "warn",
    "outcome_unknown": "bad",
    "approved": "ok",
    "executing": "warn",
    "succeeded": "ok",
    "completed": "ok",
    "answered": "ok",
    "denied": "bad",
    "expired": "bad",
    "failed": "bad",
    "cancelled": "bad",
    "awaiting_approval": "warn",
    "ready": "",
    "resuming": "",
    "running": "",
}
CALL_STATUSES = (
    "pending",
    "outcome_unknown",
    "approved",
    "executing",
    "succeeded",
    "failed",
    "denied",
    "answered",
    "expired",
    "cancelled",
)
RUN_STATUSES = ("awaiting_approval", "ready", "resuming", "running", "completed", "failed", "cancelled")
OPEN_STATUSES = ("pending", "outcome_unknown")


_VERDICT_LABELS = {
    "approve": "approved",
    "edit": "edited and approved",
    "deny": "denied",
    "answer": "answered",
    "expire": "expired",
}


def tone(status: str | None) -> str:
    """The badge colour class for a status: ok, bad, warn or none."""
    return _STATUS_TONE.get(status or "", "")


def verdict_label(verdict: str | None) -> str:
    """A stored verdict as words: "edit" -> "edited and approved"."""
    return _VERDICT_LABELS.get(verdict or "", verdict or "")


def as_text(value: Any) -> str:
    """A value as a person reads it: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False)


# --- summaries -----------------------------------------------------------------------------


def summarize(args: Any, width: int = 110, *, schema: Mapping[str, Any] | None = None) -> str:
    """Arguments on one line: `key=value, ...` in the schema's order, shortened to `width` characters.

    (PostgreSQL's JSONB does not keep key order, so the order comes from the schema.)
    """
    if isinstance(args, dict):
        order = {name: i for i, name in enumerate((schema or {}).get("properties") or {})}
        keys = sorted(args, key=lambda k: (order.get(k, len(order)), k))
        parts = [f"{key}={_short(args[key])}" for key in keys]
        text = ", ".join(parts)
    else:
        text = _short(args)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if not value or " " in value or "," in value else value
    return json.dumps(value, ensure_ascii=False, default=str)


def effective_args(call: ToolCallRow) -> dict[str, Any]:
    """The arguments the call would run with: a reviewer's edit, else the model's validated arguments."""
    args = call.override_args if call.override_args is not None else call.args
    return args if isinstance(args, dict) else {}


def current_digest(call: ToolCallRow) -> str:
    """The digest an approval of what the page shows must carry."""
    return call.override_digest or call.args_digest


def expiring_soon(call: ToolCallRow, seconds: int, now: dt.datetime | None = None) -> bool:
    if call.expires_at is None or call.status not in OPEN_STATUSES:
        return False
    now = now or dt.datetime.now(dt.UTC)
    return (call.expires_at - now).total_seconds() <= seconds


def current_approvals(call: ToolCallRow, decisions: Sequence[DecisionRow]) -> list[str]:
    """Who approved the arguments as they stand now (the quorum count), oldest first."""
    digest = current_digest(call)
    seen: list[str] = []
    for decision in decisions:
        if (
            decision.verdict in ("approve", "edit")
            and decision.args_digest == digest
            and decision.consumed_at is None
            and decision.actor not in seen
        ):
            seen.append(decision.actor)
    return seen
