"""Retention without losing the proof: archive the events before a date to a bundle, then delete them.

The cut is always at a signed checkpoint's head (the newest one whose events are all before the
date), so what remains starts from a signed position and `verify` goes on proving it. The order
is what makes it safe:

1. the bundle (B's format, with the checkpoints covering the events) is written to a temporary
   file, fsynced, renamed into place, and its directory fsynced; an existing file is never replaced;
2. it is read back: every event chained, the last one the checkpoint's head (and, given the public
   key, the whole bundle verified as `approvals audit verify --bundle` would);
3. only then, in one transaction, the events are deleted, the cut recorded (`audit_cuts`) and an
   `audit.archived` event appended; the transaction first checks the database still holds exactly
   the events the bundle holds.

A failure at any step deletes nothing. A delivery (a webhook, a Slack channel, an audit sink) that
has not yet passed the cut is a refusal too: the events it still has to send would be gone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from ..store.audit import GENESIS_HASH
from ..store.audit_retention import ArchivePlan, ArchiveRefused, AuditRetention
from ..store.backends.database import Database
from ..store.models import AuditCutRow
from .bundle import BUNDLE_TYPE, event_from_document, read_bundle_events, verify_bundle, write_bundle
from .checkpoints import SignedCheckpoint
from .checkpoints_verify import ChainChecker, event_intact
from .signing import PublicKey

__all__ = ("ArchiveRefused", "Archived", "archive_events")


@dataclass(frozen=True)
class Archived:
    """What an archive did."""

    cut: AuditCutRow
    bundle: Path
    events: int
    kept_before: int
    """Events before the date kept in the database: they come after the newest checkpoint before it."""
    verified: bool
    """Whether the bundle was verified with the public key before anything was deleted."""

    def describe(self) -> str:
        cut = self.cut
        text = (
            f"archived {self.events} events ({cut.first_event_id}..{cut.event_id}, up to signed checkpoint "
            f"{cut.checkpoint_seq}) to {self.bundle} and deleted them from the database"
        )
        if self.kept_before:
            text += f"; {self.kept_before} later event(s) before the date were kept (no checkpoint covers them yet)"
        return text


def _refusal(plan: ArchivePlan, before: dt.datetime) -> str | None:
    when = before.astimezone(dt.UTC).isoformat()
    if plan.checkpoint is not None:
        if plan.lagging:
            site, last = plan.lagging[0]
            return (
                f"delivery to {site} has only reached event {last}, before the cut at event "
                f"{plan.checkpoint.event_id}: archive once it has caught up (nothing was deleted)"
            )
        return None
    if plan.first_event_id is None or plan.events_before == 0:
        return f"no events before {when} are left to archive"
    return (
        f"no signed checkpoint covers the events before {when}: the cut must be at a signed checkpoint so that "
        "what remains can still be verified. Make one (`approvals audit checkpoint`) or pick a later date"
    )


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_back(path: Path, plan: ArchivePlan) -> int:
    """The number of events the written bundle holds, after checking they are the ones to delete, chained."""
    assert plan.checkpoint is not None
    previous = plan.previous
    checker = ChainChecker(
        None,
        [],
        anchor_hash=previous.event_hash if previous is not None else GENESIS_HASH,
        anchor_event_id=previous.event_id if previous is not None else 0,
    )
    lines = read_bundle_events(path)
    header = next(lines, None)
    if header is None or header.get("type") != BUNDLE_TYPE:
        raise ArchiveRefused(f"{path} does not read back as a bundle: nothing was deleted")
    first: int | None = None
    ended: int | None = None
    for document in lines:
        if document.get("type") == "event":
            event_id, prev_hash, stored_hash, event = event_from_document(document)
            first = event_id if first is None else first
            if not checker.feed(event_id, prev_hash, stored_hash, event_intact(prev_hash, event, stored_hash)):
                problem = checker.report.describe()
                raise ArchiveRefused(f"the bundle read back is not intact ({problem}): nothing was deleted")
        elif document.get("type") == "end":
            ended = int(document.get("events", -1))
    report = checker.report
    wanted = (plan.first_event_id, plan.checkpoint.event_id, plan.checkpoint.event_hash)
    if (first, report.head_id, report.head_hash) != wanted:
        raise ArchiveRefused(
            f"the bundle read back holds events {first}..{report.head_id}, not {plan.first_event_id}.."
            f"{plan.checkpoint.event_id} ending at the checkpoint's head: nothing was deleted"
        )
    if ended != report.checked:
        raise ArchiveRefused("the bundle read back has no proper end line: nothing was deleted")
    return report.checked


def _check_target(bundle: Path) -> None:
    if bundle.exists() or bundle.is_symlink():
        raise ArchiveRefused(f"{bundle} already exists: an archive never replaces a file (nothing was deleted)")
    if not bundle.parent.is_dir():
        raise ArchiveRefused(f"{bundle.parent} is not a directory (nothing was deleted)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


async def archive_events(
    db: Database,
    *,
    before: dt.datetime,
    bundle: Path,
    actor: str,
    public: PublicKey | None = None,
    checkpoints: Sequence[SignedCheckpoint] | None = None,
) -> Archived:
    """Archive the events before `before` (up to the newest signed checkpoint before it) to `bundle`, then delete them.

    `checkpoints` (a checkpoint directory's, with their leaves) go into the bundle instead of the
    database's. Raises `ArchiveRefused` (nothing deleted) when there is no checkpoint to cut at,
    the bundle cannot be written or does not read back whole, or the database changed meanwhile.
    """
    if before.tzinfo is None:
        before = before.replace(tzinfo=dt.UTC)
    retention = AuditRetention(db)
    plan = await retention.plan(before)
    refusal = _refusal(plan, before)
    if refusal is not None:
        raise ArchiveRefused(refusal)
    assert plan.checkpoint is not None
    _check_target(bundle)
    try:
        await write_bundle(
            db, bundle, to_id=plan.checkpoint.event_id, checkpoints=list(checkpoints) if checkpoints else None
        )
        await anyio.to_thread.run_sync(_fsync_directory, bundle.parent)  # the rename survives a crash
        events = await anyio.to_thread.run_sync(_read_back, bundle, plan)
    except OSError as exc:
        raise ArchiveRefused(f"cannot write the bundle {bundle}: {exc} (nothing was deleted)") from None
    except ValueError as exc:
        raise ArchiveRefused(f"the bundle {bundle} does not read back: {exc} (nothing was deleted)") from None
    verified = False
    if public is not None:
        report = await anyio.to_thread.run_sync(verify_bundle, bundle, public)
        if not report.ok or report.covered_up_to != plan.checkpoint.event_id:
            raise ArchiveRefused(
                f"the bundle {bundle} does not verify with the public key ({report.describe()}): nothing was deleted"
            )
        verified = True
    digest = await anyio.to_thread.run_sync(_sha256, bundle)
    cut = await retention.archive(
        plan, events=events, actor=actor, before=before, bundle=bundle.name, bundle_sha256=digest
    )
    return Archived(cut, bundle, events, max(0, plan.events_before - events), verified)
