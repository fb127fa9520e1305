"""Receipts: one audit event with the proof that a signed checkpoint covers it, checkable with the public key alone.

A receipt is one JSON document:

    {"type": "approvals-audit-receipt", "v": 1,
     "event": {...every column of the event, its prev_hash and hash...},
     "checkpoint": {"statement": "...", "signature": "..."},
     "leaf_index": i, "proof": ["<hex>", ...]}

Checking it recomputes the event's hash from its content, hashes it with its id into a Merkle leaf,
follows the RFC 6962 inclusion proof to a root, and checks that root is the one the checkpoint signed
(and the checkpoint's signature). It carries no other event's details: the proof is the sibling
hashes only. The event's position is proven too (its id is in the leaf, its index in the proof).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..exceptions import UserError
from ..store.audit_checkpoints import AuditCheckpoints
from ..store.backends.database import Database
from .bundle import event_document, event_from_document
from .checkpoints import Checkpointer, SignedCheckpoint, leaves_root
from .checkpoints_verify import event_intact
from .merkle import inclusion_proof, leaf_hash, root_from_proof
from .signing import PublicKey

__all__ = ("RECEIPT_TYPE", "ReceiptCheck", "ReceiptUnavailable", "make_receipt", "verify_receipt")

RECEIPT_TYPE = "approvals-audit-receipt"


class ReceiptUnavailable(UserError):
    """No receipt can be made for this event now (not covered by a checkpoint, or the log no longer matches it)."""


async def make_receipt(db: Database, event_id: int, checkpointer: Checkpointer | None = None) -> dict[str, Any]:
    """The receipt of event `event_id`; with a `checkpointer`, an event no checkpoint covers yet gets one now."""
    store = AuditCheckpoints(db)
    row = await store.event(event_id)
    if row is None:
        raise ReceiptUnavailable(f"there is no audit event {event_id}")
    covering = await store.covering(event_id)
    if covering is None and checkpointer is not None:
        await checkpointer.make(force=True)
        covering = await store.covering(event_id)
    if covering is None:
        raise ReceiptUnavailable(
            f"no signed checkpoint covers audit event {event_id} yet (audit signing is off, or the next checkpoint "
            "is not made yet)"
        )
    checkpoint = SignedCheckpoint.from_row(covering)
    leaves = await store.leaves(checkpoint.after_event_id, checkpoint.event_id)
    if leaves_root(leaves) != checkpoint.root:
        raise ReceiptUnavailable(
            f"the audit log no longer matches signed checkpoint {checkpoint.seq}: run `approvals audit verify`"
        )
    index = next(i for i, (leaf_id, _) in enumerate(leaves) if leaf_id == event_id)
    proof = inclusion_proof(index, [leaf_hash(leaf_id, leaf) for leaf_id, leaf in leaves])
    return {
        "type": RECEIPT_TYPE,
        "v": 1,
        "event": event_document(row),
        "checkpoint": checkpoint.document(with_leaves=False),
        "leaf_index": index,
        "proof": proof,
    }


@dataclass(frozen=True)
class ReceiptCheck:
    ok: bool
    message: str
    event_id: int | None = None


def verify_receipt(receipt: Any, public: PublicKey) -> ReceiptCheck:
    """Check a receipt with the public key alone: the event's hash, its inclusion proof, the checkpoint's signature."""
    if not isinstance(receipt, dict) or receipt.get("type") != RECEIPT_TYPE:
        return ReceiptCheck(False, "not an approvals audit receipt")
    try:
        event_id, prev_hash, stored_hash, event = event_from_document(receipt.get("event") or {})
        checkpoint = SignedCheckpoint.from_document(receipt.get("checkpoint"))
        index = int(receipt["leaf_index"])
        proof = [str(node) for node in receipt["proof"]]
    except (KeyError, TypeError, ValueError) as exc:
        return ReceiptCheck(False, f"the receipt is malformed: {exc}")
    if not event_intact(prev_hash, event, stored_hash):
        return ReceiptCheck(False, f"event {event_id} was altered: its hash does not match its content", event_id)
    problem = checkpoint.problem(public)
    if problem:
        return ReceiptCheck(False, problem, event_id)
    if not checkpoint.after_event_id < event_id <= checkpoint.event_id:
        return ReceiptCheck(False, f"checkpoint {checkpoint.seq} does not cover event {event_id}", event_id)
    root = root_from_proof(leaf_hash(event_id, stored_hash), index, checkpoint.tree_size, proof)
    if root != checkpoint.root:
        return ReceiptCheck(
            False, f"event {event_id} is not in signed checkpoint {checkpoint.seq}: the inclusion proof fails", event_id
        )
    return ReceiptCheck(
        True,
        f"receipt valid: event {event_id} ({event.action} by {event.actor}, {event.at.isoformat()}) is event "
        f"{index + 1} of {checkpoint.tree_size} in checkpoint {checkpoint.seq}, signed {checkpoint.at} by key "
        f"{checkpoint.key_id}",
        event_id,
    )
