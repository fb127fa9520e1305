"""A reviewer's edit as a field-by-field diff: what the model asked for against what was approved.

Two JSON blobs compared by eye hide the one field that changed; this names it. Nested objects
are compared by their dotted path, so `{"to": {"name": ...}}` reads `to.name`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ("FieldChange", "field_changes", "changes_words", "value_words")

_MISSING: Any = object()


@dataclass(frozen=True, kw_only=True)
class FieldChange:
    """One argument that differs between the request and the edit."""

    field: str
    """The argument's dotted path."""
    kind: Literal["changed", "added", "removed"]
    before: Any = None
    after: Any = None


def field_changes(before: Mapping[str, Any], after: Mapping[str, Any], *, prefix: str = "") -> list[FieldChange]:
    """The fields that differ, in sorted order; nested objects are walked, lists compared whole."""
    changes: list[FieldChange] = []
    for key in sorted({*before, *after}):
        path = f"{prefix}{key}"
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old is _MISSING:
            changes.append(FieldChange(field=path, kind="added", after=new))
        elif new is _MISSING:
            changes.append(FieldChange(field=path, kind="removed", before=old))
        elif isinstance(old, Mapping) and isinstance(new, Mapping):
            changes.extend(field_changes(old, new, prefix=path + "."))
        elif old != new or type(old) is not type(new):
            changes.append(FieldChange(field=path, kind="changed", before=old, after=new))
    return changes


def value_words(value: Any, *, limit: int = 60) -> str:
    """A value as a sentence quotes it: strings in quotes, the rest as JSON; long ones shortened whole."""
    text = "'" + value + "'" if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + "…" + ("'" if isinstance(value, str) else "")


def changes_words(changes: list[FieldChange]) -> str:
    """The changes in one line: "subject 'Refund' → 'Refund for A-1002'; cc removed"."""
    parts = []
    for change in changes:
        if change.kind == "changed":
            parts.append(f"{change.field} {value_words(change.before)} → {value_words(change.after)}")
        elif change.kind == "added":
            parts.append(f"{change.field} added: {value_words(change.after)}")
        else:
            parts.append(f"{change.field} removed (was {value_words(change.before)})")
    return "; ".join(parts) if parts else "no argument changed"
