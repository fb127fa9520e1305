"""The writes of a run's hot path, written once for both backends.

`pause`, `append_step`, `finish` and `mark_executing` are written against `WriteTransaction`:
`Transaction` runs it through SQLAlchemy (SQLite, and the rare writes on PostgreSQL),
`PgTransaction` pipelines it on a raw psycopg connection (PostgreSQL's hot path).
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import LeaseLost, NotFound
from ..messages import MESSAGE_FORMAT_VERSION, ModelRequest, ModelResponse, dump_message, load_message
from ..tools import ToolDefinition
from .audit import AuditEvent
from .models import ToolCallRow
from .notify import READY_CHANNEL, RUNS_CHANNEL


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
    args_digest: str
    override_digest: str | None


SYSTEM_ACTOR_ID = "system"
"""Who acts when nobody asked: expiry, crash recovery, a run becoming ready."""
OPEN_CALL_STATUSES = ("pending", "outcome_unknown")
"""Calls waiting for a person."""
DECIDED_CALL_STATUSES = ("approved", "denied", "expired", "answered")
"""Calls people decided, whose verdicts wait for the run to act on them."""
HELD_RUN_COLUMNS = frozenset({"status", "output", "error", "lease_owner", "lease_expires_at"})
"""The run columns a worker's guarded write may set."""


class WriteTransaction(ABC):
    """One store operation's writes, as the run lifecycle needs them, on either backend.

    The operations are written once against these methods; `Transaction` runs them through
    SQLAlchemy (SQLite), `PgTransaction` sends them to PostgreSQL in one pipeline.
    """

    def __init__(self) -> None:
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    async def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    async def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )

    @abstractmethod
    async def hold(self, run_id: str, worker_id: str, *, grow: int = 0, **values: Any) -> HeldRun:
        """Guarded update of a run this worker leases: `LeaseLost` unless it still holds it.

        Reserves `grow` message sequence numbers and sets `values` (`HELD_RUN_COLUMNS`), in one statement.
        """

    @abstractmethod
    async def append_messages(self, run: HeldRun, messages: Sequence[ModelRequest | ModelResponse]) -> None:
        """Append rows after the last one: a step writes only its own messages."""

    @abstractmethod
    async def ensure_tool_definition(self, definition: ToolDefinition) -> str:
        """Store a definition once per version; return the version."""

    @abstractmethod
    async def insert_calls(self, rows: list[dict[str, Any]]) -> None:
        """Insert pending tool calls (rows from `pending_call_row`)."""

    @abstractmethod
    async def start_executing(self, run_id: str, tool_call_ids: Sequence[str]) -> list[ExecutedCall]:
        """Move these approved calls to `executing` and consume their approvals; returns the calls moved."""

    @abstractmethod
    async def executing_call_ids(self, run_id: str) -> list[str]:
        """Tool call ids of the run's calls in `executing`."""

    @abstractmethod
    async def settle_executing(self, run_id: str, outcomes: dict[str, tuple[str, Any]]) -> list[ExecutedCall]:
        """Executing calls get their final status and result, by tool call id; returns the calls settled."""

    @abstractmethod
    async def lock_call(self, call_id: str) -> tuple[ToolCallRow, str | None] | None:
        """The call, locked until commit, and who started its run; None when there is no such call."""

    @abstractmethod
    async def add_decision(self, row: dict[str, Any]) -> None:
        """Record one reviewer's verdict (a `decisions` row)."""

    @abstractmethod
    async def count_approvals(self, call_id: str, args_digest: str) -> int:
        """Distinct reviewers whose unconsumed approvals of these arguments stand."""

    @abstractmethod
    async def update_call(self, call: ToolCallRow, **changes: Any) -> None:
        """Set columns of a call from `lock_call`, on the object and in the database."""

    @abstractmethod
    async def ready_if_decided(self, run_id: str, agent_name: str) -> None:
        """A paused run whose calls are all decided becomes ready, audited and announced, when this commits.

        The caller holds the run's row (`lock_call` takes it first), so decisions on one run's
        calls are serialized: two reviewers settling its last two calls at once, the second
        sees the first's verdict.
        """

    async def _became_ready(self, run_id: str, agent_name: str) -> None:
        await self.audit(SYSTEM_ACTOR_ID, "run.ready", "run", run_id, run_id=run_id, agent_name=agent_name)
        await self.announce(READY_CHANNEL, run_id)
        await self.announce(RUNS_CHANNEL, run_id)


def load_history_rows(rows: Iterable[tuple[Any, int]]) -> list[ModelRequest | ModelResponse]:
    """Messages from stored `(data, format_version)` rows, in order."""
    return [load_message(data, format_version=version) for data, version in rows]


def message_rows(run: HeldRun, messages: Sequence[ModelRequest | ModelResponse]) -> list[dict[str, Any]]:
    """Message rows numbered after the run's last stored message."""
    now = utcnow()
    return [
        {
            "run_id": run.id,
            "seq": run.next_seq + offset,
            "kind": message.kind,
            "format_version": MESSAGE_FORMAT_VERSION,
            "data": dump_message(message),
            "created_at": now,
        }
        for offset, message in enumerate(messages)
    ]


def tool_definition_row(definition: ToolDefinition) -> dict[str, Any]:
    """A tool definition as stored: the parts the model saw, keyed by version."""
    return {
        "version": definition.version,
        "name": definition.name,
        "definition": {
            "name": definition.name,
            "description": definition.description,
            "parameters_json_schema": definition.parameters_json_schema,
            "strict": definition.strict,
            "sequential": definition.sequential,
            "metadata": definition.metadata,
        },
        "created_at": utcnow(),
    }


def lease_lost(run_id: str, worker_id: str, status: str | None) -> Exception:
    """The error for a guarded write that matched no row: the run is gone or someone else holds it."""
    if status is None:
        return NotFound(f"No run {run_id!r}")
    return LeaseLost(f"Worker {worker_id!r} no longer holds run {run_id!r} (status {status})")
