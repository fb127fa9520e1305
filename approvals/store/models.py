"""The tables: runs, their append-only messages, tool calls, decisions, audit events, users, tokens.

Typed SQLAlchemy 2.x declarations only; the operations live in the store's aggregates (`approvals.store`).
Timestamps are stored timezone-aware (UTC) on both SQLite and PostgreSQL, and every
constraint has a conventional name so alembic migrations stay stable.
"""

from __future__ import annotations

import datetime as dt
import json
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    and_,
    cast,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..calls import clock
from ..calls.states import APPROVAL_VERDICTS, OPEN_CALL_STATUSES, CallStatus, Role, RunStatus

E = TypeVar("E", bound=StrEnum)


def json_text(value: Any) -> str:
    """JSON as written (not \\u-escaped), for both drivers: a search for "Lindenstraße" finds it on SQLite too."""
    return json.dumps(value, ensure_ascii=False)


NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JsonValue = JSON().with_variant(JSONB(), "postgresql")

MIGRATION_ONLY_INDEXES = frozenset({"ix_tool_calls_args_trgm"})
"""Indexes created by migrations alone (PostgreSQL-only expression indexes), not by the models."""


def include_in_autogenerate(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic filter: leave the migration-only indexes out of model comparisons."""
    return not (type_ == "index" and name in MIGRATION_ONLY_INDEXES)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware datetime that comes back aware (UTC) from SQLite too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use timezone-aware UTC")
        return value.astimezone(dt.UTC) if value is not None else None

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value


class StatusText(TypeDecorator[E], Generic[E]):
    """A status stored as its text and read back as its enum member, so a typo fails loudly, not silently."""

    impl = String(20)
    cache_ok = True

    def __init__(self, enum: type[E]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


def utcnow() -> dt.datetime:
    """Now, on the clock in use (`approvals.calls.clock`)."""
    return clock.now()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class RunRow(Base):
    """One agent run, from its prompt to its output."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    agent_name: Mapped[str] = mapped_column(String(200))
    """The agent, or for a gate the source that asks (an app, a coding CLI, an MCP client)."""
    engine: Mapped[str] = mapped_column(String(40), default="native", server_default="native")
    """The engine the run belongs to (`approvals.engines`): who continues it once its calls are decided."""
    session_id: Mapped[str | None] = mapped_column(String(200))
    """A gate's session (the caller's own id for it): its calls gather in this run."""
    status: Mapped[RunStatus] = mapped_column(StatusText(RunStatus))
    prompt: Mapped[str | None] = mapped_column(Text)
    deps: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    output: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    error: Mapped[str | None] = mapped_column(Text)
    started_by: Mapped[str | None] = mapped_column(String(200))
    trace_context: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    """The W3C trace context (`traceparent`, `tracestate`) the run started in: a resume hours later joins its trace."""
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        Index("ix_runs_status_updated_at", "status", "updated_at"),
        Index("ix_runs_agent_name_created_at", "agent_name", "created_at"),
        Index("ix_runs_created_at_id", "created_at", "id"),
    )


class MessageRow(Base):
    """One message of a run's history; rows are only ever appended."""

    __tablename__ = "messages"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    format_version: Mapped[int] = mapped_column(Integer)
    data: Mapped[Any] = mapped_column(JsonValue)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class RunStateRow(Base):
    """A `SNAPSHOT` engine's run state (`approvals.calls.engine_state.Snapshot`): its framework's own document.

    One row a run, replaced by the write that pauses or ends a turn, in the transaction that
    stores that turn's messages and calls: the document and the history never disagree.
    """

    __tablename__ = "run_states"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    """The engine's version of the document's shape."""
    data: Mapped[Any] = mapped_column(JsonValue)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


STORED_TEXT = cast(MessageRow.data, Text).label("data")
"""A message as its stored JSON text, unparsed: `load_stored_history` parses a whole history in one pass."""


class ToolDefinitionRow(Base):
    """A tool definition as the model saw it, stored once per version."""

    __tablename__ = "tool_definitions"

    version: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    definition: Mapped[Any] = mapped_column(JsonValue)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class ToolCallRow(Base):
    """A tool call that needed a person: its validated arguments, status and outcome."""

    __tablename__ = "tool_calls"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    tool_call_id: Mapped[str] = mapped_column(String(200))
    agent_name: Mapped[str] = mapped_column(String(200))
    tool_name: Mapped[str] = mapped_column(String(64))
    tool_version: Mapped[str] = mapped_column(ForeignKey("tool_definitions.version"))
    args: Mapped[Any] = mapped_column(JsonValue)
    args_digest: Mapped[str] = mapped_column(String(64))
    status: Mapped[CallStatus] = mapped_column(StatusText(CallStatus))
    reason: Mapped[str | None] = mapped_column(Text)
    """Why the tool asked for approval, when it said."""
    context: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    """What the caller said about the call's circumstances (working directory, requester, ...), for reviewers."""
    approvals_required: Mapped[int] = mapped_column(Integer, default=1)
    idempotent: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    verdict: Mapped[str | None] = mapped_column(String(20))
    """The deciding verdict: approve, edit, deny, answer or expire."""
    decided_by: Mapped[str | None] = mapped_column(String(200))
    decided_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    denial_reason: Mapped[str | None] = mapped_column(Text)
    override_args: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    override_digest: Mapped[str | None] = mapped_column(String(64))
    answer: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    result: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    rule_name: Mapped[str | None] = mapped_column(String(100))
    """The standing rule that decided the call, or said who decides it (`approvals.policy`)."""
    rule_version: Mapped[int | None] = mapped_column(Integer)
    approver_groups: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    """The groups whose members may approve the call (a rule routed it); None: any reviewer."""
    requested_by: Mapped[str | None] = mapped_column(String(200))
    """Who asked for the call: a gate's asking token or user, or the starter of a worker's run.
    They may never approve it (`call_options`)."""
    trace_context: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    """The W3C trace context of the call's `approvals.call.request` span: its decision, hand-out and outcome
    join that trace, in whichever process (`approvals.tracing`). None when nothing was traced."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    @hybrid_property
    def current_digest(self) -> str:
        """The digest of the arguments the call would run with: a reviewer's edit, else the model's."""
        return self.override_digest or self.args_digest

    @current_digest.inplace.expression
    @classmethod
    def _current_digest_sql(cls) -> ColumnElement[str]:
        return func.coalesce(cls.override_digest, cls.args_digest)

    @property
    def current_args(self) -> dict[str, Any]:
        """The arguments the call would run with: a reviewer's edit, else the model's validated ones."""
        args = self.override_args if self.override_args is not None else self.args
        return args if isinstance(args, dict) else {}

    @hybrid_property
    def is_open(self) -> bool:
        """Whether the call waits for a person (and so may take a verdict)."""
        return self.status in OPEN_CALL_STATUSES

    @is_open.inplace.expression
    @classmethod
    def _is_open_sql(cls) -> ColumnElement[bool]:
        return cls.status.in_(OPEN_CALL_STATUSES)

    __table_args__ = (
        UniqueConstraint("run_id", "tool_call_id", name="uq_tool_calls_run_id_tool_call_id"),
        Index("ix_tool_calls_status_created_at_id", "status", "created_at", "id"),
        Index("ix_tool_calls_tool_name_status_created_at", "tool_name", "status", "created_at"),
        Index("ix_tool_calls_agent_name_status_created_at", "agent_name", "status", "created_at"),
        Index("ix_tool_calls_status_expires_at", "status", "expires_at"),
        # lookups by run use the unique (run_id, tool_call_id) index: no separate run_id index to write
    )


STANDING_APPROVAL = text(
    "verdict IN (" + ", ".join(f"'{verdict}'" for verdict in APPROVAL_VERDICTS) + ") AND consumed_at IS NULL"
)
"""The decisions that count towards a call's quorum, as DDL text (`DecisionRow.is_standing` in queries)."""


class DecisionRow(Base):
    """One reviewer's verdict on one call; several approvals make a quorum."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"))
    actor: Mapped[str] = mapped_column(String(200))
    verdict: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    args_digest: Mapped[str] = mapped_column(String(64))
    """Digest of the arguments this verdict was given for."""
    edited_args: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    answer: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    channel: Mapped[str | None] = mapped_column(String(20))
    """Where the reviewer decided: `web`, `api`, `slack` or `email` (None: before channels were recorded)."""
    consumed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """When the approval was used up by executing the call."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    @hybrid_property
    def is_standing(self) -> bool:
        """An approval that counts towards the quorum: approve or edit, not yet used up by running the call."""
        return self.verdict in APPROVAL_VERDICTS and self.consumed_at is None

    @is_standing.inplace.expression
    @classmethod
    def _is_standing_sql(cls) -> ColumnElement[bool]:
        return and_(cls.verdict.in_(APPROVAL_VERDICTS), cls.consumed_at.is_(None))

    __table_args__ = (
        # one standing approval per reviewer and arguments: what a quorum counts, so it needs different people.
        # Denials, answers and approvals a run used up are free: a reviewer may deny a call they approved, and
        # settle one whose outcome became unknown after their approval ran.
        Index(
            "uq_decisions_standing_approval",
            "call_id",
            "actor",
            "args_digest",
            unique=True,
            sqlite_where=STANDING_APPROVAL,
            postgresql_where=STANDING_APPROVAL,
        ),
        Index("ix_decisions_call_id", "call_id"),
    )


STANDING = DecisionRow.is_standing
"""`DecisionRow.is_standing` for queries; `STANDING_APPROVAL` is the same two conditions as DDL text."""


class AuditEventRow(Base):
    """An append-only record of a state change, chained by hash to the one before."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(50))
    subject_type: Mapped[str] = mapped_column(String(20))
    subject_id: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str | None] = mapped_column(String(32))
    agent_name: Mapped[str | None] = mapped_column(String(200))
    tool_name: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_audit_events_at", "at"),
        Index("ix_audit_events_actor_at", "actor", "at"),
        Index("ix_audit_events_subject", "subject_type", "subject_id"),
        Index("ix_audit_events_action_at", "action", "at"),
        Index("ix_audit_events_run_id", "run_id"),
        Index("ix_audit_events_tool_name_id", "tool_name", "id"),  # audit search by tool, newest first (0024)
    )


class UserRow(Base):
    """A person who logs in: viewer, reviewer or admin."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(300))
    role: Mapped[Role] = mapped_column(String(20))
    groups: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    email: Mapped[str | None] = mapped_column(String(320), unique=True)
    """Where calls routed to the user are mailed (lowercase); also maps a Slack user whose verified e-mail it is."""
    slack_user_id: Mapped[str | None] = mapped_column(String(40), unique=True)
    """The Slack member id (`U…`) linked to this user by an admin or by the user: their clicks in Slack are theirs."""
    external_id: Mapped[str | None] = mapped_column(String(200), unique=True)  # SCIM externalId (issue 40)
    scim_profile: Mapped[Any] = mapped_column(JsonValue, nullable=True)  # SCIM attributes kept as sent (issue 40)


class ApiTokenRow(Base):
    """A bearer token: a user's own (`username`), or a service's; only its hash is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[Role] = mapped_column(String(20))
    scopes: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    username: Mapped[str | None] = mapped_column(String(200))
    """The person the token acts as; None for a service identity, which may not approve."""
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class WebhookCursorRow(Base):
    """How far delivery to one webhook URL got, and which process delivers to it now (a lease).

    The audit log is the outbox: `last_event_id` is the last audit event delivered to the URL
    (or passed over as not a webhook event), so nothing after it is lost across restarts. The
    lease makes one process at a time the URL's deliverer, whatever number of web processes run.
    """

    __tablename__ = "webhook_cursors"

    endpoint: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the URL: URLs often carry a token, so the URL itself is not stored."""
    site: Mapped[str] = mapped_column(String(300))
    """Scheme and host of the URL, for people reading the table."""
    last_event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    """Failed tries of the event after the cursor; 0 once it is delivered."""
    last_error: Mapped[str | None] = mapped_column(Text)
    """The latest failure or refusal, kept after delivery recovers."""
    last_error_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebSessionRow(Base):
    """A reviewer's login in the browser; the cookie carries a random id, the table only its hash.

    A session counts while `revoked_at` is empty and `expires_at` is ahead: logout revokes one,
    a password, role or enabled-state change revokes all of the user's (issue 14).
    """

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the id in the cookie."""
    username: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_web_sessions_username", "username"),)


class LoginThrottleRow(Base):
    """Failed logins for one account or one client address, and its lockout if any (issue 14).

    Shared by every web process through the database. `failures` counts within the window
    that began at `window_start`; reaching the limit locks the key until `locked_until`,
    for longer with each of `lockouts`.
    """

    __tablename__ = "login_throttle"

    key: Mapped[str] = mapped_column(String(220), primary_key=True)
    """`account:<username>` or `address:<client address>`."""
    failures: Mapped[int] = mapped_column(Integer, default=0)
    window_start: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    lockouts: Mapped[int] = mapped_column(Integer, default=0)
    locked_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class ConversationRecordRow(Base):
    """A chat app's conversation (pydantic-ai's `ConversationRecord`): where its history ends and what it carries.

    `run_id` links the inbox run that holds the calls the conversation waits on; the run's
    messages after the first `synced_messages` join the conversation when it is next read.
    """

    __tablename__ = "conversation_records"

    conversation_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    scope: Mapped[str | None] = mapped_column(String(200))
    head_id: Mapped[str | None] = mapped_column(String(64))
    revision: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    usage: Mapped[Any] = mapped_column(JsonValue)
    deferred_tool_requests: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    forked_from: Mapped[str | None] = mapped_column(String(200))
    forked_at: Mapped[str | None] = mapped_column(String(64))
    branches: Mapped[Any] = mapped_column(JsonValue)
    format_version: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    synced_messages: Mapped[int] = mapped_column(Integer, default=0)
    """How many of the linked run's messages the conversation already holds."""

    __table_args__ = (
        Index("ix_conversation_records_scope_updated_at", "scope", "updated_at"),
        Index("ix_conversation_records_updated_at", "updated_at"),
    )


class ConversationEntryRow(Base):
    """One message of a conversation's log, pointing at the one before it; forks and branches share entries."""

    __tablename__ = "conversation_entries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    parent_id: Mapped[str | None] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(20))
    message: Mapped[Any] = mapped_column(JsonValue)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (Index("ix_conversation_entries_parent_id", "parent_id"),)


class PolicyRuleRow(Base):
    """One version of a standing rule (`approvals.policy`); a change appends a version, never updates one.

    The rules in force are each name's latest version unless it is `deleted`; the largest
    `id` is the rules' revision, so a process knows its compiled rules are current by
    reading one number.
    """

    __tablename__ = "policy_rules"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    """`standing` (an admin's) or `remembered` (a reviewer's approve-and-remember)."""
    definition: Mapped[Any] = mapped_column(JsonValue)
    """The rule as written (`RuleSpec.definition`)."""
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    author: Mapped[str] = mapped_column(String(200))
    author_groups: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    """Why the condition last failed to evaluate for a call (that call then asked a person)."""
    last_error_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("name", "version", name="uq_policy_rules_name_version"),)


class ChannelMessageRow(Base):
    """A message about a call sent to a reviewer channel (a Slack post, a mail): what to update once it is decided.

    One row per call, channel, destination and purpose, so a delivery tried again after a
    crash finds what it already sent instead of sending it twice.
    """

    __tablename__ = "channel_messages"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(String(20))
    """`slack` or `email`."""
    destination: Mapped[str] = mapped_column(String(320))
    """A Slack conversation id (`C…`, `U…`) or an e-mail address."""
    purpose: Mapped[str] = mapped_column(String(20))
    """`pending`, `reminder` or `escalation`."""
    ref: Mapped[str | None] = mapped_column(String(200))
    """What names the sent message there: a Slack message's `ts`, a mail's Message-ID."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        UniqueConstraint("call_id", "channel", "destination", "purpose", name="uq_channel_messages_once"),
    )


class EmailLinkRow(Base):
    """A single-use link in a mail: decides one call one way, as one recipient, for the arguments the mail showed."""

    __tablename__ = "email_links"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the link's token: the token itself is only in the mail."""
    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"))
    username: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(20))
    """`approve` or `deny`."""
    args_digest: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (Index("ix_email_links_call_id", "call_id"),)


class CallFollowUpRow(Base):
    """A reminder or an escalation that was made for a call: the primary key makes each happen once, in any process."""

    __tablename__ = "call_follow_ups"

    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[str] = mapped_column(String(20), primary_key=True)
    """`remind` or `escalate`."""
    done_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


# --- Issue 39, part B: signed checkpoints of the audit chain (approvals.audit.checkpoints) ---


class AuditCheckpointRow(Base):
    """A signed statement of the audit chain's head; a copy also lives outside the database (a sink).

    `seq` is the primary key, so two processes cannot both make checkpoint n: the second insert fails.
    """

    __tablename__ = "audit_checkpoints"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    """The last event the checkpoint covers (the chain's head when it was made)."""
    event_hash: Mapped[str] = mapped_column(String(64))
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    key_id: Mapped[str] = mapped_column(String(64))
    statement: Mapped[str] = mapped_column(Text)
    """The canonical JSON that was signed, byte for byte."""
    signature: Mapped[str] = mapped_column(String(128))
    """Ed25519 signature of `statement`, base64."""

    __table_args__ = (Index("ix_audit_checkpoints_event_id", "event_id"),)


# --- Issue 39, part C: audit sinks (approvals.audit.sinks); their event cursors are rows of webhook_cursors ---


class AuditSinkCheckpointRow(Base):
    """How far a sink outside the database (syslog, a webhook) got through the signed checkpoints.

    A directory can be listed to learn which checkpoints it holds; syslog and a webhook cannot
    be asked, so the last checkpoint each accepted is kept here, and a restart sends the rest.
    """

    __tablename__ = "audit_sink_checkpoints"

    sink: Mapped[str] = mapped_column(String(64), primary_key=True)
    """The sink's name, as configured."""
    last_seq: Mapped[int] = mapped_column(Integer)
    """The last checkpoint the sink accepted (0: none yet)."""
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- Issue 39, part D: audit retention (approvals.audit.retention): where old events were archived and deleted ---


class AuditCutRow(Base):
    """A cut: the events up to a signed checkpoint's head were written to a bundle, then deleted.

    Verification of what remains starts from the newest cut: the first remaining event must follow
    its head, and the cut must be the checkpoint it names, signature and all (`statement`, `signature`).
    """

    __tablename__ = "audit_cuts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checkpoint_seq: Mapped[int] = mapped_column(Integer, unique=True)
    event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    """The last event archived: the checkpoint's head."""
    event_hash: Mapped[str] = mapped_column(String(64))
    first_event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    events: Mapped[int] = mapped_column(Integer)
    statement: Mapped[str] = mapped_column(Text)
    """The signed checkpoint at the cut, byte for byte, with its signature: the cut proves itself."""
    signature: Mapped[str] = mapped_column(String(128))
    before: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    """The date asked for: events before it were archived, up to the newest checkpoint before it."""
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(200))
    bundle: Mapped[str] = mapped_column(String(1000))
    bundle_sha256: Mapped[str] = mapped_column(String(64))


# --- Issue 40, single sign-on (approvals.store.people.identities): provider identities and sign-ins under way ---


class UserIdentityRow(Base):
    """A user as an OpenID provider knows them: (issuer, subject) names one user, for good."""

    __tablename__ = "user_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_user_identities_issuer_subject"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    issuer: Mapped[str] = mapped_column(String(500))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_login_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class OidcStateRow(Base):
    """A sign-in between the redirect and the callback (state, nonce, PKCE verifier); the callback deletes it."""

    __tablename__ = "oidc_states"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


# --- Issue 40, SCIM provisioning (approvals.store.people.provisioning): the groups a provider created ---


class ScimGroupRow(Base):
    """A group an identity provider created: its stable SCIM id and `externalId`.

    Membership is not here: it is each user's `groups` list, the one routing reads; this row
    only lets a group exist (and keep its id) while nobody is in it.
    """

    __tablename__ = "scim_groups"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    external_id: Mapped[str | None] = mapped_column(String(200), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- Issue 41, metrics that stay cheap (approvals.store.metric_rollups): the database keeps the figures' sums ---


class MetricDeltaRow(Base):
    """One change to a figure `/metrics` reports, written by a trigger in the transaction of the change.

    Triggers (`approvals.store.metric_schema`) see every write, the hot path's and a raw UPDATE's
    alike; a scrape folds the deltas into `metric_rollups` and deletes them, so the figures cost
    the same to read at any length of history.
    """

    __tablename__ = "metric_deltas"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    metric: Mapped[str] = mapped_column(String(20))
    key1: Mapped[str | None] = mapped_column(String(200))
    key2: Mapped[str | None] = mapped_column(String(200))
    key3: Mapped[str | None] = mapped_column(String(200))
    amount: Mapped[int] = mapped_column(Integer)
    """+1 when a row starts to count under these keys, -1 when it stops."""
    value: Mapped[float | None] = mapped_column(Float)
    """A histogram's observation in seconds (None for plain counts)."""
    at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """When the audit event happened (resumes and the events that settle them)."""


class MetricRollupRow(Base):
    """A figure's running sum under one set of labels: a count, or one cell of a histogram and its sum."""

    __tablename__ = "metric_rollups"

    metric: Mapped[str] = mapped_column(String(20), primary_key=True)
    key1: Mapped[str] = mapped_column(String(200), primary_key=True)
    key2: Mapped[str] = mapped_column(String(200), primary_key=True)
    key3: Mapped[str] = mapped_column(String(200), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    """A histogram's cell (0 for plain counts); the last cell is past the last bound."""
    count: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[float] = mapped_column(Float)


class MetricOpenResumeRow(Base):
    """A run a worker resumed whose resume has not settled yet: its duration ends at the run's next settle event."""

    __tablename__ = "metric_open_resumes"

    run_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    resumed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class MetricFoldRow(Base):
    """The one row a fold locks, so two processes scraping at once never fold a delta twice."""

    __tablename__ = "metric_folds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    deltas: Mapped[int] = mapped_column(BigInteger, default=0)
    """Deltas folded so far."""
    folded_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
