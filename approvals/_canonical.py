"""Canonical JSON and digests: one byte sequence per value, so equal data hashes equally.

Used for a tool definition's `version` and for the digest that binds a reviewer's
approval to exactly the arguments they saw.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialize JSON-compatible data with sorted keys and no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
