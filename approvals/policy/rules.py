"""A standing rule: which calls it matches, on what condition, and what it decides.

One definition (`RuleSpec`) serves every way rules are written (a rules file, the JSON API,
the web form, approve-and-remember), so each is checked the same way and refused with the
same messages. Stored rules are versions: a change is a new version, never an update, and
the version that decided a call is named on the call and in the audit log.

Precedence, as in Claude Code's permissions: **deny over ask over allow**. Among several
`ask` rules, the strictest decides (the most approvals, then the shortest time to decide,
then the first name). A remembered rule (`Kind.REMEMBERED`) stands in for its author's one
approval, so it decides only calls its author alone could approve (`evaluation`).

An `ask` rule may also say how its calls are followed up while nobody decides them
(`remind_before`, `escalate_after`, `escalate_to`; `follow_ups`): each given value replaces
the deployment's default, and a duration of 0 turns that step off.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from .conditions import InvalidCondition, compile_condition

__all__ = (
    "EFFECT_RANK",
    "Effect",
    "InvalidRule",
    "Kind",
    "MAX_APPROVALS",
    "MAX_TTL",
    "RuleSpec",
    "parse_duration",
    "rule_problems",
)

MAX_APPROVALS = 20
MAX_TTL = 366 * 24 * 3600.0
"""The longest time to decide a rule may give (a year, as a gate's `approval_ttl`): beyond, no date exists."""
RULE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class Effect(StrEnum):
    """What a matching rule decides."""

    ALLOW = "allow"
    """Approved by the rule: the call runs without asking anyone."""
    DENY = "deny"
    """Denied by the rule, with a reason the model reads."""
    ASK = "ask"
    """People decide: how many approvals, from which groups, within what time."""


EFFECT_RANK = {Effect.DENY: 3, Effect.ASK: 2, Effect.ALLOW: 1}
"""Precedence: the highest rank among matching rules decides."""


class Kind(StrEnum):
    """Where a rule came from."""

    STANDING = "standing"
    """Written by an admin (a form, the API, a rules file)."""
    REMEMBERED = "remembered"
    """Made by a reviewer who approved a call and asked to remember it: narrow, with an expiry."""


class InvalidRule(ValueError):
    """A rule definition that cannot be saved; `problems` lists every one, each naming its field."""

    def __init__(self, problems: list[str], subject: str = "rule") -> None:
        self.problems = problems
        super().__init__(f"Invalid {subject}: " + "; ".join(problems))


def parse_duration(value: Any) -> float | None:
    """Seconds from a number or a text such as `90`, `30m`, `4h`, `2d`, `1w`; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text such as 30m, 4h, 2d")
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.match(str(value))
    if found is None:
        raise ValueError(f"{value!r} is not a duration: use seconds or a text such as 30m, 4h, 2d")
    return float(found.group(1)) * _SECONDS[found.group(2) or "s"]


def _patterns(value: Any) -> Any:
    """A pattern or a list of them; an empty or missing one matches anything."""
    if value is None or value == "":
        return ["*"]
    if isinstance(value, str):
        return [value]
    return value


Patterns = Annotated[list[str], BeforeValidator(_patterns)]


class RuleSpec(BaseModel):
    """A rule as its author writes it; what a rules file holds for each rule."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    name: str = Field(description="a short stable id: lowercase letters, digits, '.', '_' and '-'")
    description: str = ""
    engine: Patterns = Field(default_factory=lambda: ["*"], description="engines it applies to (globs)")
    agent: Patterns = Field(default_factory=lambda: ["*"], description="agents or gate sources (globs)")
    tool: Patterns = Field(default_factory=lambda: ["*"], description="tool names (globs)")
    session: str | None = Field(default=None, description="one session only (remembered rules)")
    when: str = Field(default="", description="a CEL condition; empty: always")
    effect: Effect
    reason: str = Field(default="", description="a denial's reason, which the model reads; a note otherwise")
    approvals: int = Field(default=1, ge=1, le=MAX_APPROVALS, description="ask: approvals needed")
    groups: list[str] = Field(default_factory=list, description="ask: the groups whose members may approve")
    ttl: Annotated[float | None, BeforeValidator(parse_duration)] = Field(
        default=None, description="ask: seconds people have to decide"
    )
    remind_before: Annotated[float | None, BeforeValidator(parse_duration)] = Field(
        default=None,
        description="ask: remind the reviewers this long before the call expires; 0: never; empty: default",
    )
    escalate_after: Annotated[float | None, BeforeValidator(parse_duration)] = Field(
        default=None, description="ask: escalate a call nobody decided this long after it was asked; 0: never"
    )
    escalate_to: list[str] | None = Field(
        default=None, description="ask: the groups escalated to (told, and allowed to approve); empty: the default"
    )
    expires_at: dt.datetime | None = Field(default=None, description="when the rule stops applying")
    enabled: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not RULE_NAME.fullmatch(name):  # not `match`: "$" also matches before a final newline
            raise ValueError("use 1 to 100 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
        return name

    @field_validator("engine", "agent", "tool")
    @classmethod
    def _globs(cls, patterns: list[str]) -> list[str]:
        cleaned = [pattern.strip() for pattern in patterns]
        if not cleaned or any(not pattern or len(pattern) > 200 for pattern in cleaned):
            raise ValueError("each pattern is 1 to 200 characters ('*' matches anything)")
        return cleaned

    @field_validator("groups")
    @classmethod
    def _groups(cls, groups: list[str]) -> list[str]:
        return _group_names(groups)

    @field_validator("escalate_to")
    @classmethod
    def _escalation_groups(cls, groups: list[str] | None) -> list[str] | None:
        if groups is not None and not groups:
            raise ValueError("name at least one group; to turn escalation off, set escalate_after: 0")
        return None if groups is None else _group_names(groups)

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, ttl: float | None) -> float | None:
        if ttl is not None and not 0 < ttl <= MAX_TTL:  # NaN too
            raise ValueError(f"give people a positive time to decide, at most {MAX_TTL / 86400:g}d")
        return ttl

    @field_validator("remind_before", "escalate_after")
    @classmethod
    def _follow_up_delay(cls, seconds: float | None) -> float | None:
        if seconds is not None and not 0 <= seconds <= MAX_TTL:  # NaN too
            raise ValueError(f"give a time from 0 (never) to {MAX_TTL / 86400:g}d, e.g. 15m, 1h")
        return seconds

    @field_validator("when")
    @classmethod
    def _condition(cls, when: str) -> str:
        if when:
            try:
                compile_condition(when)
            except InvalidCondition as exc:
                raise ValueError(str(exc)) from None
        return when

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, expires_at: dt.datetime | None) -> dt.datetime | None:
        if expires_at is not None and expires_at.tzinfo is None:
            return expires_at.replace(tzinfo=dt.UTC)
        return expires_at

    @model_validator(mode="after")
    def _effect_fields(self) -> RuleSpec:
        if self.effect is Effect.DENY and not self.reason:
            raise ValueError("a deny rule needs a reason: the model reads it")
        if self.effect is not Effect.ASK:
            extra = [
                name
                for name, value in (
                    ("approvals", self.approvals != 1),
                    ("groups", self.groups),
                    ("ttl", self.ttl),
                    ("remind_before", self.remind_before is not None),
                    ("escalate_after", self.escalate_after is not None),
                    ("escalate_to", self.escalate_to is not None),
                )
                if value
            ]
            if extra:
                raise ValueError(f"{', '.join(extra)} apply to ask rules only")
        return self

    def matches_names(self, *, engine: str, agent: str, tool: str, session: str) -> bool:
        """Whether the rule's patterns take a call of this engine, agent, tool and session (not its condition)."""
        return (
            _any_match(self.engine, engine)
            and _any_match(self.agent, agent)
            and _any_match(self.tool, tool)
            and (self.session is None or self.session == session)
        )

    def definition(self) -> dict[str, Any]:
        """The rule as stored and exported: JSON, with defaults left out so files stay short."""
        return self.model_dump(mode="json", exclude_defaults=True)


def _group_names(groups: list[str]) -> list[str]:
    bad = [group for group in groups if not GROUP_NAME.fullmatch(group)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a group name (letters, digits, '.', '_', '-')")
    return sorted(set(groups))


def _any_match(patterns: list[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def rule_problems(exc: ValidationError) -> list[str]:
    """A validation error as one sentence per problem, each naming its field."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = f"unknown key: a rule takes {', '.join(RuleSpec.model_fields)}"
        problems.append(f"{where}: {message}" if where else message)
    return problems


def parse_rule(data: Any) -> RuleSpec:
    """A rule from plain data (a file's entry, an API body); `InvalidRule` lists every problem."""
    try:
        return RuleSpec.model_validate(data)
    except ValidationError as exc:
        name = data.get("name") if isinstance(data, dict) else None
        raise InvalidRule(rule_problems(exc), f"rule {name!r}" if isinstance(name, str) else "rule") from None
