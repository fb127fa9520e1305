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
import math
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
_RESERVED = frozenset(
    {"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if", "import",
     "let", "loop", "package", "namespace", "return", "var", "void", "while"}
)  # fmt: skip
"""CEL's keywords and reserved words: not a field's name after a dot."""
_INT_MIN, _INT_MAX, _UINT_MAX = -(2**63), 2**63 - 1, 2**64 - 1


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
    """A JSON value written as a CEL literal (JSON's strings, numbers, lists and maps are CEL's too).

    Strings keep their characters (CEL's `\\u` escapes take no UTF-16 surrogate pairs); an
    integer past CEL's `int` is a `uint` literal, or a double past that, as the bindings read it.
    """
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if _INT_MIN <= value <= _INT_MAX:
            return str(value)
        return f"{value}u" if 0 <= value <= _UINT_MAX else repr(float(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return json.dumps(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_string(str(k))}: {cel_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(cel_literal(item) for item in value) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _field(name: str) -> str:
    """`args.name`, or `args["name"]` for a name CEL would read as something else (`in`, `null`, `a-b`)."""
    return f"args.{name}" if _IDENTIFIER.fullmatch(name) and name not in _RESERVED else f"args[{_string(name)}]"


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
        engine=[_literal_glob(engine)],
        agent=[_literal_glob(agent)],
        tool=[_literal_glob(tool)],
        session=session if remember.scope is RememberScope.SESSION else None,
        when=condition,
        effect=Effect.ALLOW,
        expires_at=now + remember.duration,
    )


def _literal_glob(name: str) -> str:
    """A tool name as a pattern that matches only it (glob characters in brackets)."""
    return re.sub(r"([*?\[])", r"[\1]", name)
