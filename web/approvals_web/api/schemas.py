"""The JSON API's request and response bodies, and the checks on what clients send.

Request bodies forbid unknown fields, so a client cannot slip in an actor or a status: who
acts comes from authentication only. Text and JSON values are checked before they reach
the database (no NUL characters, lone surrogates or non-finite numbers, which PostgreSQL
and the canonical digests refuse), so bad input is a 422 problem rather than a 500.
Responses are read from store rows by `model_validate(row)` (`from_attributes`), so a
column is named once, in the response model; the API says `agent` and `tool` where the
tables say `agent_name` and `tool_name` (a validation alias).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.tools import ToolDefinition
from approvals.engines.view import ModelMessage
from approvals.exceptions import UserError
from approvals.policy import MAX_REMEMBER, RememberScope, parse_duration
from approvals.policy.rules import GROUP_NAME
from approvals.service import Call
from approvals.service import Decision as DecisionRead
from approvals.store.reviewer_identity import check_email, check_slack_user_id


def check_text(value: str) -> str:
    """Refuse text the database cannot store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise ValueError("text may not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


def check_json(value: Any) -> Any:
    """Refuse JSON values the database or the digests cannot store, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def iso_8601_only(value: Any) -> Any:
    """Refuse a text that is not an ISO 8601 date or date-time (pydantic alone also takes "0.5")."""
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("Input should be an ISO 8601 date-time, like 2026-11-23T15:00:00Z")
    return value


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("may not be blank")
    return value


def as_utc(value: dt.datetime) -> dt.datetime:
    """A datetime without a timezone is taken to be UTC."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


Text = Annotated[str, AfterValidator(check_text)]
JsonValue = Annotated[Any, AfterValidator(check_json)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(check_text)]
"""An id or name in a path or filter: a run, call, agent, tool, actor or action."""
UtcDatetime = Annotated[dt.datetime, BeforeValidator(iso_8601_only), AfterValidator(as_utc)]
"""A moment written as ISO 8601, as the schema says: not a bare number pydantic would read as Unix time."""
GroupName = Annotated[str, StringConstraints(pattern=GROUP_NAME.pattern)]
"""A group of users, as rules name them: letters, digits, '.', '_' and '-'."""


class FieldError(BaseModel):
    """One invalid field: where it is (`args.amount`, `query.limit`) and what is wrong."""

    loc: str
    msg: str


class Problem(BaseModel):
    """An RFC 9457 problem details object: every API error has this shape."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None
    """Invalid fields (422), each with its location and message."""
    decided_by: str | None = None
    """On a 409 for a decided call: who decided it."""
    status_now: str | None = None
    """On a 409: the status the call or run has now."""


# Requests


class Strict(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class StartRun(Strict):
    """Start a run of a registered agent."""

    agent: Name
    """The agent's registered name."""
    prompt: Annotated[str, StringConstraints(max_length=100_000), AfterValidator(check_text)]
    """The user prompt the run starts from."""
    deps: JsonValue = None
    """JSON data the agent's deps factory turns into its run dependencies."""


class ApproveVerdict(Strict):
    """Run the call with its current arguments."""

    verdict: Literal["approve"]
    args_digest: Name | None = None
    """The `current_args_digest` the client showed; refused with 409 if the arguments changed since."""


class DenyVerdict(Strict):
    """Do not run the call; the model reads the reason."""

    verdict: Literal["deny"]
    reason: Annotated[
        str, StringConstraints(max_length=10_000, pattern=r"\S"), AfterValidator(check_text), AfterValidator(not_blank)
    ]
    """Why not; the model reads it. It may not be blank."""


class EditVerdict(Strict):
    """Run the call with these arguments instead; they are validated by the tool's own validator."""

    verdict: Literal["edit"]
    args: Annotated[dict[str, Any], AfterValidator(check_json)]
    args_digest: Name | None = None
    """The `current_args_digest` of the arguments the edit started from."""


class AnswerVerdict(Strict):
    """Do not run the call; `content` is the result the model receives instead."""

    verdict: Literal["answer"]
    content: JsonValue


Decision = Annotated[ApproveVerdict | DenyVerdict | EditVerdict | AnswerVerdict, Field(discriminator="verdict")]


class ApproveAndRemember(Strict):
    """Approve a call, and allow calls like it without asking for a while: a narrow rule its author may revoke."""

    args_digest: Name | None = None
    """The `current_args_digest` the client showed; refused with 409 if the arguments changed since."""
    scope: RememberScope = RememberScope.SESSION
    """`session`: calls of the same session (or run); `agent`: calls of the same agent, in any session."""
    duration: Annotated[
        float, BeforeValidator(parse_duration), Field(gt=0, le=MAX_REMEMBER.total_seconds(), allow_inf_nan=False)
    ]
    """How long the rule stands: seconds, or a text such as `8h`, `7d` (at most 90 days)."""
    pinned: list[Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(check_text)]] | None = (
        None
    )
    """Top-level arguments whose values must match; null (with no `condition`): all of them, and no others."""
    condition: Annotated[str, StringConstraints(min_length=1, max_length=10_000), AfterValidator(check_text)] | None = (
        None
    )
    """A CEL condition over `args` (and `tool`, `agent`, `session`, ...) instead of `pinned`."""


class UserGroups(Strict):
    """A user's groups: which routed calls they may approve."""

    groups: Annotated[list[GroupName], Field(max_length=100)]


def _as_field_error(check: Callable[[str], str], value: str | None) -> str | None:
    """`check`'s cleaned value (None for empty), its `UserError` as the `ValueError` pydantic reports."""
    if not value:
        return None
    try:
        return check(value)
    except UserError as exc:
        raise ValueError(str(exc)) from None


class UserContact(Strict):
    """A user's e-mail address and Slack member id; a field left out stays as it is, null removes it."""

    email: Annotated[str | None, Field(max_length=320)] = None
    slack_user_id: Annotated[str | None, Field(max_length=40, description="e.g. U024BE7LH")] = None

    @field_validator("email")
    @classmethod
    def _email(cls, email: str | None) -> str | None:
        return _as_field_error(check_email, email)  # the store's rule; a refusal is a 422 like any bad field

    @field_validator("slack_user_id")
    @classmethod
    def _slack_user_id(cls, slack_user_id: str | None) -> str | None:
        return _as_field_error(check_slack_user_id, slack_user_id)


class Resume(Strict):
    """How to resume: wait here for the run (seconds), or leave it to the workers (null)."""

    wait: Annotated[float, Field(gt=0, le=60)] | None = None
    """Resume in this process and answer with the run's state after at most this many seconds."""


class Cancel(Strict):
    """Why a run is being stopped."""

    reason: Annotated[str, StringConstraints(max_length=10_000), AfterValidator(check_text)] | None = None


# Responses


class ActorOut(BaseModel):
    """Who the request is authenticated as."""

    id: str
    role: str
    groups: list[str]


class FromRow(BaseModel):
    """A response read from a store row's (or result's) attributes: `Model.model_validate(row)`."""

    model_config = ConfigDict(
        from_attributes=True,
        validate_by_name=True,  # and by alias: `CallDetail` is built from a validated `CallOut`'s fields
        validate_by_alias=True,
        json_schema_serialization_defaults_required=True,  # a derived field is still in every response
    )


class RunOut(FromRow):
    """A run: its status and, once it ended, its output or error."""

    id: str
    agent: str = Field(validation_alias="agent_name")
    """The agent, or for a gate the source that asks."""
    engine: str
    """Who continues the run once its calls are decided: a resumable engine's worker, or a gate's own agent."""
    session_id: str | None
    """A gate's session whose calls gather in the run."""
    status: RunStatus
    prompt: str | None
    output: Any
    error: str | None
    started_by: str | None
    message_count: int
    created_at: dt.datetime
    updated_at: dt.datetime


class RunPage(BaseModel):
    """One page of runs, newest first; pass `next_cursor` as `after` for the next."""

    items: list[RunOut]
    next_cursor: str | None


class RunMessages(BaseModel):
    """A run's stored message history, oldest first, in the lossless stored JSON shape."""

    run_id: str
    messages: list[ModelMessage]


class CallOut(FromRow):
    """A tool call that needed a person: validated arguments, status and outcome."""

    id: str
    run_id: str
    tool_call_id: str
    agent: str = Field(validation_alias="agent_name")
    tool: str = Field(validation_alias="tool_name")
    tool_version: str
    args: Any
    """The model's arguments, as validated by the tool's validator."""
    args_digest: str
    edited_args: Any = Field(validation_alias="override_args")
    """A reviewer's edited arguments, which replace `args` when the call runs."""
    edited_args_digest: str | None = Field(validation_alias="override_digest")
    current_args_digest: str = Field(validation_alias="current_digest")
    """Digest of the arguments an approval approves now: send it back as `args_digest`."""
    status: CallStatus
    reason: str | None
    """Why the tool asked for approval, when it said."""
    context: Any
    """What the caller said about the call's circumstances (a gate's working directory, requester, ...)."""
    approvals_required: int
    expires_at: dt.datetime | None
    verdict: str | None
    decided_by: str | None
    """A reviewer, or `rule:<name>` when a standing rule decided the call."""
    decided_at: dt.datetime | None
    denial_reason: str | None
    answer: Any
    result: Any
    rule: str | None = Field(validation_alias="rule_name")
    """The standing rule that decided the call or said who decides it."""
    rule_version: int | None
    """The version of `rule` that did."""
    approver_groups: list[str] | None
    """The groups a rule routed the call to: only their members approve it (null: any reviewer)."""
    requested_by: str | None = None
    """Who asked for the call (a gate's token or user, a run's starter): they may never approve it."""
    created_at: dt.datetime
    updated_at: dt.datetime


class CallList(BaseModel):
    """Calls, oldest first."""

    items: list[CallOut]


class CallPage(BaseModel):
    """One page of the inbox, oldest first, and how many calls have each status (same agent/tool filters)."""

    items: list[CallOut]
    next_cursor: str | None
    counts: dict[str, int] = Field(
        description="Calls by status; counting stops past 10,000: a status with more says 10001 (more than 10,000)."
    )


class ToolDefinitionOut(FromRow):
    """The tool definition the model saw when it made the call."""

    name: str
    description: str
    parameters_json_schema: dict[str, Any]
    strict: bool | None
    sequential: bool
    metadata: dict[str, Any] | None
    version: str


class DecisionOut(FromRow):
    """One reviewer's verdict on a call."""

    id: int
    actor: str
    verdict: str
    reason: str | None
    args_digest: str
    """Digest of the arguments this verdict was given for."""
    edited_args: Any
    answer: Any
    consumed_at: dt.datetime | None
    """When an approval was used up by running the call."""
    created_at: dt.datetime


class CallDetail(CallOut):
    """A call with the tool definition the model saw and the decisions made so far."""

    tool_definition: ToolDefinitionOut
    decisions: list[DecisionOut]

    @classmethod
    def build(cls, row: Call, definition: ToolDefinition, decisions: list[DecisionRead]) -> CallDetail:
        return cls(
            **dict(CallOut.model_validate(row)),
            tool_definition=ToolDefinitionOut.model_validate(definition),
            decisions=[DecisionOut.model_validate(d) for d in decisions],
        )


class RememberedRuleOut(BaseModel):
    """The rule an approve-and-remember made."""

    name: str
    version: int
    author: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    definition: dict[str, Any]
    """The rule as stored: its agent, tool, session and condition."""


class Remembered(BaseModel):
    """The approved call and the rule that now allows calls like it."""

    call: CallOut
    rule: RememberedRuleOut


class UserOut(FromRow):
    """A person who logs in, and the groups that say which routed calls they may approve."""

    username: str
    role: str
    groups: Annotated[list[str], BeforeValidator(lambda groups: groups or [])]
    disabled: bool
    created_at: dt.datetime
    email: str | None = None
    """Where calls routed to the user are mailed."""
    slack_user_id: str | None = None
    """The Slack member id whose clicks in Slack decide as this user."""


class UserList(BaseModel):
    items: list[UserOut]


class AuditEventOut(FromRow):
    """One audit event and its place in the hash chain."""

    id: int
    at: dt.datetime
    actor: str
    action: str
    subject_type: str
    subject_id: str
    run_id: str | None
    agent: str | None = Field(validation_alias="agent_name")
    tool: str | None = Field(validation_alias="tool_name")
    details: Any
    prev_hash: str
    hash: str
    summary: str | None = None
    """The event as one sentence (`approvals.audit.sentences`), as the audit page says it."""


class AuditPage(BaseModel):
    """One page of audit events, newest first."""

    items: list[AuditEventOut]
    next_cursor: str | None


class AuditVerificationOut(FromRow):
    """The result of recomputing the audit log's hash chain."""

    ok: bool
    checked: int
    head_hash: str
    """Hash of the last event: keep a copy elsewhere to detect a truncated tail later."""
    first_bad_id: int | None
    problem: str | None
