"""What lists and pages show about calls and runs, worked out in Python so templates only display it.

Badges, verdicts in words and one-line summaries. What a viewer may do with a call or a run
is `approvals.calls.options`, the schema-driven edit form `approvals_web.forms` and the run's
conversation `approvals_web.timeline`. Nothing here touches the database or the request.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from approvals.calls.states import CallStatus, RunStatus
from approvals.store.models import ToolCallRow

_STATUS_TONE: dict[str, str] = {
    CallStatus.PENDING: "warn",
    CallStatus.OUTCOME_UNKNOWN: "bad",
    CallStatus.APPROVED: "ok",
    CallStatus.EXECUTING: "warn",
    CallStatus.SUCCEEDED: "ok",
    CallStatus.ANSWERED: "ok",
    CallStatus.DENIED: "bad",
    CallStatus.EXPIRED: "bad",
    CallStatus.FAILED: "bad",
    CallStatus.CANCELLED: "bad",
    RunStatus.COMPLETED: "ok",
    RunStatus.AWAITING_APPROVAL: "warn",
}
"""Badge colours; a status not named here (ready, resuming) gets none."""
CALL_STATUSES = tuple(CallStatus)
RUN_STATUSES = tuple(RunStatus)


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


def expiring_soon(call: ToolCallRow, seconds: int, now: dt.datetime | None = None) -> bool:
    if call.expires_at is None or not call.is_open:
        return False
    now = now or dt.datetime.now(dt.UTC)
    return (call.expires_at - now).total_seconds() <= seconds
