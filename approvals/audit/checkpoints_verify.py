"""Checking a run of audit events against signed checkpoints: the database online, or a bundle offline.

The hash chain alone catches an edit by someone who did not recompute the later hashes. Whoever can
write the database can recompute them, so each checkpoint's signed head and root are compared with
the events as they are now: a rewritten event, a deleted range, a reordering, an added event, a cut
tail or a restore from an older copy all change the events a checkpoint covers. When the checkpoint
carries its leaves (directory files do), the first leaf that differs names the first bad event;
without them the failure names the checkpoint's range.

`ChainChecker` is fed events one at a time in id order, so the same code checks a database of
millions of events in batches and a bundle streamed from a file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..calls.canonical import legacy_canonical_json
from ..store.audit import GENESIS_HASH, AuditEvent, event_content, event_hash
from ..store.audit_checkpoints import AuditCheckpoints, Leaf
from ..store.audit_retention import AuditRetention
from ..store.backends.database import Database
from ..store.models import AuditEventRow
from .checkpoints import NO_CHECKPOINT, SignedCheckpoint, chain_problem, leaves_root
from .signing import PublicKey

__all__ = ("ChainChecker", "ChainReport", "event_intact", "start_at_cut", "verify_database")


def event_intact(prev_hash: str, event: AuditEventRow | AuditEvent, stored_hash: str) -> bool:
    """Whether `stored_hash` is the hash of `event` over `prev_hash` (in the current or the pre-normalization form)."""
    if event_hash(prev_hash, event) == stored_hash:
        return True
    legacy = event_content(event, serialize=legacy_canonical_json)
    return hashlib.sha256((prev_hash + legacy).encode()).hexdigest() == stored_hash


@dataclass
class ChainReport:
    """What a check found: intact or not, how far, and the first bad event (or checkpoint) and why."""

    ok: bool = True
    checked: int = 0
    """Events checked."""
    head_id: int = 0
    head_hash: str = GENESIS_HASH
    checkpoints: int = 0
    """Signed checkpoints the events were matched against."""
    covered_up_to: int | None = None
    """The last event a signed checkpoint covers (None: none does)."""
    last_checkpoint: SignedCheckpoint | None = None
    uncovered: int = 0
    """Events after the last checkpoint: chained, but no signature vouches for them yet."""
    first_bad_id: int | None = None
    bad_checkpoint: int | None = None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for a person."""
        if not self.ok:
            if self.first_bad_id is not None:
                return f"broken at event {self.first_bad_id}: {self.problem}"
            if self.bad_checkpoint is not None:
                return f"broken at checkpoint {self.bad_checkpoint}: {self.problem}"
            return f"broken: {self.problem}"
        text = f"intact: {self.checked} events, head {self.head_id} ({self.head_hash})"
        if self.checkpoints:
            assert self.last_checkpoint is not None
            text += (
                f"; matches {self.checkpoints} signed checkpoint(s), the last (#{self.last_checkpoint.seq}, "
                f"{self.last_checkpoint.at}) covering events up to {self.covered_up_to}"
            )
            if self.uncovered:
                text += f"; {self.uncovered} later event(s) not covered by a checkpoint yet"
        return text


class ChainChecker:
    """Checks events, fed in id order, against the chain and the signed checkpoints that cover them.

    `anchor_hash`/`anchor_event_id` are where the fed events start: the genesis, or a checkpoint's head
    (a bundle starts right after one). `previous` is that checkpoint, so the first one fed is checked to follow it.
    """

    def __init__(
        self,
        public: PublicKey | None,
        checkpoints: Sequence[SignedCheckpoint],
        *,
        anchor_hash: str = GENESIS_HASH,
        anchor_event_id: int = 0,
        previous: SignedCheckpoint | None = None,
    ) -> None:
        self.report = ChainReport(head_id=anchor_event_id, head_hash=anchor_hash)
        self.pending = sorted(checkpoints, key=lambda c: c.seq)
        self.segment: list[Leaf] = []
        self._check_checkpoints(public, previous)

    def _check_checkpoints(self, public: PublicKey | None, previous: SignedCheckpoint | None) -> None:
        if self.pending and public is None:
            self._fail_checkpoint(self.pending[0].seq, "no public key was given to check the checkpoints with")
            return
        for checkpoint in self.pending:
            assert public is not None
            problem = checkpoint.problem(public) or chain_problem(previous, checkpoint)
            first = previous is None and checkpoint.seq == 1
            if problem is None and first and (checkpoint.prev != NO_CHECKPOINT or checkpoint.after_event_id != 0):
                problem = "checkpoint 1 claims a checkpoint before it"
            if problem:
                self._fail_checkpoint(checkpoint.seq, problem)
                return
            previous = checkpoint

    def _fail_checkpoint(self, seq: int, problem: str) -> None:
        self.report.ok, self.report.bad_checkpoint, self.report.problem = False, seq, problem

    def _fail(self, event_id: int | None, problem: str) -> bool:
        self.report.ok, self.report.first_bad_id, self.report.problem = False, event_id, problem
        return False

    def feed(self, event_id: int, prev_hash: str, stored_hash: str, intact: bool) -> bool:
        """Check the next event; False once the check has failed (stop feeding)."""
        report = self.report
        if not report.ok:
            return False
        if event_id <= report.head_id:
            return self._fail(event_id, f"event {event_id} comes after event {report.head_id} (events were reordered)")
        if prev_hash != report.head_hash:
            return self._fail(
                event_id,
                f"event {event_id} does not follow the event before it (an event was deleted, inserted or reordered)",
            )
        if not intact:
            return self._fail(event_id, f"event {event_id} was changed after it was written (its hash does not match)")
        while self.pending and event_id > self.pending[0].event_id:
            if not self._close(self.pending[0], ended=False):
                return False
        if self.pending and event_id > self.pending[0].after_event_id:
            self.segment.append((event_id, stored_hash))
        report.head_id, report.head_hash = event_id, stored_hash
        report.checked += 1
        report.uncovered += 1
        if self.pending and event_id == self.pending[0].event_id:
            return self._close(self.pending[0], ended=False)
        return True

    def finish(self) -> ChainReport:
        """The report, once every event was fed: a checkpoint not reached means the tail was cut."""
        while self.report.ok and self.pending:
            self._close(self.pending[0], ended=True)
        return self.report

    def _close(self, checkpoint: SignedCheckpoint, *, ended: bool) -> bool:
        segment, self.segment = self.segment, []
        matches = (
            bool(segment)
            and segment[-1] == (checkpoint.event_id, checkpoint.event_hash)
            and len(segment) == checkpoint.tree_size
            and leaves_root(segment) == checkpoint.root
        )
        if not matches:
            bad_id, problem = self._pinpoint(checkpoint, segment, ended=ended)
            self.report.bad_checkpoint = checkpoint.seq
            return self._fail(bad_id, problem)
        self.pending.pop(0)
        report = self.report
        report.checkpoints += 1
        report.covered_up_to, report.last_checkpoint = checkpoint.event_id, checkpoint
        report.uncovered = 0
        return True

    def _pinpoint(self, checkpoint: SignedCheckpoint, segment: list[Leaf], *, ended: bool) -> tuple[int | None, str]:
        """The first bad event of a checkpoint's range, and why; the range itself when the checkpoint has no leaves."""
        seq, signed = checkpoint.seq, checkpoint.leaves
        cut = (
            f"the chain ends at event {self.report.head_id}, but checkpoint {seq} (signed {checkpoint.at}) covers "
            f"events up to {checkpoint.event_id}: the tail was cut, or the database was restored from an older copy"
        )
        if signed is None:
            if ended and (not segment or segment[-1][0] < checkpoint.event_id):
                return (segment[-1][0] + 1 if segment else checkpoint.after_event_id + 1), cut
            first = segment[0][0] if segment else checkpoint.after_event_id + 1
            return first, (
                f"events {checkpoint.after_event_id + 1}..{checkpoint.event_id} do not match signed checkpoint {seq} "
                f"(signed {checkpoint.at}): one of them was changed, removed, added or reordered after it was signed"
            )
        signed_ids = {event_id for event_id, _ in signed}
        actual_ids = {event_id for event_id, _ in segment}
        for index in range(max(len(signed), len(segment))):
            want = signed[index] if index < len(signed) else None
            have = segment[index] if index < len(segment) else None
            if want == have:
                continue
            if have is None:
                assert want is not None
                if ended:
                    return want[0], cut
                return want[0], f"event {want[0]}, signed in checkpoint {seq}, is missing (it was deleted)"
            if want is None:
                return have[0], f"event {have[0]} was added: checkpoint {seq} signed no such event there"
            if have[0] == want[0]:
                return have[0], (
                    f"event {have[0]} differs from the one checkpoint {seq} signed ({checkpoint.at}): it was changed, "
                    "or the database was restored from an older copy and written to since"
                )
            if want[0] not in actual_ids:
                return want[0], f"event {want[0]}, signed in checkpoint {seq}, is missing (it was deleted)"
            if have[0] not in signed_ids:
                return have[0], f"event {have[0]} was added: checkpoint {seq} signed no such event there"
            return have[0], f"event {have[0]} is not where checkpoint {seq} signed it (events were reordered)"
        return checkpoint.event_id, f"the events do not match signed checkpoint {seq}"


async def verify_database(
    db: Database, public: PublicKey | None, checkpoints: Sequence[SignedCheckpoint], *, batch: int = 5_000
) -> ChainReport:
    """Walk the whole chain in the database, matching it against `checkpoints` (from outside the database).

    After an archive the chain starts at the signed checkpoint at the cut (`start_at_cut`)."""
    checker, after_id = await start_at_cut(db, public, checkpoints)
    if not checker.report.ok:
        return checker.report
    async for rows in AuditCheckpoints(db).events(after_id=after_id, batch=batch):
        for row in rows:
            if not checker.feed(row.id, row.prev_hash, row.hash, event_intact(row.prev_hash, row, row.hash)):
                return checker.report
    report = checker.finish()
    if not checkpoints:
        report.notes.append("no checkpoints given: only the hash chain was checked")
    return report


# --- issue 39 D: verification starts at the newest archive cut (approvals.audit.retention) ---


async def start_at_cut(
    db: Database, public: PublicKey | None, checkpoints: Sequence[SignedCheckpoint]
) -> tuple[ChainChecker, int]:
    """A checker for the events in the database, starting after the newest cut (the genesis when none), and that id.

    The anchor is the checkpoint at the cut: the copy given (from outside the database) when there is
    one, which must be the cut's statement exactly, else the cut's own signed copy. Checkpoints at or
    before the cut cover archived events: they are left to the bundle's check.
    """
    start = await AuditRetention(db).start(public.verify if public is not None else None)
    cut = start.cut
    if cut is None:
        return ChainChecker(public, checkpoints), 0
    later = [c for c in checkpoints if c.seq > cut.checkpoint_seq]
    given = next((c for c in checkpoints if c.seq == cut.checkpoint_seq), None)
    anchor = given or SignedCheckpoint(cut.statement, cut.signature)
    checker = ChainChecker(public, later, anchor_hash=cut.event_hash, anchor_event_id=cut.event_id, previous=anchor)
    report = checker.report
    problem = start.problem
    if problem is None and given is not None and given.statement != cut.statement:
        problem = (
            f"the archive cut names checkpoint {cut.checkpoint_seq}, but not the one signed outside the database "
            "(the cut was forged)"
        )
    if problem is None and public is not None:
        problem = anchor.problem(public)
    if problem is not None:
        report.ok, report.problem = False, problem
        report.first_bad_id, report.bad_checkpoint = start.first_bad_id, cut.checkpoint_seq
        return checker, cut.event_id
    report.notes.append(
        f"events {cut.first_event_id}..{cut.event_id} were archived on {cut.at:%Y-%m-%d %H:%M} UTC to {cut.bundle} "
        f"(cut at signed checkpoint {cut.checkpoint_seq}): verify them with that bundle"
    )
    return checker, cut.event_id
