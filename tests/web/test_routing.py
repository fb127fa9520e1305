"""Routing to groups, the "for me" inbox, approve-and-remember and groups management, over real HTTP.

Calls come through the gate (`POST /api/gate/calls`) under standing rules that route refunds
to finance; reviewers act through their browser session (pages, forms, htmx) and their own
API tokens, on SQLite and PostgreSQL. The page and the API refuse by the same rule
(`approvals.calls.options.call_options`), and what a rule decided shows on the call, the run
and the audit page.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from approvals.calls.options import CallRefusal, refusal_sentence
from approvals.calls.states import CallStatus
from approvals.policy import Remember, RememberScope, load_rules, pinned_condition
from approvals.store import SYSTEM
from approvals.store.models import AuditEventRow, ToolCallRow
from approvals_web.pages import forms, views

from .conftest import WebApp
from .test_api import assert_problem
from .test_gate import asking_client, gate_call

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}
RULES = """
rules:
  - name: small-refunds
    tool: refund
    when: args.amount < 50
    effect: allow
  - name: refunds-need-finance
    tool: refund
    when: args.amount >= 50 && args.amount < 500
    effect: ask
    groups: [finance]
  - name: big-refunds
    tool: refund
    when: args.amount >= 500
    effect: ask
    approvals: 2
    groups: [finance]
"""
OUTSIDER_SENTENCE = refusal_sentence(CallRefusal.NOT_IN_GROUPS)


async def setup(web: WebApp, **groups: list[str]) -> None:
    """The rules, and each named user's groups."""
    await web.store.rules.apply_rules(load_rules(RULES), actor=SYSTEM)
    for username, names in groups.items():
        await web.store.people.set_user_groups(username, names, actor=SYSTEM)


async def asked(web: WebApp, agent: httpx.AsyncClient, key: str, amount: float, **overrides: Any) -> dict[str, Any]:
    """A gate call of the refund tool (or another, with `tool_name`): the gate's answer, and the digest a page shows."""
    body = gate_call(idempotency_key=key, args={"order_id": f"A-{key}", "amount": amount}, **overrides)
    response = await agent.post("/api/gate/calls", json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    answer["args_digest"] = (await web.store.calls.get_call(answer["call_id"])).current_digest
    return answer


async def own_token(web: WebApp, username: str, role: str = "reviewer", scopes: list[str] | None = None) -> str:
    return await web.store.people.create_token(
        f"{username}-{role}-token", role=role, actor=SYSTEM, user=username, scopes=scopes
    )


def bearer(web: WebApp, token: str) -> httpx.AsyncClient:
    return web.client(headers={"Authorization": f"Bearer {token}"})


def call_ids(page: str) -> set[str]:
    return set(re.findall(r'data-call="([0-9a-f]+)"', page))


async def test_for_me_lists_the_calls_a_reviewer_may_approve_now_in_the_inbox_and_the_api(web: WebApp) -> None:
    await setup(web, alice=["finance"], bob=["support"])
    async with await asking_client(web) as agent:
        routed = await asked(web, agent, "routed", 100)  # finance
        anyone = await asked(web, agent, "anyone", 100, tool_name="credit")  # no rule: any reviewer
        quorum = await asked(web, agent, "quorum", 900)  # finance, two approvals
        decided = await asked(web, agent, "decided", 20)  # approved by small-refunds: not open
    assert decided["decision"] == "approved"
    alice_asks = await own_token(web, "alice", scopes=["calls:ask"])
    async with bearer(web, alice_asks) as alice_agent:  # a session alice started: she may not approve its calls
        hers = await asked(web, alice_agent, "hers", 100, tool_name="credit", session_id="alice-session")

    alice_token = await own_token(web, "alice")
    async with bearer(web, alice_token) as alice:
        first = await alice.post(f"/api/calls/{quorum['call_id']}/decision", json={"verdict": "approve"})
        assert first.status_code == 200 and first.json()["status"] == "pending"  # one of two
        mine = (await alice.get("/api/calls", params={"for_me": "true"})).json()
        every = (await alice.get("/api/calls")).json()
    assert {c["id"] for c in mine["items"]} == {routed["call_id"], anyone["call_id"]}
    assert mine["counts"] == {"pending": 2}
    pending = {routed["call_id"], anyone["call_id"], quorum["call_id"], hers["call_id"]}
    assert {c["id"] for c in every["items"]} == pending
    by_id = {c["id"]: c for c in every["items"]}
    assert by_id[routed["call_id"]]["approver_groups"] == ["finance"]
    assert by_id[routed["call_id"]]["rule"] == "refunds-need-finance" and by_id[routed["call_id"]]["rule_version"] == 1
    assert by_id[anyone["call_id"]]["approver_groups"] is None

    async with bearer(web, await own_token(web, "bob")) as bob:
        bobs = (await bob.get("/api/calls", params={"for_me": "true", "status": "all"})).json()
    assert {c["id"] for c in bobs["items"]} == {anyone["call_id"], hers["call_id"]}  # not finance's
    async with web.api("viewer") as viewer:
        assert (await viewer.get("/api/calls", params={"for_me": "true"})).json()["items"] == []

    client, _ = await web.login("alice")
    async with aclosing(client):
        for_me = await client.get("/", params={"for_me": "1"})
        everything = await client.get("/")
        fragment = await client.get("/", params={"for_me": "1"}, headers=HX)
    assert call_ids(for_me.text) == {routed["call_id"], anyone["call_id"]}
    assert re.search(r'aria-current="true"[^>]*>For me <span class="count">2</span>', for_me.text)
    assert call_ids(everything.text) == pending
    assert re.search(r'<a href="/\?[^"]*for_me=1"', everything.text)  # a plain link
    assert call_ids(fragment.text) == {routed["call_id"], anyone["call_id"]}
    assert "for_me=1" in re.search(r'id="inbox" hx-get="([^"]+)"', fragment.text).group(1)  # type: ignore[union-attr]
    assert "Routed to: <strong>finance (2 approvals)</strong>" in everything.text
    assert 'href="/rules/big-refunds"' in everything.text


async def test_whoever_asked_a_call_may_not_approve_and_remember_it(web: WebApp) -> None:
    await web.store.people.create_user("carol", "carol-pw-1234", role="reviewer", actor=SYSTEM)
    await setup(web, carol=["finance"])
    async with bearer(web, await own_token(web, "carol", scopes=["calls:ask"])) as carol_agent:
        hers = await asked(web, carol_agent, "hers", 100, session_id="carol-1")  # routed to finance, carol's
    async with bearer(web, await own_token(web, "carol", role="reviewer")) as carol:
        remembered = await carol.post(
            f"/api/calls/{hers['call_id']}/approve-and-remember", json={"scope": "session", "duration": "1h"}
        )
    assert assert_problem(remembered, 403)["detail"] == refusal_sentence(CallRefusal.OWN_CALL)
    assert (await web.store.calls.get_call(hers["call_id"])).status == CallStatus.PENDING
    assert [
        rule.name for rule in (await web.store.policy.rules_in_force()).rules if rule.name.startswith("remembered")
    ] == []


async def test_an_outsider_is_refused_by_the_page_and_the_api_alike_and_a_member_approves(web: WebApp) -> None:
    await setup(web, alice=["finance"])
    async with await asking_client(web) as agent:
        routed = await asked(web, agent, "routed", 100)
    call_id = routed["call_id"]

    async with bearer(web, await own_token(web, "bob")) as bob_api:
        refused = await bob_api.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})
        remembered = await bob_api.post(
            f"/api/calls/{call_id}/approve-and-remember", json={"scope": "session", "duration": "1h"}
        )
    problem = assert_problem(refused, 403)
    assert problem["detail"] == OUTSIDER_SENTENCE  # the page's sentence: one rule, the same words
    assert assert_problem(remembered, 403)["detail"] == OUTSIDER_SENTENCE  # `call_options`' own sentence

    bob, csrf = await web.login("bob")
    async with aclosing(bob):
        page = await bob.get(f"/calls/{call_id}")
        assert html.escape(OUTSIDER_SENTENCE) in page.text
        assert f'action="/calls/{call_id}/approve"' not in page.text
        assert f'action="/calls/{call_id}/edit"' not in page.text
        assert "approve-and-remember" not in page.text
        assert f'action="/calls/{call_id}/deny"' in page.text  # deny stays
        assert "Routed to: <strong>finance (1 approval)</strong>" in page.text
        assert 'href="/rules/refunds-need-finance"' in page.text and "version 1" in page.text
        forced = await bob.post(
            f"/calls/{call_id}/approve", data={"args_digest": routed["args_digest"], "csrf_token": csrf}, headers=HX
        )
        assert forced.status_code == 403 and problem["detail"] in html.unescape(forced.text)
    assert (await web.store.calls.get_call(call_id)).status == CallStatus.PENDING

    alice, csrf = await web.login("alice")
    async with aclosing(alice):
        page = await alice.get(f"/calls/{call_id}")
        assert f'action="/calls/{call_id}/approve"' in page.text and OUTSIDER_SENTENCE not in html.unescape(page.text)
        approved = await alice.post(
            f"/calls/{call_id}/approve", data={"args_digest": routed["args_digest"], "csrf_token": csrf}
        )
        assert approved.status_code == 303
    call = await web.store.calls.get_call(call_id)
    assert (call.status, call.decided_by) == (CallStatus.APPROVED, "alice")


async def test_a_quorum_routed_to_a_group_takes_two_of_its_members(web: WebApp) -> None:
    await setup(web, alice=["finance"])
    async with await asking_client(web) as agent:
        big = await asked(web, agent, "big", 900)
    call_id = big["call_id"]
    alice_token, bob_token = await own_token(web, "alice"), await own_token(web, "bob")
    async with bearer(web, alice_token) as alice, bearer(web, bob_token) as bob, web.api("admin") as admin:
        assert (await alice.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})).json()["status"] == (
            "pending"
        )
        assert_problem(await bob.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"}), 403)
        joined = await admin.put("/api/users/bob/groups", json={"groups": ["finance"]})
        assert joined.status_code == 200 and joined.json()["groups"] == ["finance"]
        second = await bob.post(f"/api/calls/{call_id}/decision", json={"verdict": "approve"})  # the cached actor
        assert second.status_code == 200, second.text  # was forgotten: bob's token sees his new group
    call = await web.store.calls.get_call(call_id)
    assert (call.status, call.decided_by) == (CallStatus.APPROVED, "bob")


async def remember_form(call: dict[str, Any], csrf: str, **fields: Any) -> dict[str, Any]:
    return {
        "args_digest": call["args_digest"],
        "scope": "session",
        "pinning": "args",
        "pin": ["amount"],
        "period": "1h",
        "csrf_token": csrf,
        **fields,
    }


async def test_approve_and_remember_on_the_page_decides_the_next_matching_call_until_revoked(web: WebApp) -> None:
    await setup(web, alice=["finance"], bob=["finance"])
    async with await asking_client(web) as agent:
        first = await asked(web, agent, "first", 120)
        alice, csrf = await web.login("alice")
        async with aclosing(alice):
            page = await alice.get(f"/calls/{first['call_id']}")
            assert "Approve and remember" in page.text
            assert (
                'name="pin" value="amount" checked' in page.text and 'name="pin" value="order_id" checked' in page.text
            )
            assert "args.amount == 120" in page.text  # the condition prefilled from every argument
            done = await alice.post(
                f"/calls/{first['call_id']}/approve-and-remember", data=await remember_form(first, csrf), headers=HX
            )
            assert done.status_code == 200, done.text
            rule = re.search(r"allowed by rule (remembered-[0-9a-f]+)", done.text)
            assert rule is not None, done.text
            name = rule.group(1)
            assert f'href="/rules/{name}"' in done.text and "Revoke" in done.text

        again = await asked(web, agent, "again", 120)  # same session, same amount, another order
        other_amount = await asked(web, agent, "other-amount", 130)
        other_session = await asked(web, agent, "other-session", 120, session_id="s-2")
    assert again["decision"] == "approved"
    assert (other_amount["decision"], other_session["decision"]) == ("pending", "pending")
    decided = await web.store.calls.get_call(again["call_id"])
    assert (decided.decided_by, decided.rule_name, decided.rule_version) == (f"rule:{name}", name, 1)

    bob, bob_csrf = await web.login("bob")
    async with aclosing(bob):
        call_page = await bob.get(f"/calls/{again['call_id']}")
        outcome = call_page.text[call_page.text.index('class="outcome"') :]
        assert re.search(rf'Approved by rule <a class="rule-link" href="/rules/{name}">{name}</a>, version 1', outcome)
        assert ">remembered</span>" in outcome
        run_page = await bob.get(f"/runs/{decided.run_id}")
        assert re.search(
            rf'Approved by rule <a class="rule-link" href="/rules/{name}">{name}</a>, version 1', run_page.text
        )
        inbox = await bob.get("/", params={"status": "executing"})
        assert "approved by rule <a" in inbox.text
        audit = await bob.get("/audit")
        assert re.search(
            rf'approved by rule <a class="rule-link" href="/rules/{name}">{name}</a>, version 1', audit.text
        )
        assert f'rule <a class="rule-link" href="/rules/{name}">{name}</a>' in audit.text  # rule.remembered
        first_page = await bob.get(f"/calls/{other_amount['call_id']}")
        assert name in first_page.text and f"/remembered/{name}/revoke" not in first_page.text  # alice's to revoke
        stolen = await bob.post(
            f"/calls/{other_amount['call_id']}/remembered/{name}/revoke", data={"csrf_token": bob_csrf}, headers=HX
        )
        assert stolen.status_code == 403

    alice, csrf = await web.login("alice")
    async with aclosing(alice):
        revoked = await alice.post(f"/calls/{first['call_id']}/remembered/{name}/revoke", data={"csrf_token": csrf})
        assert revoked.status_code == 303
    async with await asking_client(web) as agent:
        after = await asked(web, agent, "after", 120)
    assert after["decision"] == "pending"
    actions = [e.action for e in (await web.store.audit.audit_events(subject_id=name)).items]
    assert sorted(actions) == ["rule.deleted", "rule.remembered"]


async def test_a_refused_remember_form_comes_back_as_typed_and_nothing_is_approved(web: WebApp) -> None:
    await setup(web, alice=["finance"])
    async with await asking_client(web) as agent:
        call = await asked(web, agent, "bad", 120)
        big = await asked(web, agent, "big", 900)
    alice, csrf = await web.login("alice")
    async with aclosing(alice):
        broken = "args.amount == && true"
        bad = await alice.post(
            f"/calls/{call['call_id']}/approve-and-remember",
            data=await remember_form(call, csrf, pinning="condition", condition=broken, scope="agent"),
            headers=HX,
        )
        assert bad.status_code == 422
        assert 'role="alert"' in bad.text and "Cannot remember" in bad.text
        assert html.escape(broken) in bad.text and '<details class="action remember" open>' in bad.text
        assert 'value="agent" checked' in bad.text and 'value="condition" checked' in bad.text
        period = await alice.post(
            f"/calls/{call['call_id']}/approve-and-remember", data=await remember_form(call, csrf, period="99d")
        )
        assert period.status_code == 422 and "Choose a period" in period.text  # a whole page without htmx
        stale = await alice.post(
            f"/calls/{call['call_id']}/approve-and-remember",
            data=await remember_form(call, csrf, args_digest="0" * 64),
            headers=HX,
        )
        assert stale.status_code == 409
        quorum_page = await alice.get(f"/calls/{big['call_id']}")
        assert "approve-and-remember" not in quorum_page.text  # two approvals: one person's rule cannot stand in
    assert (await web.store.calls.get_call(call["call_id"])).status == CallStatus.PENDING
    assert await web.store.rules.list_rules(kind=None) != []  # the standing ones only
    assert all(not rule.name.startswith("remembered-") for rule in await web.store.rules.list_rules())


async def test_approve_and_remember_through_the_api(web: WebApp) -> None:
    await setup(web, alice=["finance"])
    async with await asking_client(web) as agent:
        call = await asked(web, agent, "api", 120)
        async with bearer(web, await own_token(web, "alice")) as alice:
            path = f"/api/calls/{call['call_id']}/approve-and-remember"
            assert_problem(await alice.post(path, json={"duration": 0}), 422)
            assert_problem(await alice.post(path, json={"duration": "1h", "actor": "mallory"}), 422)
            assert_problem(await alice.post(path, json={"duration": "1h", "condition": "args.amount =="}), 400)
            assert_problem(await alice.post(path, json={"duration": "1h", "args_digest": "0" * 64}), 409)
            done = await alice.post(
                path,
                json={"scope": "agent", "duration": "8h", "pinned": ["amount"], "args_digest": call["args_digest"]},
            )
            assert done.status_code == 200, done.text
            body = done.json()
        elsewhere = await asked(web, agent, "elsewhere", 120, session_id="another")  # agent scope: any session
    assert body["call"]["status"] == "approved" and body["call"]["decided_by"] == "alice"
    rule = body["rule"]
    assert rule["name"].startswith("remembered-") and rule["author"] == "alice" and rule["version"] == 1
    assert rule["definition"]["when"] == "args.amount == 120" and "session" not in rule["definition"]
    assert elsewhere["decision"] == "approved"
    async with web.api("reviewer") as reviewer:
        shown = (await reviewer.get(f"/api/calls/{elsewhere['call_id']}")).json()
    assert (shown["decided_by"], shown["rule"], shown["rule_version"]) == (f"rule:{rule['name']}", rule["name"], 1)


async def test_groups_are_managed_by_admins_on_the_page_and_through_the_api_and_audited(web: WebApp) -> None:
    await setup(web)
    async with await asking_client(web) as agent:
        routed = await asked(web, agent, "routed", 100)
    alice, alice_csrf = await web.login("alice")  # logged in before she joins finance
    async with aclosing(alice):
        assert (
            f'action="/calls/{routed["call_id"]}/approve"' not in (await alice.get(f"/calls/{routed['call_id']}")).text
        )

        async with web.api("admin") as admin:
            listed = (await admin.get("/api/users")).json()["items"]
            assert {u["username"]: u["groups"] for u in listed}["alice"] == []
            put = await admin.put("/api/users/alice/groups", json={"groups": ["support", "finance", "finance"]})
            assert put.status_code == 200 and put.json()["groups"] == ["finance", "support"]
            assert_problem(await admin.put("/api/users/alice/groups", json={"groups": ["no spaces"]}), 422)
            assert_problem(await admin.put("/api/users/nobody/groups", json={"groups": ["x"]}), 404)
        async with web.api("reviewer") as reviewer:
            assert_problem(await reviewer.get("/api/users"), 403)
            assert_problem(await reviewer.put("/api/users/alice/groups", json={"groups": []}), 403)
        limited = await own_token(web, "ada", role="admin", scopes=["runs:admin"])
        async with bearer(web, limited) as scoped:
            assert_problem(await scoped.put("/api/users/alice/groups", json={"groups": []}), 403)

        # her session sees the new group at once: no new login
        assert f'action="/calls/{routed["call_id"]}/approve"' in (await alice.get(f"/calls/{routed['call_id']}")).text
        assert (await alice.get("/users")).status_code == 403
        assert 'href="/users"' not in (await alice.get("/")).text  # the nav links it for admins only
        forbidden = await alice.post("/users/bob/groups", data={"groups": "finance", "csrf_token": alice_csrf})
        assert forbidden.status_code == 403

    ada, csrf = await web.login("ada")
    async with aclosing(ada):
        page = await ada.get("/users")
        assert page.status_code == 200
        assert 'data-user="alice"' in page.text and 'value="finance, support"' in page.text
        assert '<a href="/users">Users</a>' in page.text
        saved = await ada.post("/users/bob/groups", data={"groups": "ops, finance", "csrf_token": csrf})
        assert saved.status_code == 303 and saved.headers["location"] == "/users"
        bad = await ada.post("/users/bob/groups", data={"groups": "ops, fin ance", "csrf_token": csrf}, headers=HX)
        assert bad.status_code == 422 and "fin ance" in bad.text and "not a group name" in html.unescape(bad.text)
        assert bad.text.lstrip().startswith("<tr")  # the row alone, for htmx
        cleared = await ada.post("/users/victor/groups", data={"groups": " ", "csrf_token": csrf}, headers=HX)
        assert cleared.status_code == 200 and "Saved." in cleared.text
    assert (await web.store.people.get_user("bob")).groups == ["finance", "ops"]

    changes = (await web.store.audit.audit_events(action="user.groups_changed")).items
    by_user = {event.subject_id: event for event in changes}
    assert by_user["alice"].details == {"groups": ["finance", "support"], "previous": []}
    assert by_user["alice"].actor == "api-admin" and by_user["bob"].actor == "ada"
    assert "victor" not in by_user  # no groups before, none after: nothing changed
    assert (await web.store.audit.verify_audit()).ok


# The pure parts: what a page says about rules, and the remember form's choices


def _call(**columns: Any) -> ToolCallRow:
    base: dict[str, Any] = {"decided_by": None, "verdict": None, "rule_name": None, "rule_version": None,
                            "approver_groups": None, "approvals_required": 1}  # fmt: skip
    return ToolCallRow(**{**base, **columns})


@pytest.mark.parametrize(
    ("columns", "remembered", "words"),
    [
        ({"decided_by": "rule:small", "verdict": "approve", "rule_name": "small", "rule_version": 3}, (),
         "approved by rule small, version 3"),
        ({"decided_by": "rule:no-deletes", "verdict": "deny", "rule_name": "no-deletes", "rule_version": 1}, (),
         "denied by rule no-deletes, version 1"),
        ({"decided_by": "rule:remembered-a", "verdict": "approve", "rule_name": "remembered-a", "rule_version": 1},
         {("remembered-a", 1)}, "approved by remembered rule remembered-a, version 1"),
        ({"decided_by": "alice", "verdict": "approve", "rule_name": "asks", "rule_version": 2}, (), None),
    ],
)  # fmt: skip
def test_a_call_decided_by_a_rule_says_which_rule_and_version(
    columns: dict[str, Any], remembered: Any, words: str | None
) -> None:
    mention = views.decided_by_rule(_call(**columns), remembered)
    assert (mention.words if mention else None) == words


def test_routing_names_the_groups_the_quorum_and_the_rule() -> None:
    routed = views.routing(_call(rule_name="big", rule_version=2, approver_groups=["finance"], approvals_required=2))
    assert routed is not None and routed.words == "finance (2 approvals)"
    assert routed.rule == views.RuleMention("routed", "big", 2)
    assert views.routing(_call()) is None
    assert views.routing(_call(decided_by="rule:small", rule_name="small", rule_version=1)) is None


def test_audit_events_name_the_rule_that_decided_or_routed_their_call() -> None:
    def event(action: str, actor: str, details: Any) -> AuditEventRow:
        return AuditEventRow(action=action, actor=actor, details=details)

    approved = event("call.approved", "rule:small", {"rule": "small", "version": 3, "remembered": True})
    assert views.audit_rule(approved) == views.RuleMention("approved", "small", 3, True)
    denied = event("call.denied", "rule:no-deletes", {"rule": "no-deletes", "version": 1, "reason": "x"})
    assert views.audit_rule(denied) == views.RuleMention("denied", "no-deletes", 1)
    asked = event("call.requested", "svc", {"policy": {"effect": "ask", "rule": "big", "version": 2}})
    assert views.audit_rule(asked) == views.RuleMention("routed", "big", 2)
    assert views.audit_rule(event("call.approved", "alice", {"approvals": 1})) is None
    assert views.audit_rule(event("call.requested", "svc", {"policy": {"effect": "allow", "rule": "s"}})) is None
    assert views.audit_rule(event("call.approved", "rule:odd", None)) == views.RuleMention("approved", "odd")


def test_the_remember_form_asks_for_what_the_reviewer_chose() -> None:
    args = {"amount": 120, "order_id": "A-1"}
    default = forms.RememberForm.for_call(args)
    assert default.pinned == ["amount", "order_id"] and default.condition == pinned_condition(args, None)
    assert default.remember() == Remember(RememberScope.SESSION, dt.timedelta(hours=1), pinned=None)

    def submitted(**choices: Any) -> forms.RememberForm:
        chosen = {"scope": "agent", "period": "7d", "pinning": "args", "pinned": ["amount"], "condition": "", **choices}
        return forms.RememberForm.submitted(args, **chosen)

    assert submitted().remember() == Remember(RememberScope.AGENT, dt.timedelta(days=7), pinned=["amount"])
    assert submitted(pinned=["nope"]).remember().pinned == []  # not an argument: not pinned
    written = submitted(pinning="condition", condition=" args.amount < 200 ").remember()
    assert written.condition == "args.amount < 200" and written.pinned is None
    for choices, problem in (
        ({"period": "99d"}, "Choose a period"),
        ({"scope": "galaxy"}, "this session or this agent"),
        ({"pinning": "condition", "condition": "  "}, "Write a condition"),
    ):
        with pytest.raises(ValueError, match=problem):
            submitted(**choices).remember()
