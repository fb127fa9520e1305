"""What an actor may do with a call or a run (`approvals.calls.options`), as tables; and that decide agrees.

Pure and fast: no database. The last tests hold the store's verdict check (`check_verdict`,
`_check_decidable`) to the same answers, with the errors and texts clients know.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

import pytest

from approvals.calls.options import (
    CallOptions,
    CallRefusal,
    RunRefusal,
    call_options,
    reviewer_refusal,
    run_options,
)
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove, Verdict
from approvals.exceptions import Conflict, Forbidden, UserError
from approvals.store import Actor
from approvals.store.decision_rules import _check_decidable, check_verdict
from approvals.store.models import ToolCallRow

ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")
CAROL = Actor("carol", "admin")
VICTOR = Actor("victor", "viewer")
CI_TOKEN = Actor("ci", "reviewer", person=False)
OPS_TOKEN = Actor("ops", "admin", person=False)
VIEWER_TOKEN = Actor("dash", "viewer", person=False)
ACTORS = (ALICE, BOB, CAROL, VICTOR, CI_TOKEN, OPS_TOKEN, VIEWER_TOKEN)

OPEN = {CallStatus.PENDING, CallStatus.OUTCOME_UNKNOWN}
"""The calls a verdict may change, written out here so the table pins the rule."""
ENDED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


# --- who may decide at all: role, and a person for approvals -------------------------------


@pytest.mark.parametrize(
    ("actor", "decide", "approve"),
    [
        (VICTOR, CallRefusal.NOT_REVIEWER, CallRefusal.NOT_REVIEWER),
        (VIEWER_TOKEN, CallRefusal.NOT_REVIEWER, CallRefusal.NOT_REVIEWER),
        (ALICE, None, None),
        (CI_TOKEN, None, CallRefusal.NOT_A_PERSON),
        (CAROL, None, None),
        (OPS_TOKEN, None, CallRefusal.NOT_A_PERSON),
    ],
    ids=["viewer", "viewer token", "reviewer", "reviewer token", "admin", "admin token"],
)
def test_roles_and_service_tokens(actor: Actor, decide: CallRefusal | None, approve: CallRefusal | None) -> None:
    assert reviewer_refusal(actor, approving=False) is decide
    assert reviewer_refusal(actor, approving=True) is approve
    options = call_options(actor, CallStatus.PENDING, started_by="someone else")
    assert options.decide_refusal is decide and options.approve_refusal is approve
    assert options.may_deny is options.may_answer is options.may_decide is (decide is None)
    assert options.may_approve is options.may_edit is (approve is None)


# --- every call status ---------------------------------------------------------------------


def test_the_open_table_names_every_call_status() -> None:
    assert set(CallStatus) >= OPEN


@pytest.mark.parametrize("status", tuple(CallStatus))
@pytest.mark.parametrize("actor", [ALICE, CAROL, VICTOR, CI_TOKEN], ids=["reviewer", "admin", "viewer", "token"])
def test_only_open_calls_take_a_verdict(status: CallStatus, actor: Actor) -> None:
    options = call_options(actor, status, started_by=None)
    is_open = status in OPEN
    assert options.open is is_open
    if not actor.can("reviewer"):  # the role comes first, open or not
        assert options.decide_refusal is options.approve_refusal is CallRefusal.NOT_REVIEWER
        assert options.why_not_decide == "You can read this call; deciding needs the reviewer role."
    elif not is_open:
        assert options.decide_refusal is CallRefusal.NOT_OPEN
        assert options.approve_refusal is (CallRefusal.NOT_A_PERSON if not actor.person else CallRefusal.NOT_OPEN)
    else:
        assert options.may_decide and options.may_deny and options.may_answer
        assert options.may_approve is actor.person


# --- one's own run ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "status", "started_by", "standing", "approve"),
    [
        (ALICE, CallStatus.PENDING, "alice", {}, CallRefusal.OWN_RUN),
        (ALICE, CallStatus.OUTCOME_UNKNOWN, "alice", {}, CallRefusal.OWN_RUN),
        (ALICE, CallStatus.PENDING, "bob", {}, None),
        (ALICE, CallStatus.PENDING, None, {}, None),
        (ALICE, CallStatus.PENDING, "alice", {"d": {"alice"}}, CallRefusal.OWN_RUN),  # before the quorum
        (ALICE, CallStatus.APPROVED, "alice", {}, CallRefusal.NOT_OPEN),  # after the call's state
        (CAROL, CallStatus.PENDING, "carol", {}, CallRefusal.OWN_RUN),  # admins too
        (CI_TOKEN, CallStatus.PENDING, "ci", {}, CallRefusal.NOT_A_PERSON),
        (VICTOR, CallStatus.PENDING, "victor", {}, CallRefusal.NOT_REVIEWER),
    ],
)
def test_whoever_started_a_run_may_deny_or_answer_its_calls_but_not_approve_them(
    actor: Actor, status: CallStatus, started_by: str | None, standing: dict[str, set[str]], approve: CallRefusal | None
) -> None:
    options = call_options(actor, status, started_by=started_by, approvals_required=2, digest="d", standing=standing)
    assert options.approve_refusal is approve
    assert options.may_approve is options.may_edit is (approve is None)
    if approve is CallRefusal.OWN_RUN:
        assert options.may_deny and options.may_answer
        assert options.why_not_approve == "You started this run, so another reviewer must approve its calls."


# --- one's own call: whoever asked for it -------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "status", "requested_by", "started_by", "approve"),
    [
        (ALICE, CallStatus.PENDING, "alice", "bob", CallRefusal.OWN_CALL),  # asked in a run another started
        (ALICE, CallStatus.OUTCOME_UNKNOWN, "alice", "bob", CallRefusal.OWN_CALL),
        (ALICE, CallStatus.PENDING, "alice", "alice", CallRefusal.OWN_CALL),  # her own session: the call first
        (ALICE, CallStatus.PENDING, "alice", None, CallRefusal.OWN_CALL),
        (BOB, CallStatus.PENDING, "alice", "bob", CallRefusal.OWN_RUN),  # the starter still may not
        (BOB, CallStatus.PENDING, "alice", "carol", None),
        (ALICE, CallStatus.PENDING, None, None, None),
        (CAROL, CallStatus.PENDING, "carol", "bob", CallRefusal.OWN_CALL),  # admins too
        (ALICE, CallStatus.APPROVED, "alice", "bob", CallRefusal.NOT_OPEN),  # after the call's state
        (CI_TOKEN, CallStatus.PENDING, "ci", "bob", CallRefusal.NOT_A_PERSON),
        (VICTOR, CallStatus.PENDING, "victor", "bob", CallRefusal.NOT_REVIEWER),
    ],
)
def test_whoever_asked_for_a_call_may_deny_or_answer_it_but_never_approve_or_edit_it(
    actor: Actor, status: CallStatus, requested_by: str | None, started_by: str | None, approve: CallRefusal | None
) -> None:
    options = call_options(actor, status, started_by=started_by, requested_by=requested_by)
    assert options.approve_refusal is approve
    assert options.may_approve is options.may_edit is (approve is None)
    if approve is CallRefusal.OWN_CALL:
        assert options.may_deny and options.may_answer
        assert options.why_not_approve == "You asked for this call, so another reviewer must approve it."


def test_asking_comes_before_the_groups_and_the_quorum() -> None:
    options = call_options(
        ALICE,
        CallStatus.PENDING,
        started_by="bob",
        requested_by="alice",
        approvals_required=2,
        digest="d",
        standing={"d": {"alice"}},
        approver_groups=["finance"],
    )
    assert options.approve_refusal is CallRefusal.OWN_CALL and options.already_approved


@pytest.mark.parametrize("verdict", [Approve(), EditAndApprove(args={"n": 2}), Approve(args_digest="d")])
def test_decide_refuses_the_asker_with_the_same_sentence(verdict: Verdict) -> None:
    call = _call(CallStatus.PENDING)
    call.requested_by = "alice"
    refused = _store_refusal(verdict, call, "bob", ALICE)
    assert type(refused) is Forbidden
    assert str(refused) == "You asked for this call, so another reviewer must approve it."
    assert _store_refusal(Deny(reason="not like this"), call, "bob", ALICE) is None
    assert _store_refusal(Answer(content="done by hand"), call, "bob", ALICE) is None
    assert _store_refusal(verdict, call, "bob", CAROL) is None  # another reviewer, the run's starter apart


# --- quorum: one standing approval per person and arguments -------------------------------


@pytest.mark.parametrize(
    ("actor", "standing", "required", "may_approve", "already", "approvals", "note"),
    [
        (ALICE, {}, 2, True, False, 0, None),
        (ALICE, {"d": {"alice"}}, 2, False, True, 1, "You approved these arguments; 1 more approval(s) needed."),
        (BOB, {"d": {"alice"}}, 2, True, False, 1, None),
        (ALICE, {"old": {"alice"}}, 2, True, False, 0, None),  # an edit starts the count again
        (ALICE, {"old": {"alice"}, "d": {"bob"}}, 2, True, False, 1, None),
        (CAROL, {"d": {"alice", "bob"}}, 3, True, False, 2, None),
        (BOB, {"d": {"alice", "bob"}}, 3, False, True, 2, "You approved these arguments; 1 more approval(s) needed."),
        (ALICE, {"d": {"alice"}}, 3, False, True, 1, "You approved these arguments; 2 more approval(s) needed."),
        (ALICE, {"d": {"alice"}}, 1, False, True, 1, "You approved these arguments; 0 more approval(s) needed."),
    ],
)
def test_a_quorum_takes_different_people(
    actor: Actor,
    standing: dict[str, set[str]],
    required: int,
    may_approve: bool,
    already: bool,
    approvals: int,
    note: str | None,
) -> None:
    options = call_options(
        actor, CallStatus.PENDING, started_by="svc", approvals_required=required, digest="d", standing=standing
    )
    assert (options.may_approve, options.already_approved, options.approvals) == (may_approve, already, approvals)
    assert options.approve_refusal is (None if may_approve else CallRefusal.ALREADY_APPROVED)
    assert options.may_edit is may_approve
    assert options.may_deny and options.may_answer  # an approver may still deny or answer
    assert options.why_not_approve == note
    assert options.approvals_required == required


@pytest.mark.parametrize(
    ("status", "required", "shown"),
    [
        (CallStatus.PENDING, 2, True),
        (CallStatus.OUTCOME_UNKNOWN, 3, True),
        (CallStatus.PENDING, 1, False),
        (CallStatus.APPROVED, 2, False),
        (CallStatus.DENIED, 2, False),
    ],
)
def test_a_quorums_progress_is_shown_while_it_counts(status: CallStatus, required: int, shown: bool) -> None:
    options = call_options(ALICE, status, started_by=None, approvals_required=required)
    assert options.counts_approvals is shown


def test_without_standing_approvals_the_quorum_is_left_to_the_store() -> None:
    options = call_options(ALICE, CallStatus.PENDING, started_by=None, approvals_required=2)
    assert options.may_approve and options.approvals == 0 and not options.already_approved


def test_options_are_a_small_frozen_value_and_say_a_denial_needs_a_reason() -> None:
    options = call_options(ALICE, CallStatus.PENDING, started_by=None)
    assert options.denial_needs_reason is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.open = False  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(CallOptions)] == [
        "open",
        "decide_refusal",
        "approve_refusal",
        "approvals",
        "approvals_required",
        "already_approved",
        "edit_refusal",
    ]


@pytest.mark.parametrize("refusal", tuple(CallRefusal))
def test_every_refusal_reads_as_a_sentence(refusal: CallRefusal) -> None:
    options = CallOptions(True, refusal, refusal, 1, 2, False)
    assert options.why_not_approve and options.why_not_approve.endswith(".")
    assert options.why_not_decide == options.why_not_approve


# --- runs: cancel and retry -----------------------------------------------------------------


@pytest.mark.parametrize("status", tuple(RunStatus))
@pytest.mark.parametrize(
    ("actor", "admin"),
    [(VICTOR, False), (ALICE, False), (CI_TOKEN, False), (CAROL, True), (OPS_TOKEN, True)],
    ids=["viewer", "reviewer", "reviewer token", "admin", "admin token"],
)
def test_admins_cancel_runs_that_have_not_ended_and_retry_failed_ones(
    status: RunStatus, actor: Actor, admin: bool
) -> None:
    options = run_options(status, actor)
    assert options.may_cancel is (admin and status not in ENDED)
    assert options.may_retry is (admin and status == RunStatus.FAILED)
    if not admin:
        assert options.cancel_refusal is options.retry_refusal is RunRefusal.NOT_ADMIN
    else:
        assert options.cancel_refusal is (RunRefusal.ENDED if status in ENDED else None)
        assert options.retry_refusal is (None if status == RunStatus.FAILED else RunRefusal.NOT_FAILED)


# --- the store's verdict check gives the same answers ----------------------------------------


def _call(status: CallStatus, decided_by: str | None = None) -> ToolCallRow:
    fields: dict[str, Any] = {column.key: None for column in ToolCallRow.__table__.columns}
    fields |= {"id": "c1", "run_id": "r1", "status": status, "args": {"n": 1}, "args_digest": "d"}
    fields |= {"approvals_required": 1, "decided_by": decided_by}
    return ToolCallRow(**fields)


def _store_refusal(verdict: Verdict, call: ToolCallRow, started_by: str | None, actor: Actor) -> Exception | None:
    try:
        check_verdict(verdict, actor)
        _check_decidable(call, started_by, verdict, actor)
    except (Forbidden, Conflict, UserError) as exc:
        return exc
    return None


@pytest.mark.parametrize("status", tuple(CallStatus))
def test_decide_refuses_exactly_what_the_options_refuse(status: CallStatus) -> None:
    call = _call(status)
    for actor in ACTORS:
        for started_by, requested_by in itertools.product((None, actor.id, "someone else"), repeat=2):
            call.requested_by = requested_by
            options = call_options(actor, status, started_by=started_by, requested_by=requested_by)
            for verdict, allowed in (
                (Approve(), options.may_approve),
                (Approve(args_digest="d"), options.may_approve),
                (EditAndApprove(args={"n": 2}, args_digest="d"), options.may_edit),
                (Deny(reason="no"), options.may_deny),
                (Answer(content="done"), options.may_answer),
            ):
                refused = _store_refusal(verdict, call, started_by, actor)
                assert (refused is None) is allowed, (actor, started_by, verdict, refused)


@pytest.mark.parametrize(
    ("actor", "status", "started_by", "verdict", "error", "text"),
    [
        (VICTOR, CallStatus.PENDING, None, Deny(reason="no"), Forbidden, r"'victor' \(viewer\) may not decide calls"),
        (VICTOR, CallStatus.DENIED, None, Approve(), Forbidden, r"'victor' \(viewer\) may not decide calls"),
        (CI_TOKEN, CallStatus.PENDING, None, Approve(), Forbidden, "'ci' is a service token: approvals come from"),
        (CI_TOKEN, CallStatus.DENIED, None, Approve(), Forbidden, "'ci' is a service token"),  # before the state
        (ALICE, CallStatus.PENDING, None, Deny(reason="  "), UserError, "A denial needs a reason: the model reads it"),
        (ALICE, CallStatus.DENIED, None, Deny(reason=""), UserError, "A denial needs a reason"),  # before the state
        (ALICE, CallStatus.DENIED, None, Approve(), Conflict, "Call 'c1' is no longer waiting .* it was denied by bob"),
        (ALICE, CallStatus.ANSWERED, "alice", Approve(args_digest="x"), Conflict, "no longer waiting"),
        (ALICE, CallStatus.PENDING, "alice", Approve(args_digest="x"), Conflict, "changed since you loaded them"),
        (ALICE, CallStatus.PENDING, "alice", Approve(), Forbidden, "'alice' started this run and may not approve"),
        (ALICE, CallStatus.PENDING, "alice", EditAndApprove(args={}), Forbidden, "may not approve its calls"),
    ],
)
def test_decide_keeps_its_errors_and_their_order(
    actor: Actor, status: CallStatus, started_by: str | None, verdict: Verdict, error: type[Exception], text: str
) -> None:
    refused = _store_refusal(verdict, _call(status, decided_by="bob"), started_by, actor)
    assert type(refused) is error and re.search(text, str(refused)), refused
    if isinstance(refused, Conflict) and "no longer waiting" in text:
        assert (refused.status, refused.decided_by) == (status, "bob")


def test_an_engine_that_cannot_run_edits_takes_the_edit_away_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    from approvals.calls import engines

    reason = "its framework runs calls only as the model made them"
    monkeypatch.setattr(engines, "_lazy", {**engines._lazy})  # the registration ends with the test
    engines.register_engine("nowhere.engine:engine", name="edits_nothing_test", cannot_edit=reason)
    assert engines.edit_refusal("edits_nothing_test") == reason
    assert engines.edit_refusal("native") is None

    options = call_options(ALICE, CallStatus.PENDING, started_by="bob", engine="edits_nothing_test")
    assert (options.may_approve, options.may_deny, options.may_answer) == (True, True, True)
    assert not options.may_edit and options.edit_refusal is CallRefusal.ENGINE_CANNOT_EDIT
    assert call_options(ALICE, CallStatus.PENDING, started_by="bob", engine="native").may_edit
    # a refusal that already stops the approval is the one said
    assert call_options(VICTOR, CallStatus.PENDING, started_by="bob", engine="edits_nothing_test").edit_refusal is (
        CallRefusal.NOT_REVIEWER
    )

    call = _call(CallStatus.PENDING)
    edit = EditAndApprove(args={"amount": 1}, args_digest=call.current_digest)
    with pytest.raises(Conflict, match="arguments its model made"):
        _check_decidable(call, "bob", edit, ALICE, engine="edits_nothing_test")
    _check_decidable(call, "bob", Approve(args_digest=call.current_digest), ALICE, engine="edits_nothing_test")
