"""A reviewer's verdict on a call: the one vocabulary of the core.

Every way to decide (the inbox, the JSON API, Slack, e-mail, a standing rule) ends in one of
these, and `approvals.store.decision_rules.plan_decision` says what it does to a call. Engines
translate them at their edge (the native agent's `DeferredToolResults`, a hook's answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = ("Answer", "Approve", "Deny", "EditAndApprove", "Verdict")


@dataclass(frozen=True)
class Approve:
    """Run the call as it stands."""

    args_digest: str | None = None
    """Digest of the arguments the reviewer saw; the approval is refused if they changed since."""


@dataclass(frozen=True)
class EditAndApprove:
    """Run the call with these arguments instead; they must already be validated by the tool's validator."""

    args: dict[str, Any]
    args_digest: str | None = None
    """Digest of the arguments the reviewer started editing from."""


@dataclass(frozen=True)
class Deny:
    """Do not run the call; the reason goes to the model."""

    reason: str


@dataclass(frozen=True)
class Answer:
    """Do not run the call; `content` is the result the model receives."""

    content: Any


Verdict: TypeAlias = Approve | EditAndApprove | Deny | Answer
