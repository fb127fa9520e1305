"""What an actor may do with a call or a run: the rules, the one copy, as pure functions of plain facts.

`call_options` answers for one actor and one call: may they approve (or edit), deny, answer,
and if not, why. The store's verdict check (`store.decision_rules.check_verdict` and
`_check_decidable`) refuses by these answers, with its own errors; the reviewer's pages
show buttons by them, with `why_not_approve` / `why_not_decide` as the sentence to show.
`run_options` does the same for what an admin may do with a run (cancel, retry).

Nothing here reads a database: the facts are the call's status, the digest of its current
arguments, its quorum, who asked for it, who started its run and who holds standing approvals
of what (`DecisionRow.is_standing`). The rules, in the order they refuse:

1. deciding takes the reviewer role (`reviewer_refusal`);
2. approving takes a person: a service token belongs to nobody, so its approval would count for nobody;
3. only an open call takes a verdict (`OPEN_CALL_STATUSES`);
4. whoever asked for a call may not approve it (`ToolCallRow.requested_by`: a gate's asking token or
   user, the starter of a worker's run), whichever channel they use; nor may
5. the person who started a run approve its calls (both may deny or answer them);
6. a call a rule routed to groups (`approver_groups`) is approved only by their members;
   anyone who may decide may still deny or answer it (neither runs the tool);
7. a reviewer holds at most one standing approval of the same arguments: a quorum takes different people.

An edit is an approval of other arguments, so it follows the approval's rules. A denial
needs a reason; that is a check of the verdict itself (`check_verdict`), not of who may
do what, and `CallOptions.denial_needs_reason` tells a form so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from .engines import edit_refusal
from .states import FINAL_RUN_STATUSES, OPEN_CALL_STATUSES, CallStatus, RunStatus

if TYPE_CHECKING:
    from .actors import Actor

__all__ = (
    "NO_APPROVALS",
    "admin_refusal",
    "CallOptions",
    "CallRefusal",
    "RunOptions",
    "RunRefusal",
    "call_options",
    "in_groups",
    "refusal_sentence",
    "reviewer_refusal",
    "run_options",
)


class CallRefusal(StrEnum):
    """Why an actor may not give a call a verdict; the store turns each into its error, a page into a sentence."""

    NOT_REVIEWER = "not_reviewer"
    """Deciding calls takes the reviewer role."""
    NOT_A_PERSON = "not_a_person"
    """Approvals come from people, not from service tokens."""
    NOT_OPEN = "not_open"
    """The call no longer waits for a decision."""
    OWN_CALL = "own_call"
    """The actor asked for the call (`ToolCallRow.requested_by`): another reviewer approves it."""
    OWN_RUN = "own_run"
    """The actor started the call's run: another reviewer approves its calls."""
    NOT_IN_GROUPS = "not_in_groups"
    """A rule routed the call to groups the actor is not in."""
    ALREADY_APPROVED = "already_approved"
    """The actor holds a standing approval of the call's current arguments: a quorum takes different people."""
    ENGINE_CANNOT_EDIT = "engine_cannot_edit"
    """The call's agent framework runs a call only with the arguments its model made (`calls.engines.edit_refusal`)."""


class RunRefusal(StrEnum):
    """Why an actor may not cancel or retry a run."""

    NOT_ADMIN = "not_admin"
    """Cancelling and retrying runs takes the admin role."""
    ENDED = "ended"
    """The run ended (`FINAL_RUN_STATUSES`): nothing cancels it."""
    NOT_FAILED = "not_failed"
    """Only a failed run can be retried."""


NO_APPROVALS: Mapping[str, Collection[str]] = MappingProxyType({})
"""No standing approvals of any arguments."""


def reviewer_refusal(actor: Actor, *, approving: bool) -> CallRefusal | None:
    """Rules 1 and 2, which need no call: whether the actor may decide calls at all, and approve them."""
    if not actor.can("reviewer"):
        return CallRefusal.NOT_REVIEWER
    if approving and not actor.person:
        return CallRefusal.NOT_A_PERSON
    return None


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What one actor may do with one call now, and why not."""

    open: bool
    """The call waits for a decision (pending, or its outcome unknown)."""
    decide_refusal: CallRefusal | None
    """Why the actor may not deny or answer the call; None: they may."""
    approve_refusal: CallRefusal | None
    """Why the actor may not approve (or edit and approve) the call; None: they may."""
    approvals: int
    """Standing approvals of the current arguments: the quorum's count so far."""
    approvals_required: int
    already_approved: bool
    """The actor holds a standing approval of the current arguments."""
    edit_refusal: CallRefusal | None = None
    """Why the actor may not edit the arguments and approve: what an approval takes, and an engine that can run it."""

    denial_needs_reason: ClassVar[bool] = True
    """A denial is refused without a reason (the model reads it); forms mark the field required."""

    @property
    def may_decide(self) -> bool:
        """Whether the actor may give the call any verdict."""
        return self.decide_refusal is None

    @property
    def may_approve(self) -> bool:
        return self.approve_refusal is None

    @property
    def may_edit(self) -> bool:
        """An edit approves other arguments, so it takes what an approval takes, and an engine that runs edits."""
        return self.edit_refusal is None

    @property
    def may_deny(self) -> bool:
        return self.decide_refusal is None

    @property
    def may_answer(self) -> bool:
        return self.decide_refusal is None

    @property
    def counts_approvals(self) -> bool:
        """Whether a quorum's progress ("1 of 2 approvals") is worth showing: an open call that needs several."""
        return self.open and self.approvals_required > 1

    @property
    def approvals_missing(self) -> int:
        return max(self.approvals_required - self.approvals, 0)

    @property
    def why_not_approve(self) -> str | None:
        """Why the actor may not approve, as a sentence to show them; None when they may."""
        return _sentence(self.approve_refusal, self.approvals_missing)

    @property
    def why_not_decide(self) -> str | None:
        """Why the actor may not decide the call at all, as a sentence to show them; None when they may."""
        return _sentence(self.decide_refusal, self.approvals_missing)


def call_options(
    actor: Actor,
    status: CallStatus,
    *,
    started_by: str | None,
    requested_by: str | None = None,
    approvals_required: int = 1,
    digest: str = "",
    standing: Mapping[str, Collection[str]] = NO_APPROVALS,
    approver_groups: Collection[str] | None = None,
    engine: str | None = None,
) -> CallOptions:
    """What `actor` may do with a call in `status`, asked for by `requested_by`, of a run `started_by`, by the
    rules above.

    `digest` is the digest of the call's current arguments and `standing` who holds a standing
    approval, by the digest they approved; without them rule 7 is not applied (the store
    applies it to the arguments an approval names, once it has read them). `approver_groups`
    are the groups a rule routed the call to (None or empty: any reviewer); `engine` the engine
    of the call's run, whose framework may not run edited arguments (`edit_refusal`).
    """
    is_open = status in OPEN_CALL_STATUSES
    approvers = standing.get(digest, ())
    already = actor.id in approvers
    decide = reviewer_refusal(actor, approving=False)
    approve = reviewer_refusal(actor, approving=True)
    if not is_open:
        decide = decide or CallRefusal.NOT_OPEN
        approve = approve or CallRefusal.NOT_OPEN
    elif approve is None:
        if requested_by == actor.id:
            approve = CallRefusal.OWN_CALL
        elif started_by == actor.id:
            approve = CallRefusal.OWN_RUN
        elif not in_groups(actor, approver_groups):
            approve = CallRefusal.NOT_IN_GROUPS
        elif already:
            approve = CallRefusal.ALREADY_APPROVED
    edit = approve
    if edit is None and engine is not None and edit_refusal(engine) is not None:
        edit = CallRefusal.ENGINE_CANNOT_EDIT
    return CallOptions(is_open, decide, approve, len(approvers), approvals_required, already, edit)


def in_groups(actor: Actor, approver_groups: Collection[str] | None) -> bool:
    """Whether `actor` is among those a call is routed to: any reviewer when no groups are named."""
    return not approver_groups or not actor.groups.isdisjoint(approver_groups)


def refusal_sentence(refusal: CallRefusal) -> str:
    """What a refusal says to the person refused, in the page and in the API's error alike."""
    return _SENTENCES.get(refusal, refusal.value)


def _sentence(refusal: CallRefusal | None, missing: int) -> str | None:
    if refusal is None:
        return None
    if refusal is CallRefusal.ALREADY_APPROVED:
        return f"You approved these arguments; {missing} more approval(s) needed."
    return _SENTENCES[refusal]


_SENTENCES: dict[CallRefusal, str] = {
    CallRefusal.NOT_REVIEWER: "You can read this call; deciding needs the reviewer role.",
    CallRefusal.NOT_A_PERSON: "A service token may not approve: approvals come from people.",
    CallRefusal.NOT_OPEN: "This call no longer waits for a decision.",
    CallRefusal.OWN_CALL: "You asked for this call, so another reviewer must approve it.",
    CallRefusal.OWN_RUN: "You started this run, so another reviewer must approve its calls.",
    CallRefusal.NOT_IN_GROUPS: "A rule routed this call to other groups: only their members may approve it. "
    "You may still deny it.",
    CallRefusal.ENGINE_CANNOT_EDIT: "This agent's framework runs a call only with the arguments its model made: "
    "approve it as it is, deny it saying what to change, or answer in its place.",
}


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What one actor may do with one run now, and why not."""

    cancel_refusal: RunRefusal | None
    """Why the actor may not cancel the run; None: they may."""
    retry_refusal: RunRefusal | None
    """Why the actor may not send the run back to the workers; None: they may."""

    @property
    def may_cancel(self) -> bool:
        return self.cancel_refusal is None

    @property
    def may_retry(self) -> bool:
        return self.retry_refusal is None


def admin_refusal(actor: Actor) -> RunRefusal | None:
    """Whether `actor` may manage runs at all, whichever run: the store asks before it reads the run."""
    return None if actor.can("admin") else RunRefusal.NOT_ADMIN


def run_options(status: RunStatus, actor: Actor) -> RunOptions:
    """What `actor` may do with a run in `status`: an admin cancels a run that has not ended, retries a failed one."""
    refusal = admin_refusal(actor)
    if refusal is not None:
        return RunOptions(refusal, refusal)
    return RunOptions(
        RunRefusal.ENDED if status in FINAL_RUN_STATUSES else None,
        None if status == RunStatus.FAILED else RunRefusal.NOT_FAILED,
    )
