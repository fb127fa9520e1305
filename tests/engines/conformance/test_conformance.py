"""The conformance suite: what every resumable engine does, through the real worker, on SQLite and PostgreSQL.

Each test runs for every engine in `registry.HARNESSES` on every database: a scripted model
makes neutral calls of the same two tools (`lookup_order`, safe; `refund(order_id, amount > 0)`,
which needs a person), people decide through the store and the service, the worker continues
the run, and the model's final answer says what it was told.
"""

from __future__ import annotations

import datetime as dt

import pytest

from approvals import InvalidEdit
from approvals.calls import clock
from approvals.calls.engines import edit_refusal
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Answer, Approve, Deny, EditAndApprove
from approvals.engines.view import ToolCallPart, ToolDeniedPart, ToolReturnPart
from approvals.exceptions import Conflict
from approvals.policy import parse_rule
from approvals.service import ApprovalService
from approvals.store import Actor

from .driver import Driver
from .script import Told, Turn

pytestmark = pytest.mark.anyio

ALICE = Actor("alice", "reviewer")
BOB = Actor("bob", "reviewer")
ADMIN = Actor("ada", "admin")

LOOKUP: Turn = [("lookup_order", {"order_id": "A-1"})]
REFUND: Turn = [("refund", {"order_id": "A-1", "amount": 5})]
REFUNDED = Told("result", "refund", "refunded 5 on A-1")
LEASE = 3.0
"""A worker process's lease: long enough that a loaded machine does not take the run from it before it dies."""


async def test_a_call_that_needs_a_person_pauses_with_validated_arguments_and_bad_ones_go_back_to_the_model(
    driver: Driver,
) -> None:
    bad = ("refund", {"order_id": "A-1", "amount": 0})
    run_id = await driver.start([*LOOKUP, bad], [("refund", {"order_id": "A-1", "amount": "5"})])
    run = await driver.run(run_id)
    assert (run.status, run.engine) == (RunStatus.AWAITING_APPROVAL, driver.harness.engine)
    assert driver.logged() == ["lookup A-1"]  # the safe tool ran; the refund waits
    (call,) = await driver.calls(run_id)  # the invalid call never reached anyone
    assert (call.tool_name, call.args, call.status) == ("refund", {"order_id": "A-1", "amount": 5}, "pending")
    assert call.args_digest == ApprovalService.args_digest(call.args)
    definition = await driver.store.calls.tool_definition(call.tool_version)
    assert definition.parameters_json_schema["properties"]["amount"]["exclusiveMinimum"] == 0

    await driver.store.calls.decide(call.id, Approve(), actor=ALICE)
    await driver.resume()
    lookup, retry, refunded = await driver.told(run_id)
    assert lookup == Told("result", "lookup_order", "order A-1: 2 items")
    assert (retry.kind, retry.tool) == ("retry", "refund") and "amount" in retry.content
    assert refunded == REFUNDED


async def test_approved_the_call_runs_once_and_the_run_completes(driver: Driver) -> None:
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    with pytest.raises(Conflict):  # an approval of other arguments than those stored
        await driver.store.calls.decide(call.id, Approve(args_digest="0" * 64), actor=ALICE)
    await driver.store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=ALICE)
    assert await driver.resume() == run_id
    assert await driver.told(run_id) == [REFUNDED]
    assert driver.logged() == ["refund A-1 5"]
    (call,) = await driver.calls(run_id)
    assert (call.status, call.result) == (CallStatus.SUCCEEDED, "refunded 5 on A-1")
    assert await driver.resume() is None  # nothing left: never run twice
    assert driver.logged() == ["refund A-1 5"]


async def test_an_edit_is_validated_by_the_tools_own_rules_and_the_edited_arguments_run(driver: Driver) -> None:
    if edit_refusal(driver.harness.engine) is not None:
        pytest.skip("this engine's framework cannot run edited arguments: the next test holds it to refusing them")
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    with pytest.raises(InvalidEdit) as refused:
        await driver.service.decide(call.id, EditAndApprove(args={"order_id": "A-1", "amount": 0}), actor=ALICE)
    assert [location for location, _ in refused.value.errors] == ["amount"]
    kept = await driver.store.calls.get_call(call.id)
    assert (kept.status, kept.current_args) == (CallStatus.PENDING, {"order_id": "A-1", "amount": 5})  # nothing lost
    assert await driver.store.calls.decisions_for(call.id) == []  # and nothing recorded

    await driver.service.decide(call.id, EditAndApprove(args={"order_id": "A-1", "amount": "3"}), actor=ALICE)
    await driver.resume()
    assert driver.logged() == ["refund A-1 3"]
    assert await driver.told(run_id) == [Told("result", "refund", "refunded 3 on A-1")]
    (call,) = await driver.calls(run_id)
    assert (call.status, call.current_args) == (CallStatus.SUCCEEDED, {"order_id": "A-1", "amount": 3})


async def test_an_engine_that_cannot_run_edits_refuses_them_and_offers_the_rest(driver: Driver) -> None:
    if edit_refusal(driver.harness.engine) is None:
        pytest.skip("this engine runs edited arguments: the test before holds it to that")
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    options = (await driver.store.calls.review_facts([call.id]))[call.id].options(ALICE, call)
    assert (options.may_approve, options.may_deny, options.may_answer, options.may_edit) == (True, True, True, False)
    with pytest.raises(Conflict, match="arguments its model made"):
        await driver.service.decide(call.id, EditAndApprove(args={"order_id": "A-1", "amount": 3}), actor=ALICE)
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.PENDING  # nothing lost
    await driver.store.calls.decide(call.id, Approve(), actor=ALICE)
    await driver.resume()
    assert driver.logged() == ["refund A-1 5"]  # approved as the model made it
    assert await driver.told(run_id) == [REFUNDED]


async def test_the_worker_that_paused_a_run_resumes_it_from_the_history_it_holds(driver: Driver) -> None:
    run_id = await driver.start(LOOKUP, REFUND, REFUND)
    warm = driver.worker("warm")  # with the agent `start` registered
    assert await warm.resume(run_id) is None  # nothing ready: the run waits on its first refund
    (call,) = await driver.calls(run_id)
    await driver.store.calls.decide(call.id, Approve(), actor=ALICE)
    assert await warm.resume(run_id) == run_id  # the cold worker paused it: this one reads the history whole
    _, second = await driver.calls(run_id)
    assert run_id in warm.histories.known()  # it paused the run again, and holds what it stored
    await driver.store.calls.decide(second.id, Approve(), actor=ALICE)
    assert await warm.resume(run_id) == run_id  # from what it holds: the claim sends only what is newer
    assert await driver.told(run_id) == [Told("result", "lookup_order", "order A-1: 2 items"), REFUNDED, REFUNDED]
    assert driver.logged() == ["lookup A-1", "refund A-1 5", "refund A-1 5"]
    assert (await driver.run(run_id)).message_count == len(await driver.store.runs.load_history(run_id))


async def test_a_denials_reason_reaches_the_model_and_the_tool_never_runs(driver: Driver) -> None:
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    await driver.store.calls.decide(call.id, Deny(reason="Outside the refund window."), actor=ALICE)
    await driver.resume()
    assert await driver.told(run_id) == [Told("denied", "refund", "Outside the refund window.")]
    assert driver.logged() == []
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.DENIED


async def test_an_answer_in_the_tools_place_reaches_the_model_and_the_tool_never_runs(driver: Driver) -> None:
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    await driver.store.calls.decide(call.id, Answer(content="Refunded by hand."), actor=ALICE)
    await driver.resume()
    assert await driver.told(run_id) == [Told("result", "refund", "Refunded by hand.")]
    assert driver.logged() == []
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.ANSWERED
    returns = [
        (p.tool_name, p.source) for m in await driver.view(run_id) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert returns == [("refund", "reviewer")]  # the run page says a person answered, not the tool


async def test_parallel_calls_are_decided_one_by_one_and_the_run_resumes_once_both_are(driver: Driver) -> None:
    run_id = await driver.start(
        [("refund", {"order_id": "A-1", "amount": 5}), ("refund", {"order_id": "B-2", "amount": 7})]
    )
    first, second = await driver.calls(run_id)
    assert [(c.args["order_id"], c.status) for c in (first, second)] == [("A-1", "pending"), ("B-2", "pending")]

    await driver.store.calls.decide(first.id, Approve(), actor=ALICE)
    assert await driver.resume() is None  # one of two decided: the run waits
    assert (await driver.run(run_id)).status == RunStatus.AWAITING_APPROVAL
    assert driver.logged() == []

    await driver.store.calls.decide(second.id, Deny(reason="Not this one."), actor=BOB)
    assert await driver.resume() == run_id
    assert driver.logged() == ["refund A-1 5"]
    assert sorted(await driver.told(run_id), key=str) == sorted(
        [REFUNDED, Told("denied", "refund", "Not this one.")], key=str
    )


async def test_a_call_a_rule_gives_a_quorum_waits_for_two_different_people(driver: Driver) -> None:
    await driver.store.rules.save_rule(
        parse_rule({"name": "refunds-by-two", "tool": "refund", "effect": "ask", "approvals": 2}), actor=ADMIN
    )
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    assert (call.approvals_required, call.rule_name) == (2, "refunds-by-two")

    await driver.store.calls.decide(call.id, Approve(), actor=ALICE)
    with pytest.raises(Conflict):  # the same person twice is still one approval
        await driver.store.calls.decide(call.id, Approve(), actor=ALICE)
    assert await driver.resume() is None
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.PENDING
    assert driver.logged() == []

    await driver.store.calls.decide(call.id, Approve(), actor=BOB)
    assert await driver.resume() == run_id
    assert await driver.told(run_id) == [REFUNDED]
    assert driver.logged() == ["refund A-1 5"]
    assert sorted(d.actor for d in await driver.store.calls.decisions_for(call.id)) == ["alice", "bob"]


async def test_a_call_left_past_its_time_expires_as_a_denial_the_model_reads(driver: Driver) -> None:
    await driver.store.rules.save_rule(
        parse_rule({"name": "refunds-within-an-hour", "tool": "refund", "effect": "ask", "ttl": "1h"}), actor=ADMIN
    )
    run_id = await driver.start(REFUND)
    (call,) = await driver.calls(run_id)
    assert call.expires_at is not None
    assert await driver.store.calls.expire(now=call.expires_at - dt.timedelta(seconds=1)) == 0
    assert await driver.store.calls.expire(now=call.expires_at + dt.timedelta(seconds=1)) == 1
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.EXPIRED

    assert await driver.resume() == run_id
    (told,) = await driver.told(run_id)
    assert (told.kind, told.tool) == ("denied", "refund")
    assert driver.logged() == []
    actions = [e.action for e in (await driver.store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert actions[:3] == ["run.started", "run.resumed", "call.requested"]
    assert "call.expired" in actions and actions[-1] == "run.completed"


async def test_a_rule_allows_a_call_before_anyone_is_asked(driver: Driver) -> None:
    await driver.store.rules.save_rule(
        parse_rule({"name": "small-refunds", "tool": "refund", "when": "args.amount < 10", "effect": "allow"}),
        actor=ADMIN,
    )
    run_id = await driver.start(REFUND)
    while await driver.resume() is not None:
        pass
    assert await driver.told(run_id) == [REFUNDED]
    assert driver.logged() == ["refund A-1 5"]
    (call,) = await driver.calls(run_id)
    assert (call.status, call.decided_by, call.rule_name) == (
        CallStatus.SUCCEEDED,
        "rule:small-refunds",
        "small-refunds",
    )
    actions = [e.action for e in (await driver.store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert "run.paused" not in actions  # nobody was asked


async def test_a_rule_denies_a_call_before_anyone_is_asked_and_the_model_reads_its_reason(driver: Driver) -> None:
    await driver.store.rules.save_rule(
        parse_rule({"name": "no-refunds", "tool": "refund", "effect": "deny", "reason": "Finance refunds."}),
        actor=ADMIN,
    )
    run_id = await driver.start(REFUND)
    while await driver.resume() is not None:
        pass
    assert await driver.told(run_id) == [Told("denied", "refund", "Finance refunds. (rule no-refunds)")]
    assert driver.logged() == []
    (call,) = await driver.calls(run_id)
    assert (call.status, call.decided_by) == (CallStatus.DENIED, "rule:no-refunds")


async def test_a_worker_killed_between_running_a_call_and_storing_its_result_never_runs_it_again(
    driver: Driver,
) -> None:
    run_id = await driver.start(REFUND, crash_in_refund=True)
    (call,) = await driver.calls(run_id)
    await driver.store.calls.decide(call.id, Approve(), actor=ALICE)

    killed = driver.worker_process(lease_seconds=LEASE)
    assert killed.returncode == -9, (killed.stdout, killed.stderr)  # SIGKILL, right after the refund happened
    assert driver.logged() == ["refund A-1 5"]
    assert (await driver.store.calls.get_call(call.id)).status == CallStatus.EXECUTING

    with clock.using(clock.SkippingClock()) as later:
        later.advance(LEASE + 0.1)  # the dead worker's lease runs out
        assert await driver.worker("rescuer").resume() is None  # nothing safe to run
        assert (
            await driver.store.calls.get_call(call.id)
        ).status == CallStatus.OUTCOME_UNKNOWN  # for a person to settle
        assert (await driver.run(run_id)).status == RunStatus.AWAITING_APPROVAL

        await driver.store.calls.decide(call.id, Answer(content="Refund confirmed by the bank."), actor=BOB)
        assert await driver.resume() == run_id
        assert await driver.told(run_id) == [Told("result", "refund", "Refund confirmed by the bank.")]
        assert driver.logged() == ["refund A-1 5"]  # never called a second time
        actions = [e.action for e in (await driver.store.audit.audit_events(run_id=run_id, newest_first=False)).items]
        assert "call.outcome_unknown" in actions


async def test_the_run_pages_view_of_the_history_lists_each_call_and_its_outcome(driver: Driver) -> None:
    run_id = await driver.start(
        LOOKUP, [("refund", {"order_id": "A-1", "amount": 5}), ("refund", {"order_id": "B-2", "amount": 7})]
    )
    first, second = await driver.calls(run_id)
    await driver.store.calls.decide(first.id, Approve(), actor=ALICE)
    await driver.store.calls.decide(second.id, Deny(reason="Not this one."), actor=ALICE)
    await driver.resume()
    assert (await driver.run(run_id)).status == RunStatus.COMPLETED

    story = await driver.service.run_story(run_id)  # what the run page renders
    assert (story.run.status, {c.id for c in story.calls}) == (RunStatus.COMPLETED, {first.id, second.id})
    parts = [part for message in story.history for part in message.parts]
    asked = [(p.tool_name, p.args_as_dict(), p.tool_call_id) for p in parts if isinstance(p, ToolCallPart)]
    assert [(name, args) for name, args, _ in asked] == [
        ("lookup_order", {"order_id": "A-1"}),
        ("refund", {"order_id": "A-1", "amount": 5}),
        ("refund", {"order_id": "B-2", "amount": 7}),
    ]
    assert [call_id for *_, call_id in asked[1:]] == [first.tool_call_id, second.tool_call_id]  # joined to the calls
    decided = {d.call_id: (d.verdict, d.actor) for d in story.decisions}
    assert decided == {first.id: ("approve", "alice"), second.id: ("deny", "alice")}
    outcomes = {
        p.tool_call_id: ("denied", p.reason) if isinstance(p, ToolDeniedPart) else (p.source, p.content)
        for p in parts
        if isinstance(p, ToolReturnPart | ToolDeniedPart)
    }
    assert outcomes == {
        asked[0][2]: ("tool", "order A-1: 2 items"),
        first.tool_call_id: ("tool", "refunded 5 on A-1"),
        second.tool_call_id: ("denied", "Not this one."),
    }


async def test_the_audit_chain_of_a_run_verifies(driver: Driver) -> None:
    run_id = await driver.start(REFUND, REFUND)
    (call,) = await driver.calls(run_id)
    await driver.store.calls.decide(call.id, Deny(reason="Not yet."), actor=ALICE)
    await driver.resume()
    _, again = await driver.calls(run_id)
    await driver.store.calls.decide(again.id, Approve(), actor=BOB)
    await driver.resume()
    assert (await driver.run(run_id)).status == RunStatus.COMPLETED
    actions = [e.action for e in (await driver.store.audit.audit_events(run_id=run_id, newest_first=False)).items]
    assert actions[0] == "run.started" and actions[-1] == "run.completed"
    assert {"call.requested", "call.denied", "call.approved"} <= set(actions)
    verification = await driver.store.audit.verify_audit()
    assert verification.ok, verification
