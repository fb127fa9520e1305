"""A day of real operations on the store, for the audit tests: every kind of event, made the way production makes it.

Rules applied, changed, disabled and deleted; gate calls allowed and denied by rules, approved by
two people from two channels, edited, answered, expired, reminded, escalated, handed out and run;
a hook's fallback and a refused request; users and tokens made and changed; a run cancelled.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from uuid import uuid4

from approvals.calls import CallRequest, validate_request
from approvals.calls.states import CallStatus
from approvals.calls.verdicts import Answer, Approve, EditAndApprove
from approvals.policy import load_rules, parse_rule
from approvals.policy.follow_ups import Step
from approvals.store import Actor, Store
from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry, Resumer

from ..store.agents import shop_agent

ADMIN = Actor("ada", "admin")
SERVICE = Actor("token:support-app", "reviewer", person=False)
FINN = Actor("finn", "reviewer", groups=frozenset({"finance"}), channel="slack")
FAY = Actor("fay", "reviewer", groups=frozenset({"finance"}), channel="web")
BOB = Actor("bob", "reviewer", channel="web")
ALICE = Actor("alice", "reviewer", channel="api")

RULES = """
rules:
  - name: small-refunds
    tool: refund
    when: args.amount < 50
    effect: allow
  - name: big-refunds
    tool: refund
    when: args.amount >= 500
    effect: ask
    approvals: 2
    groups: [finance]
  - name: no-deleting-customers
    tool: delete_*
    effect: deny
    reason: Customers are deleted by the data team.
  - name: ships-in-a-day
    tool: ship
    effect: ask
    ttl: 1d
"""


async def ask(store: Store, tool: str, args: dict[str, Any], *, session: str = "nightly-refunds") -> ToolCallRow:
    """A gate call as a service asks it."""
    request = CallRequest(
        engine="gate", source="support-app", session_id=session, tool_name=tool, args=args, tool_call_id=uuid4().hex
    )
    call, _ = await store.calls.request_call(validate_request(request), actor=SERVICE)
    return call


WORKER = "vm-7:4242:8a971f"


async def a_native_run(store: Store, log: Path) -> str:
    """Our shop agent run by a worker: paused, decided by people, resumed, run to its end."""
    run_id = await store.runs.start_run("shop", "refund A-1, delete customer 7", actor=ALICE, deps={"log": str(log)})
    resumer = Resumer(store, AgentRegistry([shop_agent]), worker_id=WORKER)
    await resumer.resume(run_id)
    for call in sorted(await store.calls.run_calls(run_id), key=lambda c: c.tool_name):
        for reviewer in (BOB, FAY)[: call.approvals_required]:
            await store.calls.decide(call.id, Approve(), actor=reviewer)
    await resumer.resume(run_id)
    return run_id


async def a_day(store: Store, log: Path, *, native: bool = True) -> dict[str, ToolCallRow]:
    """Every kind of event, by real operations; the calls made, by a name for each (`native`: with a worker's run)."""
    calls: dict[str, ToolCallRow] = {}
    if native:
        await a_native_run(store, log)
    await store.rules.apply_rules(load_rules(RULES), actor=ADMIN)
    calls["small"] = await ask(store, "refund", {"order_id": "A-1001", "amount": 20})
    calls["delete"] = await ask(store, "delete_customer", {"customer_id": 7})
    big = calls["big"] = await ask(store, "refund", {"order_id": "A-1002", "amount": 900, "reason": "Sorry about it"})
    await store.calls.decide(big.id, Approve(), actor=FINN)
    await store.calls.decide(big.id, Approve(), actor=FAY)
    mail = calls["mail"] = await ask(store, "send_email", {"to": "c@example.com", "subject": "Refund"})
    edited = {"to": "c@example.com", "subject": "Refund for A-1002"}
    await store.calls.decide(mail.id, EditAndApprove(args=edited), actor=BOB)
    question = calls["question"] = await ask(store, "lookup", {"order_id": "A-1003"})
    await store.calls.decide(question.id, Answer(content="shipped yesterday"), actor=ALICE)
    waits = calls["waits"] = await ask(store, "ship", {"order_id": "A-1004"}, session="other")
    assert await store.outbound.follow_up(waits.id, Step.REMIND, due_at=waits.created_at)
    assert await store.outbound.follow_up(waits.id, Step.ESCALATE, due_at=waits.created_at, groups=["oncall"])
    await store.calls.record_fallback(waits, fallback="deny", waited=30.0, actor_id=SERVICE.id)
    await store.calls.record_refusal("gate", "args must be an object", actor_id=SERVICE.id, details={"tool": "x"})
    await store.calls.expire(now=waits.created_at + dt.timedelta(days=30))
    ship = calls["ship"] = await ask(store, "ship", {"order_id": "A-1005"}, session="third")
    await store.calls.decide(ship.id, Approve(), actor=ALICE)
    handed, _ = await store.calls.hand_out(ship.id, actor=SERVICE)
    await store.calls.settle_call(handed.id, CallStatus.SUCCEEDED, {"tracking": "Z1"}, actor=SERVICE)
    await store.rules.save_rule(parse_rule({"name": "ship-free", "tool": "ship", "effect": "allow"}), actor=ADMIN)
    await store.rules.set_rule_enabled("ship-free", False, actor=ADMIN)
    await store.rules.delete_rule("ship-free", actor=ADMIN)
    await store.people.create_user("carol", "carol-pw-1234", role="reviewer", actor=ADMIN)
    await store.people.set_user_groups("carol", ["finance"], actor=ADMIN)
    await store.people.update_user("carol", disabled=True, actor=ADMIN)
    await store.people.create_token("ci-bot", role="viewer", actor=ADMIN)
    await store.runs.cancel_run(calls["small"].run_id, actor=ADMIN, reason="end of the night")
    return calls
