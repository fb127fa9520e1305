"""The seam between the store and its database: what a transaction collects, and what a database does differently.

The store's rules, plans and statements are written once; everything SQLite and PostgreSQL do
differently sits behind `Backend`, with one implementation each in `backends/` (`sqlite.SQLiteBackend`,
`postgres_backend.PostgresBackend`), which `Database` picks from its URL. Nothing above the
backends asks which database it is on: it asks its backend for the statement or the transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from .audit import AuditEvent

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Select
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.sql.expression import Executable

    from ..calls.actors import Actor
    from ..calls.verdicts import Verdict
    from .backends.database import Database
    from .backends.notify import Notifier
    from .claims import Claim, ClaimedRun, StaleLeaseCheck
    from .decision_rules import Decided
    from .run_plan import RunWrite
    from .run_sql import Rows, Step

if TYPE_CHECKING:
    UpsertInsert = postgresql.Insert | sqlite.Insert
    """Either database's INSERT … ON CONFLICT."""

__all__ = ("Backend", "Finish", "SelectT", "Transaction", "WakeUps")

SessionT = TypeVar("SessionT", AsyncSession, Connection)
T = TypeVar("T")
SelectT = TypeVar("SelectT", bound="Select[*tuple[Any, ...]]")
WakeUps = list[tuple[str, str]]
"""(channel, payload) pairs."""


@dataclass(frozen=True)
class Finish(Generic[T]):
    """How a checked write (`Backend.checked_write`) ends, decided in Python from its first statements' rows:
    the statements that follow, its audit events and wake-ups, and what it returns. Raising instead ends it
    with nothing written."""

    result: T
    steps: Sequence[Step] = ()
    events: Sequence[AuditEvent] = ()
    announcements: Sequence[tuple[str, str]] = ()


class Transaction(Generic[SessionT]):
    """A store operation's session, with announcements and audit events for its end.

    Most operations hold an `AsyncSession` (`StoreBase.transaction`). A run's hot-path
    writes and decisions are plain statements over a `Connection` (`StoreBase.run_statements`):
    on SQLite the whole transaction runs in one worker-thread hop. Writes are functions over
    it (`run_sql`, `decisions`); it only collects what its end must do, and carries the
    backend, which builds the few statements that differ between the databases.
    """

    def __init__(self, session: SessionT, backend: Backend) -> None:
        self.session: SessionT = session
        self.backend = backend
        self.announcements: list[tuple[str, str]] = []
        self.events: list[AuditEvent] = []

    def announce(self, channel: str, payload: str) -> None:
        """Wake listeners on `channel` once this transaction commits."""
        self.announcements.append((channel, payload))

    def record(self, event: AuditEvent) -> None:
        """Record an event made by `call_event` or `run_event`; it is chained when the transaction ends."""
        self.events.append(event)

    def audit(self, actor: str, action: str, subject_type: str, subject_id: str, **fields: Any) -> None:
        """Record an event; it is chained and written when the transaction ends."""
        self.events.append(
            AuditEvent(actor=actor, action=action, subject_type=subject_type, subject_id=subject_id, **fields)
        )


def statements_in_one_transaction(
    backend: Backend, body: Callable[[Transaction[Connection]], T]
) -> Callable[[Connection], tuple[Transaction[Connection], T]]:
    """`body` over a connection whose transaction the backend ends (`end_statements`): each backend's
    `run_statements` runs this where its connection is (SQLite: the direct executor's thread)."""

    def whole(connection: Connection) -> tuple[Transaction[Connection], T]:
        tx = Transaction(connection, backend)
        result = body(tx)
        backend.end_statements(tx)
        return tx, result

    return whole


class Backend(Protocol):
    """Everything one database does its own way. Each method says the difference it holds."""

    name: str
    """The database's name, for messages: "sqlite" or "postgresql"."""

    # -- statements: the same statement, spelled for this database

    def __hash__(self) -> int:
        """Backends key the statements built once for them (`functools.cache`)."""
        ...

    def insert(self, table: Any) -> UpsertInsert:
        """An INSERT that can say `ON CONFLICT` (each database has its own construct)."""
        ...

    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        """`query` locking the rows it reads: PostgreSQL locks rows; SQLite's write lock covers the database."""
        ...

    def lock_first(self, connection: Connection, query: Select[Any]) -> Sequence[Any] | None:
        """Lock what `query` selects and return its first column; None where the write lock already serializes."""
        ...

    def hold(self, connection: Connection, statement: Executable) -> None:
        """Run a statement that only serializes writers (an advisory lock); SQLite's write lock already does."""
        ...

    def json_items(self, column: Any) -> Any:
        """A JSON array column as a table of its text items (column `value`)."""
        ...

    def routed_to(self, column: Any, groups: Collection[str]) -> ColumnElement[bool]:
        """Whether a JSON array of group names is empty (or NULL, or JSON null) or names one of `groups`."""
        ...

    def seconds_between(self, start: Any, end: Any) -> ColumnElement[float]:
        """Seconds from `start` to `end`, both timestamps, as a float."""
        ...

    async def limit_statement_time(self, session: AsyncSession, milliseconds: int) -> None:
        """Stop the rest of this read transaction's statements past `milliseconds` each (PostgreSQL), so a search
        no index answers is refused rather than read to the end; SQLite's reads run in the process and are not cut."""
        ...

    def timed_out(self, error: BaseException) -> bool:
        """Whether `error` is a statement stopped by `limit_statement_time`."""
        ...

    # -- transactions: how a write is carried out, its audit events chained and its wake-ups sent

    def end_statements(self, tx: Transaction[Connection]) -> None:
        """The last statements of a transaction of plain statements: append its audit events (and wake-ups)."""
        ...

    async def end_session(self, tx: Transaction[AsyncSession]) -> None:
        """The last statements of an ORM session's transaction: append its audit events (and wake-ups)."""
        ...

    async def run_statements(
        self, db: Database, body: Callable[[Transaction[Connection]], T]
    ) -> tuple[Transaction[Connection], T]:
        """One transaction of `body`'s synchronous statements, ended by `end_statements`; not yet announced."""
        ...

    def read_steps(self, db: Database, steps: Sequence[Step]) -> Awaitable[list[Rows]]:
        """The rows of a few reads at once: PostgreSQL sends them in one round trip (each statement its own
        snapshot, outside any transaction); SQLite runs them in one read transaction."""
        ...

    def checked_write(
        self, db: Database, first: Sequence[Step], then: Callable[[list[Rows]], Finish[T]]
    ) -> Awaitable[tuple[T, WakeUps]]:
        """One transaction in two parts: `first`'s statements, then what `then` makes of their rows (`Finish`).

        PostgreSQL sends each part in one round trip of a pipeline (the second with the audit appends, the
        wake-ups and COMMIT); SQLite runs them on its cursor under the write lock. Returns `then`'s result
        and the wake-ups this process still has to publish.
        """
        ...

    def write_run(self, db: Database, write: RunWrite, stored_tool_versions: set[str]) -> Awaitable[WakeUps]:
        """A worker's write to the run it holds (`run_sql.apply_write`'s statements), in one transaction.

        Returns the wake-ups this process still has to publish (`Notifier.publish`) now it committed.
        """
        ...

    def decide(
        self, db: Database, call_id: str, verdict: Verdict, actor: Actor, now: dt.datetime
    ) -> Awaitable[tuple[Decided, WakeUps]]:
        """One reviewer's verdict (`decision_rules.plan_decision`'s plan), in one transaction; and its wake-ups."""
        ...

    def claim(
        self, db: Database, ask: Claim, stale_leases: StaleLeaseCheck
    ) -> Awaitable[tuple[ClaimedRun | None, WakeUps]]:
        """Lease the oldest claimable run (`claims`' statements) and read what its worker needs; and the wake-ups.

        `stale_leases` says when this store last looked for runs whose worker died, where that look is apart.
        """
        ...

    def notifier(self, db: Database) -> Notifier:
        """Wake-ups: in-process on SQLite (one process serves it), LISTEN/NOTIFY on PostgreSQL."""
        ...
