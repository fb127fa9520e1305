"""Where the audit chain in the database starts: the genesis, or the signed checkpoint at the newest archive cut.

Old events are archived by `approvals.audit.retention` (the transaction is `audit_retention.py`'s):
written to a bundle, then deleted up to a signed checkpoint's head, with the cut recorded
(`audit_cuts`) and an `audit.archived` event naming it. Every verification of the database starts
at `chain_start`:

- the newest cut must be the checkpoint it names (same statement and signature as the checkpoint
  row, the same head as its statement, and a valid signature when the verifier has the key);
- no event at or before the cut may remain, and the first one after it must follow its head
  (an event deleted beyond the cut breaks this);
- the `audit.archived` event naming the cut must be in what remains (a cut row moved to a later
  checkpoint, with the events up to it deleted, loses that event).

It reads only the tables (`models`), so `audit.verify_audit_chain` can use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from .models import AuditCheckpointRow, AuditCutRow, AuditEventRow

__all__ = ("ARCHIVED", "ChainStart", "SignatureCheck", "chain_start")

ARCHIVED = "audit.archived"
"""The action of the event that records a cut."""
_GENESIS = "0" * 64

SignatureCheck = Callable[[str, bytes], bool]
"""Whether a signature (base64) is valid for a statement (its bytes), under the verifier's public key."""


@dataclass(frozen=True)
class ChainStart:
    """Where the events in the database start: the genesis, or the head of the checkpoint at the newest cut."""

    event_id: int = 0
    """The last event before the remaining ones (0: none was archived)."""
    hash: str = _GENESIS
    cut: AuditCutRow | None = None
    problem: str | None = None
    first_bad_id: int | None = None


def _statement_fields(statement: str) -> dict[str, Any]:
    try:
        fields = json.loads(statement)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


async def chain_start(session: AsyncSession, signature_ok: SignatureCheck | None = None) -> ChainStart:
    """Where verification of the database starts, and why it cannot (a forged cut, events deleted past it)."""
    cut = await session.scalar(select(AuditCutRow).order_by(AuditCutRow.id.desc()).limit(1))
    if cut is None:
        return ChainStart()
    start = ChainStart(event_id=cut.event_id, hash=cut.event_hash, cut=cut)
    seq = cut.checkpoint_seq

    def broken(problem: str, first_bad_id: int | None = None) -> ChainStart:
        problem = f"the archive cut at checkpoint {seq}: {problem}"
        return ChainStart(cut.event_id, cut.event_hash, cut, problem, first_bad_id)

    signed = _statement_fields(cut.statement)
    if (signed.get("seq"), signed.get("event_id"), signed.get("event_hash")) != (seq, cut.event_id, cut.event_hash):
        return broken("the cut row does not match the checkpoint statement it holds (the cut was forged)")
    checkpoint = await session.get(AuditCheckpointRow, seq)
    if checkpoint is None or (checkpoint.statement, checkpoint.signature) != (cut.statement, cut.signature):
        return broken(f"checkpoint {seq} in the database is missing or differs from the one the cut holds (forged)")
    if signature_ok is not None and not signature_ok(cut.signature, cut.statement.encode()):
        return broken(f"checkpoint {seq}'s signature is not valid under the given key (the cut was forged)")
    left = await session.scalar(select(func.max(AuditEventRow.id)).where(AuditEventRow.id <= cut.event_id))
    if left is not None:
        return broken(f"event {left} is at or before the cut (event {cut.event_id}) but still in the database", left)
    first = await session.scalar(
        select(AuditEventRow).where(AuditEventRow.id > cut.event_id).order_by(AuditEventRow.id).limit(1)
    )
    if first is not None and first.prev_hash != cut.event_hash:
        return broken(
            f"event {first.id} does not follow the cut's head (event {cut.event_id}): events after the cut were "
            "deleted",
            first.id,
        )
    recorded = await session.scalars(
        select(AuditEventRow.details).where(AuditEventRow.id > cut.event_id, AuditEventRow.action == ARCHIVED)
    )
    if not any(
        isinstance(d, dict) and d.get("checkpoint_seq") == seq and d.get("event_hash") == cut.event_hash
        for d in recorded
    ):
        return broken(
            f"no {ARCHIVED} event after the cut names it: the cut row was forged or moved, and the events up to "
            "it deleted"
        )
    return start
