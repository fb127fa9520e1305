"""RFC 6962 Merkle trees over one checkpoint's events: the root a checkpoint signs, and inclusion proofs.

A leaf is an event's position and chain hash (`leaf_hash`), so a proof shows both that the event is
in the signed range and where. Leaves and nodes are domain-separated (0x00 / 0x01) as RFC 6962 does,
so a node can never pass for a leaf. A tree covers the events since the previous checkpoint: the
checkpoints themselves are chained, so consistency between trees needs no proof of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ("EMPTY_ROOT", "inclusion_proof", "leaf_hash", "root_from_proof", "tree_root")

EMPTY_ROOT = hashlib.sha256(b"").hexdigest()


def leaf_hash(event_id: int, event_hash: str) -> bytes:
    """The leaf of an event: SHA-256(0x00 || its id, 8 bytes big-endian || its chain hash)."""
    return hashlib.sha256(b"\x00" + event_id.to_bytes(8, "big") + bytes.fromhex(event_hash)).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than `n` (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_root(leaves: Sequence[bytes]) -> str:
    """The Merkle tree hash (RFC 6962 MTH) of `leaves`, hex; bottom-up, so a million leaves take no recursion."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    # RFC 6962's left subtrees are perfect; pairing adjacent nodes level by level and carrying an odd
    # last node up unchanged builds exactly that tree.
    while len(level) > 1:
        paired = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0].hex()


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[str]:
    """The audit path (RFC 6962 PATH) of leaf `index`, hex, nearest the leaf first."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")

    def path(m: int, items: Sequence[bytes]) -> list[str]:
        if len(items) <= 1:
            return []
        k = _split(len(items))
        if m < k:
            return [*path(m, items[:k]), tree_root(items[k:])]
        return [*path(m - k, items[k:]), tree_root(items[:k])]

    return path(index, leaves)


def root_from_proof(leaf: bytes, index: int, size: int, proof: Sequence[str]) -> str | None:
    """The root `proof` leads to from `leaf` at `index` of a tree of `size` (RFC 9162 2.1.3.2); None: malformed."""
    if not 0 <= index < size:
        return None
    fn, sn = index, size - 1
    result = leaf
    for hex_node in proof:
        try:
            node = bytes.fromhex(hex_node)
        except ValueError:
            return None
        if sn == 0:
            return None
        if fn % 2 == 1 or fn == sn:
            result = _node(node, result)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            result = _node(result, node)
        fn >>= 1
        sn >>= 1
    return result.hex() if sn == 0 else None
