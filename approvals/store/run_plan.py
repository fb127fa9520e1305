"""The writes of a run's hot path, described once for both backends.

A worker's write to a run it holds (mark calls executing, append a step, pause, finish) is
a `RunWrite`: plain data saying what changes. `run_sql.write_steps` turns it into the
statements both databases execute: SQLite one by one (`apply_write`), PostgreSQL in a
pipeline (`backends.postgres.pg_run_write`). What only the database knows (which calls actually moved,
the run's agent and message count) the statements read themselves, and the audit events
are made from the rows they return, by the same code on both.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..calls import clock
from ..calls.engine_state import Snapshot
from ..calls.stored_history import dump_stored, stored_format
from ..calls.tools import DeferredToolCall, ToolDefinition
from ..exceptions import LeaseLost, NotFound
from ..policy.evaluation import NO_RULE, Outcome
from ..policy.outcomes import call_columns


def utcnow() -> dt.datetime:
    """Now, on the clock in use (`approvals.calls.clock`)."""
    return clock.now()


@dataclass(frozen=True)
class HeldRun:
    """A run this worker holds, as far as a write needs to know it."""

    id: str
    agent_name: str
    next_seq: int
    """Sequence number of the first message this write appends."""
    worker_id: str


@dataclass(frozen=True)
class ExecutedCall:
    """A call whose status a write just moved, with what its audit event needs."""

    id: str
    tool_call_id: str
    tool_name: str
    digest: str
    """The digest of the arguments it runs with (`ToolCallRow.current_digest`)."""


@dataclass(frozen=True)
class DecidedCall:
    """A call people decided, as much of it as the run needs to act on the verdict."""

    id: str
    tool_call_id: str
    status: str
    """approved, denied, expired or answered."""
    args_digest: str
    override_args: Any = None
    denial_reason: str | None = None
    answer: Any = None


RELEASED_DETAILS = {"reason": "the run stopped before the call ran; it runs when the run is retried"}
"""What the audit log says of a released call."""
HELD_RUN_COLUMNS = frozenset({"status", "output", "error", "lease_owner", "lease_expires_at"})
"""The run columns a worker's guarded write may set."""


@dataclass(frozen=True)
class RunEvent:
    """An audit event of a run write; the worker is its actor, and the run and its agent are filled in."""

    action: str
    subject_type: str
    subject_id: str
    tool_name: str | None = None
    details: dict[str, Any] | None = None
    actor: str | None = None
    """Who acts, when not the worker (a rule that decided a call)."""


@dataclass(frozen=True)
class Interrupted:
    """The run failed while calls were executing: the one that failed it, and why."""

    failed_tool_call_id: str | None
    error: str


@dataclass(kw_only=True)
class RunWrite:
    """One write by the worker holding a run, as data; each backend applies it in one transaction.

    Its audit events come out in this order: calls started, calls settled with their results,
    calls released, calls interrupted, then `events`.
    """

    run_id: str
    worker_id: str
    messages: Sequence[Any] = ()
    """Appended after the run's last stored message."""
    changes: dict[str, Any] = field(default_factory=dict)
    """Run columns to set (`HELD_RUN_COLUMNS`)."""
    start_executing: Sequence[str] | None = None
    """Approved calls (tool call ids) that are about to run: every one must be approved."""
    results: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """Executed calls' outcomes by tool call id: `("succeeded" | "failed", result)`; calls not executing are left."""
    released: Sequence[str] = ()
    """Calls marked executing that never ran (the run failed first): approved again, approvals standing."""
    interrupted: Interrupted | None = None
    tool_definitions: list[ToolDefinition] = field(default_factory=list)
    """Definitions the new calls need stored."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """New calls (`pending_call`): waiting for people, or decided by a rule."""
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """The approvals of new calls a rule allowed (`policy.outcomes.rule_decision`)."""
    events: list[RunEvent] = field(default_factory=list)
    announcements: list[tuple[str, str]] = field(default_factory=list)
    snapshot: Snapshot | None = None
    """A `SNAPSHOT` engine's run state after this write: it replaces the stored one."""
    rules_revision: int | None = None
    """The revision of the rules that decided the new calls: the write is refused (`RulesChanged`) if the rules
    changed since, so a worker decides by the rules it holds in memory without reading them first."""
    now: dt.datetime = field(default_factory=lambda: utcnow())

    def __post_init__(self) -> None:
        unknown = set(self.changes) - HELD_RUN_COLUMNS
        if unknown:
            raise ValueError(f"a held run's write cannot set {sorted(unknown)}")


def pending_call(
    request: DeferredToolCall,
    now: dt.datetime,
    outcome: Outcome = NO_RULE,
    trace_context: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A new call's own columns, as the rules' `outcome` leaves it; the write adds its run, agent and times.

    `trace_context`: the call's `approvals.call.request` span (`tracing.requesting_calls`), stored with it."""
    expires_at = now + dt.timedelta(seconds=request.approval_ttl) if request.approval_ttl else None
    return {
        "id": uuid.uuid4().hex,
        "tool_call_id": request.tool_call_id,
        "tool_name": request.tool_name,
        "tool_version": request.tool_def.version,
        "args": request.args,
        "args_digest": request.args_digest,
        "reason": request.reason,
        "idempotent": request.idempotent,
        "trace_context": trace_context,
        **call_columns(outcome, approvals_required=request.approvals_required, expires_at=expires_at, now=now),
    }


def message_rows(messages: Sequence[Any], now: dt.datetime) -> list[dict[str, Any]]:
    """A step's messages as stored, in order; the write numbers them after the run's stored ones."""
    version = stored_format(messages)
    return [
        {"kind": message.kind, "format_version": version, "data": dump_stored(message), "created_at": now}
        for message in messages
    ]


def tool_definition_row(definition: ToolDefinition, now: dt.datetime) -> dict[str, Any]:
    """A tool definition as stored: the parts the model saw, keyed by version."""
    return {
        "version": definition.version,
        "name": definition.name,
        "definition": {
            "name": definition.name,
            "description": definition.description,
            "parameters_json_schema": definition.parameters_json_schema,
            PARAMETERS_TEXT: json.dumps(definition.parameters_json_schema, ensure_ascii=False),
            "strict": definition.strict,
            "sequential": definition.sequential,
            "metadata": definition.metadata,
        },
        "created_at": now,
    }


PARAMETERS_TEXT = "parameters_json_text"
"""The schema again, as JSON text: PostgreSQL's JSONB reorders an object's keys, and a schema's
property order is the order a reviewer's form shows the arguments in. JSONB keeps a string as is."""


def tool_definition_from_row(stored: dict[str, Any]) -> ToolDefinition:
    """A stored definition, its schema's properties in the order the tool declared them."""
    fields = dict(stored)
    text = fields.pop(PARAMETERS_TEXT, None)
    if isinstance(text, str):
        fields["parameters_json_schema"] = json.loads(text)
    return ToolDefinition(**fields)


class RulesChanged(Exception):
    """A write whose calls were decided by rules that changed since: decide them again by the new rules."""


def lease_lost(run_id: str, worker_id: str, status: str | None) -> Exception:
    """The error for a guarded write that matched no row: no such run, or the worker's hold on it ended."""
    if status is None:
        return NotFound(f"No run {run_id!r}")
    return LeaseLost(f"Worker {worker_id!r} no longer holds run {run_id!r} (status {status})", status=status)
