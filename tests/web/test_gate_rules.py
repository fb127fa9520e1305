"""Standing rules decide a gate's calls before anyone waits: the generic gate API and a coding CLI's hook,
through real HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from approvals.calls.states import CallStatus
from approvals.policy import load_rules
from approvals.store import Actor

from .conftest import WebApp
from .test_gate import asking_client, claude_input, decision_of, gate_call, hook

pytestmark = pytest.mark.anyio

ADMIN = Actor("ada", "admin")
CLAUDE_CODE_RULES = """
rules:
  - name: read-only-shell
    engine: claude_code
    tool: Bash
    when: args.command.matches('^(ls|cat|git (status|diff|log))( |$)')
    effect: allow
  - name: git-push-asks
    engine: claude_code
    tool: Bash
    when: args.command.startsWith('git push')
    effect: ask
    groups: [leads]
  - name: never-rm-root
    engine: claude_code
    tool: Bash
    when: args.command.matches('rm\\\\s+-[a-zA-Z]*r[a-zA-Z]*f?\\\\s+/(\\\\s|$)')
    effect: deny
    reason: Deleting the root folder is never allowed.
"""


async def test_a_claude_code_hook_is_answered_by_the_rules_at_once(web: WebApp) -> None:
    await web.store.rules.apply_rules(load_rules(CLAUDE_CODE_RULES), actor=ADMIN)
    async with await asking_client(web) as agent:
        allowed = await hook(agent, claude_input(tool_use_id="t1", tool_input={"command": "git status"}))
        denied = decision_of(await hook(agent, claude_input(tool_use_id="t2", tool_input={"command": "rm -rf /"})))
        asked = decision_of(await hook(agent, claude_input(tool_use_id="t3", tool_input={"command": "git push"})))
    assert decision_of(allowed)[0] == "allow"
    assert denied[0] == "deny" and "Deleting the root folder is never allowed." in (denied[1] or "")
    assert (denied[1] or "").startswith("A standing rule denied this call")
    assert asked[0] == "deny" and "/calls/" in (asked[1] or "")  # waits for a person: the fallback names the call
    calls = {c.args["command"]: c for c in (await web.store.calls.list_calls(status=None)).items}
    assert calls["git status"].decided_by == "rule:read-only-shell"
    assert calls["git status"].status == CallStatus.EXECUTING  # handed out to the CLI, as a person's approval is
    assert calls["rm -rf /"].status == CallStatus.DENIED
    assert (calls["git push"].status, calls["git push"].approver_groups) == (CallStatus.PENDING, ["leads"])


async def test_the_gate_api_answers_a_call_a_rule_allows_without_waiting(web: WebApp) -> None:
    rules = """
rules:
  - name: small-refunds
    tool: refund
    when: args.amount < 50
    effect: allow
"""
    await web.store.rules.apply_rules(load_rules(rules), actor=ADMIN)
    async with await asking_client(web) as agent:
        response = await agent.post("/api/gate/calls", params={"wait": 30}, json=gate_call())
        assert response.status_code == 201, response.text  # a new call, decided at once
        body = response.json()
        big = await agent.post("/api/gate/calls", params={"wait": 0}, json=gate_call(
            idempotency_key="call-2", args={"order_id": "A-2", "amount": 80}))  # fmt: skip
    assert (body["decision"], body["decided_by"], body["status"]) == ("approved", "rule:small-refunds", "executing")
    assert body["handed_out"] is True  # allowed by a rule: handed to this request in the same write
    trail = [
        e.action for e in (await web.store.audit.audit_events(subject_id=body["call_id"], newest_first=False)).items
    ]
    assert trail == ["call.requested", "call.approved", "call.executing"]  # stored and handed out in one write
    assert big.json()["decision"] == "pending"
