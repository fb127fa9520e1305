"""Questions asked of the log as query strings: one parser for the page, the API, the exports and the CLI.

The filters are plain words (`actor=alice&verdict=approved&since=7d`), so a question is a link
a reviewer can bookmark or send; `QUESTIONS` are the ones asked most, one click each. Times
are ISO dates or times (UTC unless they say), or a span back from now (`30m`, `12h`, `7d`, `2w`).
Bad input is a `UserError` naming the filter, never a failed query.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from ..calls import clock
from ..exceptions import UserError
from ..store.audit_log import ACTOR_KINDS, VERDICT_ACTIONS, AuditQuery

__all__ = ("FILTERS", "QUESTIONS", "Question", "parse_query", "parse_time", "questions_for")

FILTERS = (
    "since",
    "until",
    "actor",
    "by",
    "action",
    "verdict",
    "agent",
    "tool",
    "engine",
    "rule",
    "channel",
    "run",
    "text",
)
"""Every filter's name, in the order forms show them."""
_SPAN = re.compile(r"^(\d{1,5})\s*(m|h|d|w)$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")
_ACTION = re.compile(r"^[a-z_]{1,20}\.[a-z_]{1,30}$")
_TEXT_MOST = 200
_CHANGES = "rule.created,rule.changed,rule.deleted,user.created,user.updated,user.disabled,token.created,token.revoked"


def parse_time(value: str, name: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """An ISO date or time (UTC when it names no zone) or a span back from now ("7d")."""
    value = value.strip()
    if (span := _SPAN.match(value)) is not None:
        return (now or clock.now()) - dt.timedelta(**{_UNITS[span[2]]: int(span[1])})
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise UserError(
            f"{name} must be a date and time like 2026-01-31T14:00 (or a date, or a span back from now "
            f"like 12h, 7d or 2w), not {value[:40]!r}"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _name(value: str, name: str) -> str:
    if not _NAME.match(value):
        raise UserError(f"{name} must be 1 to 200 characters without control characters")
    return value


def parse_query(params: Mapping[str, str | None], *, now: dt.datetime | None = None) -> AuditQuery:
    """The filters given (empty ones are left out) as an `AuditQuery`; unknown values are a clear `UserError`."""
    given = {key: value.strip() for key, value in params.items() if key in FILTERS and value and value.strip()}
    since = parse_time(given["since"], "since", now=now) if "since" in given else None
    until = parse_time(given["until"], "until", now=now) if "until" in given else None
    if since and until and since >= until:
        raise UserError("since must be before until")
    kind = given.get("by")
    if kind is not None and kind not in ACTOR_KINDS:
        raise UserError(f"by must be one of {', '.join(ACTOR_KINDS)}; not {kind[:40]!r}")
    verdict = given.get("verdict")
    if verdict is not None and verdict not in VERDICT_ACTIONS:
        raise UserError(f"verdict must be one of {', '.join(VERDICT_ACTIONS)}; not {verdict[:40]!r}")
    actions = tuple(a.strip() for a in given.get("action", "").split(",") if a.strip())
    for action in actions:
        if not _ACTION.match(action):
            raise UserError(
                f"action must look like call.approved or run.completed (a comma-separated list); not {action[:40]!r}"
            )
    text = given.get("text")
    if text is not None and (len(text) > _TEXT_MOST or "\x00" in text):
        raise UserError(f"text must be at most {_TEXT_MOST} characters")
    return AuditQuery(
        since=since,
        until=until,
        actor=_name(given["actor"], "actor") if "actor" in given else None,
        actor_kind=kind,
        actions=actions,
        verdict=verdict,
        agent=_name(given["agent"], "agent") if "agent" in given else None,
        tool=_name(given["tool"], "tool") if "tool" in given else None,
        engine=_name(given["engine"], "engine") if "engine" in given else None,
        rule=_name(given["rule"], "rule") if "rule" in given else None,
        channel=_name(given["channel"], "channel") if "channel" in given else None,
        run_id=_name(given["run"], "run") if "run" in given else None,
        text=text,
    )


@dataclass(frozen=True, kw_only=True)
class Question:
    """A question the log answers in one click: its words and its filters."""

    title: str
    params: dict[str, str]

    @property
    def query_string(self) -> str:
        return urlencode(self.params)


QUESTIONS = (
    Question(title="Every edit", params={"verdict": "edited"}),
    Question(title="Every call a rule allowed", params={"by": "rule", "verdict": "approved"}),
    Question(title="Every call a rule denied", params={"by": "rule", "verdict": "denied"}),
    Question(title="Every denial this week", params={"verdict": "denied", "since": "7d"}),
    Question(title="Reminders and escalations", params={"action": "call.reminded,call.escalated"}),
    Question(title="What the system did today", params={"by": "system", "since": "1d"}),
    Question(title="Changes to rules, users and tokens", params={"action": _CHANGES}),
)
"""The questions asked most, as filters; `questions_for` adds those about a person or a tool."""


def questions_for(*, person: str | None = None, tool: str | None = None) -> list[Question]:
    """The saved questions, with those about `person` and `tool` (the page's current filters, or the viewer) first."""
    found = []
    if person:
        found.append(
            Question(
                title=f"What did {person} approve last week?",
                params={"actor": person, "verdict": "approved", "since": "7d"},
            )
        )
        found.append(Question(title=f"Everything {person} did today", params={"actor": person, "since": "1d"}))
    if tool:
        found.append(
            Question(
                title=f"Every call a rule allowed on {tool}",
                params={"by": "rule", "verdict": "approved", "tool": tool},
            )
        )
        found.append(Question(title=f"Every edit of {tool}", params={"verdict": "edited", "tool": tool}))
    return [*found, *QUESTIONS]
