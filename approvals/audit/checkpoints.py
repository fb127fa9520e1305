"""Signed checkpoints of the audit chain: what they say, how they are made, and the task that makes them.

The chain is already a hash chain (`approvals.store.audit`), so a checkpoint states its head: the
last event's id and hash. It also signs the RFC 6962 Merkle root (`merkle.py`) of the events since
the previous checkpoint, each leaf an event's id and chain hash, so a receipt proves one event with
a short inclusion proof instead of carrying its neighbours' details. Each checkpoint names the hash of
the one before, so checkpoints form a chain of their own: one removed or replaced shows.

The statement is canonical JSON (sorted keys, no spaces, ASCII; strings and integers only) and is
stored and shipped as the exact text that was signed:

    {"after_event_id":0,"at":"…","event_hash":"…","event_id":1000,"key_id":"…","prev":"000…",
     "root":"…","seq":1,"tree_size":1000,"type":"approvals-audit-checkpoint","v":1}

Checkpoints are kept in the database and written to sinks outside it (`checkpoint_files.DirectorySink`;
webhook and syslog sinks plug into `CheckpointSink`). `run_checkpoints` makes one every `every_events`
events or every `interval` seconds (when there is anything new), in any number of processes: `seq`
is unique, so of two makers only one checkpoint n is stored; the other is told it made none.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from .._outage import Outage
from ..calls import clock
from ..store.audit import GENESIS_HASH
from ..store.audit_checkpoints import AuditCheckpoints, Leaf, NewCheckpoint
from ..store.backends.database import Database
from ..store.errors import describe, is_transient
from ..store.models import AuditCheckpointRow
from .merkle import leaf_hash, tree_root
from .signing import PublicKey, SigningKey

__all__ = (
    "CHECKPOINT_TYPE",
    "CheckpointConfig",
    "CheckpointHealth",
    "CheckpointSink",
    "Checkpointer",
    "SignedCheckpoint",
    "canonical_statement",
    "run_checkpoints",
)

logger = logging.getLogger("approvals.audit.checkpoints")

CHECKPOINT_TYPE = "approvals-audit-checkpoint"
NO_CHECKPOINT = GENESIS_HASH
"""What the first checkpoint names as the one before it."""


def canonical_statement(statement: dict[str, Any]) -> str:
    """The one text of a statement (its values are strings and integers only)."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def leaves_root(leaves: Sequence[Leaf]) -> str:
    """The Merkle root over events given as (id, chain hash)."""
    return tree_root([leaf_hash(event_id, event_hash) for event_id, event_hash in leaves])


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint as it travels: the exact signed text, its signature, and (in files) the leaves it covers.

    The leaves are not signed themselves: the signed root covers them, so a file's leaves are checked
    against it and then say which event of a rewritten range is the first one that changed.
    """

    statement: str
    signature: str
    leaves: list[Leaf] | None = None
    fields: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            parsed = json.loads(self.statement)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError("a checkpoint's statement is not a JSON object")
        object.__setattr__(self, "fields", parsed)

    @property
    def seq(self) -> int:
        return int(self.fields.get("seq", 0))

    @property
    def event_id(self) -> int:
        return int(self.fields.get("event_id", 0))

    @property
    def after_event_id(self) -> int:
        return int(self.fields.get("after_event_id", 0))

    @property
    def event_hash(self) -> str:
        return str(self.fields.get("event_hash", ""))

    @property
    def root(self) -> str:
        return str(self.fields.get("root", ""))

    @property
    def tree_size(self) -> int:
        return int(self.fields.get("tree_size", 0))

    @property
    def prev(self) -> str:
        return str(self.fields.get("prev", ""))

    @property
    def at(self) -> str:
        return str(self.fields.get("at", ""))

    @property
    def key_id(self) -> str:
        return str(self.fields.get("key_id", ""))

    @property
    def hash(self) -> str:
        """What the next checkpoint names as `prev`: SHA-256 of this statement's text."""
        return hashlib.sha256(self.statement.encode()).hexdigest()

    def problem(self, public: PublicKey) -> str | None:
        """Why this checkpoint cannot be trusted under `public`, or None."""
        well_formed = (
            self.fields.get("type") == CHECKPOINT_TYPE
            and self.fields.get("v") == 1
            and canonical_statement(self.fields) == self.statement
        )
        if not well_formed:
            return f"checkpoint {self.seq} is not a canonical approvals checkpoint statement"
        if self.key_id != public.key_id:
            return f"checkpoint {self.seq} was signed by key {self.key_id}, not by the given key {public.key_id}"
        if not public.verify(self.signature, self.statement.encode()):
            return f"checkpoint {self.seq}'s signature is not valid (the checkpoint was altered or forged)"
        if self.leaves is not None and (len(self.leaves) != self.tree_size or leaves_root(self.leaves) != self.root):
            return f"checkpoint {self.seq}'s list of events does not match its signed root"
        return None

    def document(self, *, with_leaves: bool = True) -> dict[str, Any]:
        """The JSON object a file, a bundle or a sink holds."""
        document: dict[str, Any] = {"statement": self.statement, "signature": self.signature}
        if with_leaves and self.leaves is not None:
            document["leaves"] = [[event_id, event_hash] for event_id, event_hash in self.leaves]
        return document

    @classmethod
    def from_document(cls, document: Any) -> SignedCheckpoint:
        """A checkpoint from `document()`'s form; ValueError when it is not one."""
        if not isinstance(document, dict) or not isinstance(document.get("statement"), str):
            raise ValueError("not a checkpoint (no statement)")
        leaves = document.get("leaves")
        parsed: list[Leaf] | None = None
        if leaves is not None:
            try:
                parsed = [(int(event_id), str(event_hash)) for event_id, event_hash in leaves]
            except (TypeError, ValueError):
                raise ValueError("a checkpoint's leaves are not [id, hash] pairs") from None
        return cls(document["statement"], str(document.get("signature", "")), parsed)

    @classmethod
    def from_row(cls, row: AuditCheckpointRow, leaves: list[Leaf] | None = None) -> SignedCheckpoint:
        return cls(row.statement, row.signature, leaves)


def chain_problem(previous: SignedCheckpoint | None, checkpoint: SignedCheckpoint) -> str | None:
    """Why `checkpoint` does not follow `previous` (None: the first one held, which follows nothing known)."""
    if previous is None:
        return None
    if checkpoint.seq != previous.seq + 1:
        return f"checkpoint {previous.seq + 1} is missing (checkpoint {checkpoint.seq} follows {previous.seq})"
    if checkpoint.prev != previous.hash:
        return f"checkpoint {checkpoint.seq} does not name checkpoint {previous.seq} as the one before it"
    if checkpoint.after_event_id != previous.event_id:
        return f"checkpoint {checkpoint.seq} does not start where checkpoint {previous.seq} ended"
    return None


def build_checkpoint(key: SigningKey, last: AuditCheckpointRow | None, leaves: list[Leaf]) -> NewCheckpoint:
    """The signed checkpoint after `last` over `leaves` (the events since it), as a row to store."""
    now = clock.now().astimezone(dt.UTC)
    head_id, head_hash = leaves[-1]
    statement = {
        "type": CHECKPOINT_TYPE,
        "v": 1,
        "seq": (last.seq if last is not None else 0) + 1,
        "prev": hashlib.sha256(last.statement.encode()).hexdigest() if last is not None else NO_CHECKPOINT,
        "after_event_id": last.event_id if last is not None else 0,
        "event_id": head_id,
        "event_hash": head_hash,
        "tree_size": len(leaves),
        "root": leaves_root(leaves),
        "at": now.isoformat(),
        "key_id": key.key_id,
    }
    text = canonical_statement(statement)
    row = {
        "seq": statement["seq"],
        "event_id": head_id,
        "event_hash": head_hash,
        "at": now,
        "key_id": key.key_id,
        "statement": text,
        "signature": key.sign(text.encode()),
    }
    return NewCheckpoint(row, leaves)


SINK_CATCH_UP = 30.0
"""Seconds between looks for checkpoints a sink lacks that another process made (or a crash left out)."""


class CheckpointSink(Protocol):
    """Somewhere outside the database a copy of each checkpoint goes (a directory; a webhook and syslog in part C).

    `put` must be idempotent (a checkpoint may be handed over again after a crash); `last_seq` says
    how far the sink got, so a process catches up what another one made or what a crash left out.
    """

    name: str

    async def last_seq(self) -> int: ...

    async def put(self, checkpoint: SignedCheckpoint) -> None: ...


@dataclass(frozen=True)
class CheckpointConfig:
    """When checkpoints are made, and where copies go."""

    every_events: int = 1_000
    """A checkpoint once this many events are not covered yet."""
    interval: float = 600.0
    """And at least this often (seconds) while any event is not covered."""
    poll: float = 5.0
    """How often the task looks: the most a checkpoint is late."""
    max_events: int = 100_000
    """The most events one checkpoint covers (a long log is caught up in several)."""
    directory: Path | None = None
    """The directory sink, when set."""


@dataclass
class CheckpointHealth:
    """For `/readyz` and metrics: the last checkpoint this process made or saw, and whether the database is down."""

    last_seq: int | None = None
    last_at: dt.datetime | None = None
    made: int = 0
    outage: bool = False
    sink_errors: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        return {
            "last_seq": self.last_seq,
            "last_at": self.last_at.isoformat() if self.last_at else None,
            "made": self.made,
            "outage": self.outage,
            "sink_errors": dict(self.sink_errors),
        }


class Checkpointer:
    """Makes checkpoints of one database with one key and hands them to the sinks."""

    def __init__(
        self,
        db: Database,
        key: SigningKey,
        config: CheckpointConfig | None = None,
        sinks: Sequence[CheckpointSink] = (),
        health: CheckpointHealth | None = None,
    ) -> None:
        self.store = AuditCheckpoints(db)
        self.key = key
        self.config = config or CheckpointConfig()
        self.sinks = list(sinks)
        self.health = health or CheckpointHealth()
        self._synced = -SINK_CATCH_UP

    def _due(self, last: AuditCheckpointRow | None, head: int) -> bool:
        """Whether enough events, or enough time with any event, have gone by since `last`."""
        uncovered = head - (last.event_id if last is not None else 0)
        if uncovered <= 0:
            return False
        if last is None or uncovered >= self.config.every_events:
            return True
        return (clock.now() - last.at).total_seconds() >= self.config.interval

    async def due(self) -> bool:
        """Whether a checkpoint is due now."""
        return self._due(*await self.store.state())

    async def make(self, *, force: bool = False) -> list[SignedCheckpoint]:
        """The checkpoints made now (none when not due, unless `force`, or when nothing is new), sinks updated.

        One look is two indexed reads; a checkpoint reads its events and signs outside any write
        transaction, then inserts one row. Sinks are given what was made, and every `SINK_CATCH_UP`
        seconds what other processes made.
        """
        made: list[SignedCheckpoint] = []
        while True:
            last, head = await self.store.state()
            if head <= (last.event_id if last is not None else 0):
                break
            if not (force or made or self._due(last, head)):
                break
            new = await self.store.create(
                last, lambda last, leaves: build_checkpoint(self.key, last, leaves), max_events=self.config.max_events
            )
            if new is None:
                break
            checkpoint = SignedCheckpoint(new.row["statement"], new.row["signature"], new.leaves)
            made.append(checkpoint)
            self.health.made += 1
            self.health.last_seq, self.health.last_at = checkpoint.seq, new.row["at"]
            logger.info("audit checkpoint %d signed: events up to %d", checkpoint.seq, checkpoint.event_id)
            if len(new.leaves) < self.config.max_events:
                break
        now = clock.monotonic()
        if made or self.health.sink_errors or (self.sinks and now - self._synced >= SINK_CATCH_UP):
            self._synced = now
            await self.sync_sinks(made)
        return made

    async def sync_sinks(self, fresh: Sequence[SignedCheckpoint] = ()) -> None:
        """Give every sink the checkpoints it lacks (those just made first-hand, with their leaves)."""
        by_seq = {checkpoint.seq: checkpoint for checkpoint in fresh}
        for sink in self.sinks:
            try:
                have = await sink.last_seq()
                if have + 1 in by_seq:  # the usual case: only what was just made is missing
                    for seq in sorted(seq for seq in by_seq if seq > have):
                        await sink.put(by_seq[seq])
                else:
                    for row in await self.store.checkpoints(from_seq=have + 1):
                        checkpoint = by_seq.get(row.seq)
                        if checkpoint is None:
                            after = json.loads(row.statement).get("after_event_id", 0)
                            checkpoint = SignedCheckpoint.from_row(row, await self.store.leaves(after, row.event_id))
                        await sink.put(checkpoint)
                self.health.sink_errors.pop(sink.name, None)
            except OSError as exc:
                if sink.name not in self.health.sink_errors:
                    logger.warning("audit checkpoint sink %s failed: %s; retrying at each look", sink.name, exc)
                self.health.sink_errors[sink.name] = str(exc)


async def run_checkpoints(
    checkpointer: Checkpointer,
    stop: anyio.Event,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Make checkpoints as they fall due until `stop` is set; database outages are waited out with backoff."""
    health = checkpointer.health
    poll = min(checkpointer.config.poll, checkpointer.config.interval)
    outage = Outage("making audit checkpoints", logger, first_delay=min(0.25, poll))
    task_status.started()
    while not stop.is_set():
        wait = poll
        try:
            await checkpointer.make()
            outage.succeeded()
            health.outage = False
        except Exception as exc:
            if not is_transient(exc):
                logger.exception("making an audit checkpoint failed unexpectedly")
            else:
                health.outage = True
                wait = outage.failed(describe(exc))
        with anyio.move_on_after(wait):
            await stop.wait()
