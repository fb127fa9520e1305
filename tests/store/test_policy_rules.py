"""Standing rules in the call lifecycle, on SQLite and PostgreSQL: every engine's calls allowed, denied or routed.

Rules are written through the store as the web app, the API and `approvals rules apply` write
them; calls come from a gate (`request_call`) and from our agents paused by a real worker
(`Resumer`), so the outcome, the rule's version and the audit trail are checked where they land.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import select

from approvals.calls import CallRequest, clock, validate_request
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Approve, Deny
from approvals.exceptions import Conflict, Forbidden, NotFound, UserError
from approvals.policy import InvalidRule, Kind, Remember, RememberScope, load_rules, parse_rule
from approvals.store import Actor, Database, Store
from approvals.store.models import DecisionRow, PolicyRuleRow, ToolCallRow
from approvals.worker.resumer import AgentRegistry, Resumer

from .agents import shop_agent

pytestmark = pytest.mark.anyio

ADMIN = Actor("ada", "admin")
SERVICE = Actor("support-app", "reviewer", person=False)
ALICE = Actor("alice", "reviewer", groups=frozenset({"support"}))
FINN = Actor("finn", "reviewer", groups=frozenset({"finance"}))
FAY = Actor("fay", "reviewer", groups=frozenset({"finance", "support"}))
BOB = Actor("bob", "reviewer")

RULES = """
rules:
  - name: small-refunds
    description: Refunds under 50 need nobody.
    tool: refund
    when: args.amount < 50
    effect: allow
  - name: big-refunds
    tool: refund
    when: args.amount >= 500
    effect: ask
    approvals: 2
    groups: [finance]
    ttl: 4h
  - name: no-deleting-customers
    tool: delete_*
    effect: deny
    reason: Customers are deleted by the data team, not by agents.
  - name: refunds-need-finance
    tool: refund
    when: args.amount >= 50 && args.amount < 500
    effect: ask
    groups: [finance]
"""


def gate_request(tool: str, args: dict[str, Any], *, session: str = "s1", key: str | None = None) -> Any:
    key = key or uuid4().hex
    request = CallRequest(
        engine="gate", source="support-app", session_id=session, tool_name=tool, args=args, tool_call_id=key
    )
    return validate_request(request)


async def ask(store: Store, tool: str, args: dict[str, Any], **options: Any) -> ToolCallRow:
    call, _ = await store.calls.request_call(gate_request(tool, args, **options), actor=SERVICE)
    return call


async def events(store: Store, subject_id: str) -> list[Any]:
    page = await store.audit.audit_events(subject_id=subject_id, limit=100)
    return sorted(page.items, key=lambda event: event.id)


async def test_a_gate_call_is_allowed_denied_or_routed_by_the_rules_and_the_record_names_the_rule(store: Store) -> None:
    await store.rules.apply_rules(load_rules(RULES), actor=ADMIN)

    small = await ask(store, "refund", {"amount": 20})
    assert (small.status, small.decided_by, small.rule_name, small.rule_version) == (
        CallStatus.APPROVED,
        "rule:small-refunds",
        "small-refunds",
        1,
    )
    assert (await store.runs.get_run(small.run_id)).status == RunStatus.RUNNING  # nobody was asked: the session runs on
    [decision] = await store.calls.decisions_for(small.id)
    assert (decision.actor, decision.verdict) == ("rule:small-refunds", "approve")
    trail = [(e.action, e.actor) for e in await events(store, small.id)]
    assert trail == [("call.requested", "support-app"), ("call.approved", "rule:small-refunds")]
    approved = (await events(store, small.id))[1]
    assert approved.details["rule"] == "small-refunds" and approved.details["version"] == 1

    denied = await ask(store, "delete_customer", {"customer_id": 7})
    assert denied.status == CallStatus.DENIED and denied.decided_by == "rule:no-deleting-customers"
    assert "deleted by the data team" in (denied.denial_reason or "")

    big = await ask(store, "refund", {"amount": 900})
    assert big.status == CallStatus.PENDING
    assert (big.approvals_required, big.approver_groups, big.rule_name) == (2, ["finance"], "big-refunds")
    assert big.expires_at is not None and big.expires_at - big.created_at == dt.timedelta(hours=4)
    assert (await store.runs.get_run(big.run_id)).status == RunStatus.AWAITING_APPROVAL

    unruled = await ask(store, "send_email", {"to": "x@example.com"})
    assert (unruled.status, unruled.rule_name, unruled.approver_groups) == (CallStatus.PENDING, None, None)


async def test_only_members_of_the_routed_groups_approve_and_a_quorum_takes_two_of_them(store: Store) -> None:
    await store.rules.apply_rules(load_rules(RULES), actor=ADMIN)
    big = await ask(store, "refund", {"amount": 900})

    for outsider in (ALICE, BOB):
        with pytest.raises(Forbidden, match="only their members may approve"):
            await store.calls.decide(big.id, Approve(), actor=outsider)
    first = await store.calls.decide(big.id, Approve(), actor=FINN)
    assert first.status == CallStatus.PENDING  # one of two
    second = await store.calls.decide(big.id, Approve(), actor=FAY)
    assert (second.status, second.decided_by) == (CallStatus.APPROVED, "fay")

    other = await ask(store, "refund", {"amount": 100})
    denied = await store.calls.decide(other.id, Deny("not today"), actor=BOB)  # anyone who decides may deny
    assert denied.status == CallStatus.DENIED


async def test_precedence_is_deny_over_ask_over_allow(store: Store) -> None:
    rules = [
        parse_rule({"name": "allow-all-email", "tool": "send_email", "effect": "allow"}),
        parse_rule({"name": "ask-external", "tool": "send_email", "when": "!args.to.endsWith('@ours.example')",
                    "effect": "ask"}),
        parse_rule({"name": "deny-competitor", "tool": "send_email", "when": "args.to.endsWith('@rival.example')",
                    "effect": "deny", "reason": "never write to a competitor"}),
    ]  # fmt: skip
    await store.rules.apply_rules(rules, actor=ADMIN)
    inside = await ask(store, "send_email", {"to": "a@ours.example"})
    outside = await ask(store, "send_email", {"to": "a@customer.example"})
    rival = await ask(store, "send_email", {"to": "a@rival.example"})
    assert [c.status for c in (inside, outside, rival)] == [CallStatus.APPROVED, CallStatus.PENDING, CallStatus.DENIED]
    assert [c.rule_name for c in (inside, outside, rival)] == ["allow-all-email", "ask-external", "deny-competitor"]


async def test_our_agents_paused_calls_are_decided_by_rules_and_the_worker_goes_on_at_once(
    store: Store, tmp_path: Path
) -> None:
    """The shop agent asks for a 450 refund and a customer's deletion: a rule allows one, another denies the other,
    so the run never waits for anyone and the worker runs the refund."""
    rules = [
        parse_rule({"name": "shop-refunds", "agent": "shop", "tool": "refund", "when": "double(args.amount) < 500.0",
                    "effect": "allow"}),
        parse_rule({"name": "no-deleting-customers", "tool": "delete_*", "effect": "deny",
                    "reason": "Customers are deleted by the data team."}),
    ]  # fmt: skip
    await store.rules.apply_rules(rules, actor=ADMIN)
    log = tmp_path / "log.txt"
    run_id = await store.runs.start_run("shop", "refund A-1", actor=ALICE, deps={"log": str(log)})
    resumer = Resumer(store, AgentRegistry([shop_agent]))
    await resumer.resume(run_id)  # pauses: both calls decided by the rules
    run = await store.runs.get_run(run_id)
    assert run.status == RunStatus.READY
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    assert calls["refund"].status == CallStatus.APPROVED and calls["refund"].decided_by == "rule:shop-refunds"
    assert calls["delete_customer"].status == CallStatus.DENIED
    actions = [e.action for e in (await store.audit.audit_events(run_id=run_id, limit=100)).items]
    assert "run.paused" not in actions and "run.ready" in actions

    await resumer.resume(run_id)
    assert (await store.runs.get_run(run_id)).status == RunStatus.COMPLETED
    assert log.read_text() == "refund A-1 450\n"  # the refund ran, the deletion did not
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    assert calls["refund"].status == CallStatus.SUCCEEDED


async def test_an_agents_call_routed_by_a_rule_waits_for_the_group(store: Store, tmp_path: Path) -> None:
    """The shop agent's amounts are decimals, which its arguments hold as text: the rule converts them."""
    rules = [
        parse_rule({"name": "refunds-need-finance", "tool": "refund", "when": "double(args.amount) >= 100.0",
                    "effect": "ask", "groups": ["finance"]}),
        parse_rule({"name": "no-deleting-customers", "tool": "delete_*", "effect": "deny", "reason": "data team"}),
    ]  # fmt: skip
    await store.rules.apply_rules(rules, actor=ADMIN)
    run_id = await store.runs.start_run("shop", "refund A-1", actor=ALICE, deps={"log": str(tmp_path / "log.txt")})
    await Resumer(store, AgentRegistry([shop_agent])).resume(run_id)
    calls = {c.tool_name: c for c in await store.calls.run_calls(run_id)}
    refund = calls["refund"]  # 450: asks finance, one approval
    assert (refund.status, refund.approver_groups, refund.rule_name) == (
        CallStatus.PENDING,
        ["finance"],
        "refunds-need-finance",
    )
    assert calls["delete_customer"].status == CallStatus.DENIED
    assert (await store.runs.get_run(run_id)).status == RunStatus.AWAITING_APPROVAL
    with pytest.raises(Forbidden):
        await store.calls.decide(refund.id, Approve(), actor=BOB)
    await store.calls.decide(refund.id, Approve(), actor=FINN)
    assert (await store.runs.get_run(run_id)).status == RunStatus.READY


async def test_approve_and_remember_allows_the_same_call_in_the_session_and_asks_for_others(store: Store) -> None:
    await store.rules.apply_rules(load_rules(RULES), actor=ADMIN)
    first = await ask(store, "refund", {"amount": 120, "order_id": "A-1"}, session="s1")
    remember = Remember(RememberScope.SESSION, dt.timedelta(hours=1), pinned=["amount"])
    with pytest.raises(Forbidden):  # not in finance: may not approve it, so may not remember it either
        await store.rules.approve_and_remember(first.id, remember, actor=ALICE)
    approved, rule = await store.rules.approve_and_remember(first.id, remember, actor=FINN)
    assert approved.status == CallStatus.APPROVED and approved.decided_by == "finn"
    assert rule.kind is Kind.REMEMBERED and rule.author == "finn" and rule.spec.session == "s1"
    assert rule.spec.when == "args.amount == 120" and rule.spec.tool == ["refund"]
    assert rule.spec.expires_at is not None

    again = await ask(store, "refund", {"amount": 120, "order_id": "A-2"}, session="s1")
    assert (again.status, again.decided_by) == (CallStatus.APPROVED, f"rule:{rule.name}")
    other_amount = await ask(store, "refund", {"amount": 130, "order_id": "A-2"}, session="s1")
    other_session = await ask(store, "refund", {"amount": 120, "order_id": "A-2"}, session="s2")
    assert other_amount.status == CallStatus.PENDING and other_session.status == CallStatus.PENDING
    big = await ask(store, "refund", {"amount": 900}, session="s1")  # needs two approvals: one person's rule can't
    assert big.status == CallStatus.PENDING
    trail = [e.action for e in await events(store, rule.name)]
    assert trail == ["rule.remembered"]

    with pytest.raises(Forbidden):
        await store.rules.delete_rule(rule.name, actor=FAY)  # someone else's
    await store.rules.delete_rule(rule.name, actor=FINN)  # the author revokes it
    after = await ask(store, "refund", {"amount": 120, "order_id": "A-3"}, session="s1")
    assert after.status == CallStatus.PENDING


async def test_a_remembered_rule_stops_at_its_expiry(store: Store) -> None:
    first = await ask(store, "send_email", {"to": "a@example.com"})
    remember = Remember(RememberScope.AGENT, dt.timedelta(seconds=1))
    await store.rules.approve_and_remember(first.id, remember, actor=ALICE)
    same = await ask(store, "send_email", {"to": "a@example.com"}, session="another")
    assert same.status == CallStatus.APPROVED  # agent scope: any session
    assert (await ask(store, "send_email", {"to": "b@example.com"})).status == CallStatus.PENDING  # all args pinned
    with clock.using(clock.SkippingClock()) as skipping:
        skipping.advance(1.1)  # the rule's second is over
        later = await ask(store, "send_email", {"to": "a@example.com"}, session="third")
    assert later.status == CallStatus.PENDING and later.rule_name is None


async def test_nobody_approves_their_own_calls_through_a_rule_they_remembered(store: Store) -> None:
    first, _ = await store.calls.request_call(gate_request("send_email", {"to": "a@example.com"}), actor=BOB)
    await store.rules.approve_and_remember(first.id, Remember(RememberScope.AGENT, dt.timedelta(hours=1)), actor=ALICE)
    mine, _ = await store.calls.request_call(
        gate_request("send_email", {"to": "a@example.com"}, session="x"), actor=ALICE
    )
    assert mine.status == CallStatus.PENDING  # ALICE asks: her own rule does not approve for her


async def test_a_condition_that_fails_asks_a_person_and_is_noted_on_the_rule_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rule = parse_rule({"name": "by-region", "tool": "refund", "when": "args.region == 'eu'", "effect": "allow"})
    await store.rules.save_rule(rule, actor=ADMIN)
    with caplog.at_level(logging.WARNING, logger="approvals.policy"):
        first = await ask(store, "refund", {"amount": 1})  # no region: the condition cannot tell
        second = await ask(store, "refund", {"amount": 2})
    assert first.status == CallStatus.PENDING and second.status == CallStatus.PENDING
    assert first.rule_name == "by-region"
    assert len([r for r in caplog.records if "by-region" in r.getMessage()]) == 1
    stored = await store.rules.get_rule("by-region")
    assert stored.last_error is not None and "region" in stored.last_error
    requested = (await events(store, first.id))[0]
    assert requested.details["policy"]["failures"][0]["rule"] == "by-region"
    eu = await ask(store, "refund", {"amount": 3, "region": "eu"})
    assert eu.status == CallStatus.APPROVED


async def test_rules_are_versioned_and_apply_is_idempotent(store: Store) -> None:
    specs = load_rules(RULES)
    first = await store.rules.apply_rules(specs, actor=ADMIN)
    assert sorted(spec.name for spec in first.created) == sorted(spec.name for spec in specs)
    again = await store.rules.apply_rules(specs, actor=ADMIN)
    assert again.empty and sorted(again.unchanged) == sorted(spec.name for spec in specs)

    changed = load_rules(RULES.replace("when: args.amount < 50\n", "when: args.amount < 80\n"))
    diff = await store.rules.apply_rules(changed, actor=ADMIN, dry_run=True)
    assert [c.name for _, c in diff.changed] == ["small-refunds"]
    assert (await store.rules.get_rule("small-refunds")).version == 1  # a dry run writes nothing
    await store.rules.apply_rules(changed, actor=ADMIN)
    versions = await store.rules.rule_versions("small-refunds")
    assert [v.version for v in versions] == [2, 1] and versions[0].spec.when == "args.amount < 80"
    assert (await ask(store, "refund", {"amount": 30})).rule_version == 2

    pruned = await store.rules.apply_rules(changed[:1], actor=ADMIN, prune=True)
    assert sorted(pruned.removed) == ["big-refunds", "no-deleting-customers", "refunds-need-finance"]
    assert [rule.name for rule in await store.rules.list_rules()] == ["small-refunds"]
    with pytest.raises(Forbidden):
        await store.rules.apply_rules(specs, actor=ALICE)


async def test_a_rules_file_with_an_error_changes_nothing(store: Store) -> None:
    await store.rules.apply_rules(load_rules(RULES), actor=ADMIN)
    broken = RULES.replace("args.amount >= 500", "args.amount >= ") + "\n  - name: Bad Name\n    effect: allow\n"
    with pytest.raises(InvalidRule) as raised:
        load_rules(broken)
    problems = raised.value.problems
    assert any("rule 2 (big-refunds): when:" in p and "line 1, column" in p for p in problems)
    assert any("rule 5 (Bad Name): name:" in p for p in problems)
    async with store.db.read() as session:
        assert len((await session.scalars(select(PolicyRuleRow))).all()) == 4


async def test_enable_disable_and_delete_keep_every_version(store: Store) -> None:
    spec = parse_rule({"name": "emails", "tool": "send_email", "effect": "allow"})
    await store.rules.save_rule(spec, actor=ADMIN)
    assert (await store.rules.save_rule(spec, actor=ADMIN)).version == 1  # unchanged: nothing written
    await store.rules.set_rule_enabled("emails", False, actor=ADMIN)
    assert (await ask(store, "send_email", {"to": "a@b.example"})).status == CallStatus.PENDING
    await store.rules.set_rule_enabled("emails", True, actor=ADMIN)
    assert (await ask(store, "send_email", {"to": "b@b.example"})).status == CallStatus.APPROVED
    with pytest.raises(Conflict, match="version 3"):
        await store.rules.save_rule(spec.model_copy(update={"reason": "x"}), actor=ADMIN, expected_version=1)
    await store.rules.delete_rule("emails", actor=ADMIN)
    with pytest.raises(NotFound):
        await store.rules.delete_rule("emails", actor=ADMIN)
    assert [v.version for v in await store.rules.rule_versions("emails")] == [4, 3, 2, 1]
    assert (await store.rules.rule_versions("emails"))[0].deleted
    actions = [e.action for e in await events(store, "emails")]
    assert actions == ["rule.created", "rule.disabled", "rule.enabled", "rule.deleted"]
    with pytest.raises(Forbidden):
        await store.rules.save_rule(spec, actor=ALICE)


async def test_a_dry_run_shows_what_a_rule_would_have_decided_over_past_calls(store: Store) -> None:
    for amount in (10, 60, 700):
        await ask(store, "refund", {"amount": amount})
    await ask(store, "send_email", {"to": "a@example.com"})
    spec = parse_rule({"name": "tiny", "tool": "refund", "when": "args.amount < 100", "effect": "allow"})
    dry = await store.rules.dry_run_rule(spec, limit=10)
    by_args = {(row.tool, str(row.args)): row for row in dry.rows}
    assert len(dry.rows) == 4 and dry.matched == 2
    assert by_args[("refund", "{'amount': 10}")].rule.effect == "allow"
    assert by_args[("refund", "{'amount': 700}")].rule.effect is None
    assert all(row.status == CallStatus.PENDING for row in dry.rows)  # what actually happened: they all asked
    assert (await store.rules.list_rules()) == []  # nothing saved
    with pytest.raises(UserError):
        await store.rules.dry_run_rule(spec, limit=0)


async def test_a_remembered_rule_never_stands_in_for_a_quorum_the_tool_asks(store: Store) -> None:
    request = CallRequest(
        engine="gate", source="support-app", session_id="q", tool_name="wire", args={"to": "x"}, approvals_required=2
    )
    call, _ = await store.calls.request_call(validate_request(request), actor=SERVICE)
    with pytest.raises(UserError, match="several approvals"):
        await store.rules.approve_and_remember(
            call.id, Remember(RememberScope.AGENT, dt.timedelta(hours=1)), actor=ALICE
        )
    async with store.db.read() as session:
        assert (await session.scalars(select(DecisionRow))).all() == []  # nothing approved either


async def test_a_stored_rule_that_no_longer_reads_asks_a_person_for_its_calls_and_says_why(store: Store) -> None:
    """A CEL release that refuses a saved condition, or a row edited by hand, must not stop every call."""
    await store.rules.save_rule(parse_rule({"name": "refunds", "tool": "refund", "effect": "allow"}), actor=ADMIN)
    await store.rules.save_rule(parse_rule({"name": "emails", "tool": "send_email", "effect": "allow"}), actor=ADMIN)
    async with store.db.write() as session:
        row = await session.scalar(select(PolicyRuleRow).where(PolicyRuleRow.name == "refunds"))
        assert row is not None
        row.definition = {**row.definition, "when": "args.amount <"}
    refund = await ask(store, "refund", {"amount": 1})
    email = await ask(store, "send_email", {"to": "a@b.example"})
    assert (refund.status, refund.rule_name) == (CallStatus.PENDING, "refunds")
    assert email.status == CallStatus.APPROVED  # the other rules still decide
    [broken] = [rule for rule in await store.rules.list_rules() if rule.name == "refunds"]
    assert broken.last_error is not None and "no longer reads as a rule" in broken.last_error


async def test_a_worker_pausing_by_rules_another_process_changed_decides_by_the_new_rules(
    db_url: str, tmp_path: Path
) -> None:
    """The worker holds the rules in memory and its pause checks their revision: a rule another process saved
    since is read and applied before the run pauses."""
    worker, admin = Store(Database(db_url)), Store(Database(db_url))
    try:
        first = await worker.runs.start_run("shop", "refund", actor=ALICE, deps={"log": str(tmp_path / "log")})
        await Resumer(worker, AgentRegistry([shop_agent])).resume(first)  # holds the (empty) rules from here on
        assert {c.status for c in await worker.calls.run_calls(first)} == {CallStatus.PENDING}
        deny = parse_rule({"name": "no-deleting", "tool": "delete_*", "effect": "deny", "reason": "data team"})
        await admin.rules.save_rule(deny, actor=ADMIN)  # another process: the worker's store hears nothing of it
        second = await worker.runs.start_run("shop", "refund", actor=ALICE, deps={"log": str(tmp_path / "log")})
        await Resumer(worker, AgentRegistry([shop_agent])).resume(second)
        calls = {c.tool_name: c for c in await worker.calls.run_calls(second)}
        assert calls["delete_customer"].status == CallStatus.DENIED
        assert calls["refund"].status == CallStatus.PENDING
    finally:
        await worker.db.dispose()
        await admin.db.dispose()
