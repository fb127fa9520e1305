"""Canonical JSON and digests: one byte sequence per value, so equal data hashes equally.

Used for a tool definition's `version` and for the digest that binds a reviewer's
approval to exactly the arguments they saw.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialize JSON-compatible data with sorted keys and no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def non_finite_path(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where `value` holds an infinite or NaN float (JSON has neither), or None.

    A model can write `5.4e4673`, which parses as infinity; such a value can be neither
    digested, stored as JSON nor shown, so validation refuses it and names the field.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_path(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = non_finite_path(item, (*path, index))
            if found is not None:
                return found
    return None
