"""Where runs and calls stand: the statuses, the sets the rules use, and the facts a row's state implies.

Every layer (store, worker, web, API schemas) imports these; none restates a status
name or a set of them. A status is stored as its value; the enums are `StrEnum`, so a
member equals its stored text. What a call's row implies (its current arguments and
digest, whether it is open) are hybrid properties of `ToolCallRow`, usable in Python and
in queries alike.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeAlias, TypeGuard

__all__ = (
    "APPROVAL_VERDICTS",
    "DECIDED_CALL_STATUSES",
    "FINAL_RUN_STATUSES",
    "NOT_RUN_CALL_STATUSES",
    "OPEN_CALL_STATUSES",
    "RESUMABLE_RUN_STATUSES",
    "SETTLED_RUN_STATUSES",
    "CallStatus",
    "ROLE_RANK",
    "Role",
    "RunStatus",
    "is_role",
)


class RunStatus(StrEnum):
    """A run's place in its life: waiting for people, queued (`ready`), held by a worker, running elsewhere, or ended.

    Members are in the order lists and filters show them.
    """

    AWAITING_APPROVAL = "awaiting_approval"
    READY = "ready"
    RESUMING = "resuming"
    RUNNING = "running"
    """The agent runs elsewhere (a gate's session) and no call of it waits for a person."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class CallStatus(StrEnum):
    """A call that needed a person: waiting, decided, running, or settled."""

    PENDING = "pending"
    OUTCOME_UNKNOWN = "outcome_unknown"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


FINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
"""Runs that ended: nothing continues or cancels them."""
SETTLED_RUN_STATUSES = (RunStatus.AWAITING_APPROVAL, *FINAL_RUN_STATUSES)
"""Runs of resumable engines no worker is busy with: waiting for people, or ended."""
RESUMABLE_RUN_STATUSES = (RunStatus.READY, RunStatus.RESUMING)
"""Runs a worker may continue now, or is continuing."""

OPEN_CALL_STATUSES = (CallStatus.PENDING, CallStatus.OUTCOME_UNKNOWN)
"""Calls waiting for a person: the inbox, and the only calls a verdict may change."""
DECIDED_CALL_STATUSES = (CallStatus.APPROVED, CallStatus.DENIED, CallStatus.EXPIRED, CallStatus.ANSWERED)
"""Calls people decided, whose verdicts wait for the run to act on them."""
NOT_RUN_CALL_STATUSES = (CallStatus.PENDING, CallStatus.APPROVED)
"""Calls that have not run, which cancelling their run cancels."""

APPROVAL_VERDICTS = ("approve", "edit")
"""Verdicts that count towards a call's quorum while they stand (not used up by running the call)."""

Role: TypeAlias = Literal["viewer", "reviewer", "admin"]
"""What a person or token may do: `viewer` reads, `reviewer` decides, `admin` also manages."""
ROLE_RANK: dict[str, int] = {"viewer": 0, "reviewer": 1, "admin": 2}
"""Each role can do what the roles below it can."""


def is_role(text: str) -> TypeGuard[Role]:
    """Whether `text` names a role."""
    return text in ROLE_RANK
