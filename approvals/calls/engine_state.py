"""A resumable run's state kept as one document (`StateKind.SNAPSHOT` in `approvals.engines.seam`).

It lives with the calls, below the store, because the store keeps it: one row a run
(`run_states`), replaced in the same transaction as the messages and calls of the write that
ends a turn, so the document and the stored history never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ("Snapshot",)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A run's whole state as one document: the engine's own JSON, under the engine's own version.

    `version` says which shape `data` has; an engine that meets a version it cannot read says
    so in words (a `UserError`) rather than guessing, so a stored run survives an upgrade of
    its framework or fails clearly.
    """

    version: int
    data: dict[str, Any]
