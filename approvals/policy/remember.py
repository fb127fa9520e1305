"""Approve and remember: a narrow rule made from one approved call.

The reviewer approves a call and asks that calls like it be allowed for a while: for this
session or this agent, the same tool, with the arguments they pin (all, some, or a
condition they write, prefilled from the pinned ones). The rule can only narrow: it names
the call's engine, agent and tool; it expires; it allows only what its author alone could
approve (`evaluation`). An admin may widen it afterwards by editing it as any rule.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .rules import Effect, RuleSpec

__all__ = ("MAX_REMEMBER", "RememberScope", "Remember", "pinned_condition", "remembered_rule")

MAX_REMEMBER = dt.timedelta(days=90)
"""The longest a remembered rule may stand; an admin writes a standing rule for longer."""
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class RememberScope(StrEnum):
    SESSION = "session"
    """Calls of the same session (a gate's session, or the same run)."""
    AGENT = "agent"
    """Calls of the same agent, in any session."""


@dataclass(frozen=True)
class Remember:
    """What a reviewer asks to remember along with their approval."""

    scope: RememberScope
    duration: dt.timedelta
    pinned: Sequence[str] | None = None
    """Argument names whose values must match; None with no `condition`: all of them."""
    condition: str | None = None
    """A CEL condition instead of pinned values (a form prefills it from them)."""

    def problems(self) -> list[str]:
        found = []
        if not dt.timedelta(0) < self.duration <= MAX_REMEMBER:
            found.append(f"remember for a positive period of at most {MAX_REMEMBER.days} days")
        return found


def cel_literal(value: Any) -> str:
    """A JSON value written as a CEL literal (JSON's strings, numbers, lists and maps are CEL's too)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str | int | float):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {cel_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(cel_literal(item) for item in value) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _field(name: str) -> str:
    return f"args.{name}" if _IDENTIFIER.match(name) else f"args[{json.dumps(name)}]"


def pinned_condition(args: Mapping[str, Any], pinned: Sequence[str] | None) -> str:
    """A condition that holds for these values of the pinned arguments (all of them when None); "" for none."""
    names = list(args) if pinned is None else [name for name in pinned if name in args]
    terms = [f"{_field(name)} == {cel_literal(args[name])}" for name in names]
    if pinned is None:
        terms.append(f"size(args) == {len(args)}")  # all pinned: no argument added either
    return " && ".join(terms)


def remembered_rule(
    *,
    engine: str,
    agent: str,
    tool: str,
    session: str,
    args: Mapping[str, Any],
    author: str,
    call_id: str,
    remember: Remember,
    now: dt.datetime,
) -> RuleSpec:
    """The rule `remember` asks for, made from the call it was asked on."""
    condition = remember.condition if remember.condition is not None else pinned_condition(args, remember.pinned)
    return RuleSpec(
        name=f"remembered-{uuid.uuid4().hex[:12]}",
        description=f"remembered by {author} when approving call {call_id}",
        engine=[engine],
        agent=[agent],
        tool=[_literal_glob(tool)],
        session=session if remember.scope is RememberScope.SESSION else None,
        when=condition,
        effect=Effect.ALLOW,
        expires_at=now + remember.duration,
    )


def _literal_glob(name: str) -> str:
    """A tool name as a pattern that matches only it (glob characters in brackets)."""
    return re.sub(r"([*?\[])", r"[\1]", name)
