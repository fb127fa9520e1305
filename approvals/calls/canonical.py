"""Canonical JSON and digests: one byte sequence per value, so equal data hashes equally.

Used for a tool definition's `version`, for the digest that binds a reviewer's approval
to exactly the arguments they saw, and for the content the audit chain hashes.

The form must survive a round trip through every database we store JSON in, because
digests and hashes are recomputed from what is read back. PostgreSQL's JSONB keeps
numbers as `numeric`, which has no exponent and no negative zero: `1e16` comes back as
the integer `10000000000000000`, `-0.0` as `0.0`. So canonical JSON writes numbers the
way they come back: a float of 1e16 or more (always a whole number) as its integer
digits, and negative zero as `0.0`. Smaller floats already come back as the same float.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

__all__ = ("canonical_json", "digest", "legacy_canonical_json", "non_finite_path")


def canonical_json(value: Any) -> str:
    """Serialize JSON-compatible data with sorted keys, no insignificant whitespace, numbers as databases keep them."""
    text = legacy_canonical_json(value)
    # Python writes exactly the numbers a database rewrites with an exponent ("1e+16") or as "-0.0";
    # text without either (the usual case) needs no second pass. A string holding them costs one.
    if "e+" in text or "-0.0" in text:
        text = legacy_canonical_json(_as_stored(value))
    return text


def legacy_canonical_json(value: Any) -> str:
    """The form before numbers were normalized: what audit events written before it were hashed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _as_stored(value: Any) -> Any:
    """`value` with each float as PostgreSQL's numeric gives it back: large ones as integers, no negative zero."""
    if isinstance(value, float):
        if value == 0.0:
            return 0.0
        if abs(value) >= 1e16 and math.isfinite(value):
            return int(Decimal(repr(value)))  # the digits Python writes, as numeric keeps them, not the binary value
        return value
    if isinstance(value, dict):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_stored(item) for item in value]
    return value


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
