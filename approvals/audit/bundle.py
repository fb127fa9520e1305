"""Bundles: a range of audit events with the signed checkpoints that cover them, checkable without the database.

A bundle is one JSON Lines file (UTF-8, one object a line, each with a `type`):

1. `{"type": "approvals-audit-bundle", "v": 1, "from_event_id", "to_event_id", "requested", "made_at", "events"}`
2. `{"type": "checkpoint", "statement", "signature"[, "leaves"]}`: first the anchor (the last checkpoint before
   the range, whose signed head the first event must follow; none when the range starts at the log's
   first event), then every checkpoint up to the first one at or past the range's end.
3. `{"type": "event", "id", "at", "actor", ..., "details", "prev_hash", "hash"}`, oldest first.
4. `{"type": "end", "events": n}`: a file cut short has no end line.

The range asked for is widened to checkpoint boundaries (from just after the anchor to the covering
checkpoint), because a checkpoint vouches for its whole range at once. Events after the last
checkpoint are chained but unsigned: the check reports how many.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..calls import clock
from ..store.audit import GENESIS_HASH, AuditEvent
from ..store.audit_checkpoints import AuditCheckpoints
from ..store.backends.database import Database
from ..store.models import AuditEventRow
from .checkpoints import SignedCheckpoint
from .checkpoints_verify import ChainChecker, ChainReport, event_intact
from .signing import PublicKey

__all__ = (
    "BUNDLE_TYPE",
    "BundleRange",
    "event_document",
    "event_from_document",
    "read_bundle_events",
    "verify_bundle",
    "write_bundle",
)

BUNDLE_TYPE = "approvals-audit-bundle"
_EVENT_FIELDS = ("actor", "action", "subject_type", "subject_id", "run_id", "agent_name", "tool_name", "details")


def event_document(row: AuditEventRow) -> dict[str, Any]:
    """An event as bundles and receipts hold it: every column, the time in ISO 8601 (UTC)."""
    document: dict[str, Any] = {"type": "event", "id": row.id, "at": row.at.astimezone(dt.UTC).isoformat()}
    document.update({name: getattr(row, name) for name in _EVENT_FIELDS})
    document.update(prev_hash=row.prev_hash, hash=row.hash)
    return document


def event_from_document(document: dict[str, Any]) -> tuple[int, str, str, AuditEvent]:
    """(id, prev_hash, hash, the event's content) of an event document; ValueError when malformed."""
    try:
        at = dt.datetime.fromisoformat(document["at"])
        values: dict[str, Any] = {name: document.get(name) for name in _EVENT_FIELDS}
        event = AuditEvent(**values, at=at)
        return int(document["id"]), str(document["prev_hash"]), str(document["hash"]), event
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an audit event ({exc})") from None


@dataclass(frozen=True)
class BundleRange:
    """What a bundle holds: events `first`..`last`, and the checkpoints it carries."""

    first: int
    last: int
    events: int
    checkpoints: int
    covered_up_to: int | None


def _select(
    checkpoints: list[SignedCheckpoint], from_id: int, to_id: int | None
) -> tuple[SignedCheckpoint | None, list[SignedCheckpoint]]:
    """The anchor (last checkpoint ending before `from_id`) and the checkpoints after it up to one covering `to_id`.

    Without `to_id` (the log to its end) every later checkpoint is included, so a tail cut from the
    database after a checkpoint shows in the bundle as a checkpoint whose events are missing.
    """
    anchor = None
    for checkpoint in checkpoints:
        if checkpoint.event_id < from_id:
            anchor = checkpoint
    covering = []
    for checkpoint in checkpoints:
        if anchor is not None and checkpoint.seq <= anchor.seq:
            continue
        covering.append(checkpoint)
        if to_id is not None and checkpoint.event_id >= to_id:
            break
    return anchor, covering


async def write_bundle(
    db: Database,
    path: Path,
    *,
    from_id: int | None = None,
    to_id: int | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    checkpoints: list[SignedCheckpoint] | None = None,
) -> BundleRange:
    """Write the bundle of events `from_id`..`to_id` (or the time range `since`..`until`; default: all) to `path`.

    The checkpoints come from the database unless given (`read_checkpoint_directory`: those carry
    their leaves, so a check of the bundle can name the first bad event).
    """
    store = AuditCheckpoints(db)
    first = from_id if from_id is not None else (await store.first_event_id(since=since) or 1)
    last = to_id if to_id is not None else (await store.last_event_id(until=until) or 0)
    if checkpoints is None:
        checkpoints = [SignedCheckpoint.from_row(row) for row in await store.checkpoints()]
    to_end = to_id is None and until is None
    anchor, covering = _select(checkpoints, first, None if to_end else last)
    start = anchor.event_id if anchor is not None else 0
    end = covering[-1].event_id if covering and covering[-1].event_id >= last and not to_end else None
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    written = 0
    with temporary.open("w", encoding="utf-8") as handle:
        header = {"type": BUNDLE_TYPE, "v": 1, "from_event_id": start + 1, "to_event_id": end,
                  "requested": [first, last], "made_at": clock.now().astimezone(dt.UTC).isoformat()}  # fmt: skip
        _line(handle, header)
        for checkpoint in [*([anchor] if anchor else []), *covering]:
            _line(handle, {"type": "checkpoint", **checkpoint.document()})
        upto = end if end is not None else None
        async for rows in store.events(after_id=start, upto_id=upto):
            for row in rows:
                _line(handle, event_document(row))
            written += len(rows)
        _line(handle, {"type": "end", "events": written})
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    signed = [c for c in covering if c.event_id <= (end if end is not None else c.event_id)]
    return BundleRange(start + 1, end or 0, written, len(covering), signed[-1].event_id if signed else None)


def _line(handle: IO[str], document: dict[str, Any]) -> None:
    handle.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")


def read_bundle_events(path: Path) -> Iterator[dict[str, Any]]:
    """The bundle's lines as objects, one at a time; ValueError naming the line that is not JSON."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except ValueError:
                raise ValueError(f"line {number} of {path} is not JSON") from None
            if not isinstance(document, dict):
                raise ValueError(f"line {number} of {path} is not a JSON object")
            yield document


def verify_bundle(path: Path, public: PublicKey) -> ChainReport:
    """Check a bundle offline: every event chained and matching the signed checkpoints that cover it."""
    lines = read_bundle_events(path)
    header = next(lines, None)
    if header is None or header.get("type") != BUNDLE_TYPE:
        raise ValueError(f"{path} is not an approvals audit bundle")
    checkpoints: list[SignedCheckpoint] = []
    checker: ChainChecker | None = None
    ended: int | None = None
    seen = 0
    for document in lines:
        kind = document.get("type")
        if kind == "checkpoint":
            if checker is not None:
                raise ValueError(f"{path}: a checkpoint after the events")
            checkpoints.append(SignedCheckpoint.from_document(document))
        elif kind == "event":
            if checker is None:
                checker = _checker(public, checkpoints, int(header.get("from_event_id") or 1))
            event_id, prev_hash, stored_hash, event = event_from_document(document)
            seen += 1
            if not checker.feed(event_id, prev_hash, stored_hash, event_intact(prev_hash, event, stored_hash)):
                return checker.report
        elif kind == "end":
            ended = int(document.get("events", -1))
    if checker is None:
        checker = _checker(public, checkpoints, int(header.get("from_event_id") or 1))
    report = checker.finish()
    if report.ok and ended is None:
        report.ok, report.problem = False, f"the bundle was cut short after event {report.head_id} (it has no end line)"
    elif report.ok and ended != seen:
        report.ok, report.problem = False, f"the bundle says it holds {ended} events but holds {seen}"
    return report


def _checker(public: PublicKey, checkpoints: list[SignedCheckpoint], from_event_id: int) -> ChainChecker:
    """A checker starting after the anchor checkpoint (the first one held, when it ends before the events)."""
    if checkpoints and checkpoints[0].event_id < from_event_id:
        anchor, covering = checkpoints[0], checkpoints[1:]
        checker = ChainChecker(
            public, covering, anchor_hash=anchor.event_hash, anchor_event_id=anchor.event_id, previous=anchor
        )
        problem = anchor.problem(public)
        if problem and checker.report.ok:
            checker.report.ok, checker.report.bad_checkpoint, checker.report.problem = False, anchor.seq, problem
        return checker
    return ChainChecker(public, checkpoints, anchor_hash=GENESIS_HASH, anchor_event_id=0)
