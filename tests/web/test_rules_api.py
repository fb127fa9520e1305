"""The rules API over real HTTP (ASGI), on SQLite and PostgreSQL: versions, concurrency, checks, dry runs, files.

Calls come through the gate (`POST /api/gate/calls`) as any program's would, so the rules'
outcomes, flags and failures are checked where an admin reads them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from approvals.policy import Remember, RememberScope
from approvals.store import SYSTEM, Actor

from .conftest import WebApp
from .test_api import assert_problem, session
from .test_gate import asking_client, gate_call

pytestmark = pytest.mark.anyio

SMALL_REFUNDS = {"tool": "refund", "when": "args.amount < 50", "effect": "allow"}
RULES_FILE = """
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
"""
YAML = {"content-type": "application/yaml"}


async def ask(web: WebApp, tool: str, args: dict[str, Any], key: str) -> dict[str, Any]:
    """A call asked through the gate, with no schema (any arguments), by a token of its own in a session of its own."""
    async with await asking_client(web, name=f"agent-{key}") as agent:
        body = gate_call(tool_name=tool, args=args, idempotency_key=key, json_schema=None, session_id=f"s-{key}")
        response = await agent.post("/api/gate/calls", json=body)
        assert response.status_code == 201, response.text
        answer: dict[str, Any] = response.json()
        return answer


async def actions(web: WebApp, name: str) -> list[str]:
    page = await web.store.audit.audit_events(subject_id=name, limit=100)
    return [event.action for event in sorted(page.items, key=lambda e: e.id) if event.subject_type == "rule"]


async def test_an_admin_creates_changes_disables_and_removes_a_rule_and_every_version_stays(web: WebApp) -> None:
    async with web.api("admin") as admin:
        created = await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS)
        assert created.status_code == 201, created.text
        rule = created.json()
        assert (rule["name"], rule["version"], rule["kind"], rule["author"]) == (
            "small-refunds",
            1,
            "standing",
            "api-admin",
        )
        assert rule["definition"] == {"name": "small-refunds", **SMALL_REFUNDS, "tool": ["refund"]}
        assert rule["enabled"] is True and rule["flags"] == [] and rule["last_error"] is None
        assert created.headers["location"] == "/api/rules/small-refunds" and created.headers["etag"] == '"1"'

        same = await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS)
        assert same.status_code == 200 and same.json()["version"] == 1  # unchanged: no new version

        read = await admin.get("/api/rules/small-refunds")
        assert read.status_code == 200 and read.headers["etag"] == '"1"'
        changed = await admin.put(
            "/api/rules/small-refunds",
            json={**SMALL_REFUNDS, "when": "args.amount < 40"},
            headers={"If-Match": read.headers["etag"]},
        )
        assert changed.status_code == 200 and changed.json()["version"] == 2, changed.text

        stale = await admin.put(
            "/api/rules/small-refunds", json={**SMALL_REFUNDS, "when": "args.amount < 30"}, headers={"If-Match": '"1"'}
        )
        assert "version 2, not 1" in assert_problem(stale, 409)["detail"]
        exists = await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS, params={"expected_version": 0})
        assert_problem(exists, 409)
        bad_etag = await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS, headers={"If-Match": "yesterday"})
        assert_problem(bad_etag, 400)

        disabled = await admin.post("/api/rules/small-refunds/enabled", json={"enabled": False})
        assert disabled.status_code == 200 and disabled.json()["enabled"] is False and disabled.json()["version"] == 3
        again = await admin.post("/api/rules/small-refunds/enabled", json={"enabled": False})
        assert again.json()["version"] == 3

        versions = (await admin.get("/api/rules/small-refunds/versions")).json()["items"]
        assert [(v["version"], v["author"]) for v in versions] == [(3, "api-admin"), (2, "api-admin"), (1, "api-admin")]
        assert versions[1]["definition"]["when"] == "args.amount < 40"
        assert [r["name"] for r in (await admin.get("/api/rules")).json()["items"]] == ["small-refunds"]

        removed = await admin.delete("/api/rules/small-refunds")
        assert removed.status_code == 200 and removed.json()["deleted"] is True and removed.json()["version"] == 4
        assert_problem(await admin.get("/api/rules/small-refunds"), 404)
        assert len((await admin.get("/api/rules/small-refunds/versions")).json()["items"]) == 4
        assert (await admin.get("/api/rules")).json()["items"] == []
        assert_problem(await admin.delete("/api/rules/small-refunds"), 404)

        recreated = await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS)
        assert recreated.status_code == 201 and recreated.json()["version"] == 5
    assert await actions(web, "small-refunds") == [
        "rule.created",
        "rule.changed",
        "rule.disabled",
        "rule.deleted",
        "rule.created",
    ]
    assert (await web.store.audit.verify_audit()).ok


async def test_the_rules_decide_gate_calls_as_saved(web: WebApp) -> None:
    async with web.api("admin") as admin:
        assert (await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS)).status_code == 201
    small = await ask(web, "refund", {"amount": 20}, "k1")
    assert (small["decision"], small["decided_by"]) == ("approved", "rule:small-refunds")
    big = await ask(web, "refund", {"amount": 80}, "k2")
    assert big["decision"] == "pending"


async def test_invalid_cel_is_refused_with_its_line_and_column_and_nothing_is_saved(web: WebApp) -> None:
    async with web.api("admin") as admin:
        broken = await admin.put("/api/rules/small-refunds", json={**SMALL_REFUNDS, "when": "args.amount <"})
        body = assert_problem(broken, 422)
        assert (body["line"], body["column"]) == (1, 14)
        assert [e["loc"] for e in body["errors"]] == ["when"]
        assert "line 1, column 14" in body["errors"][0]["msg"]

        several = await admin.put(
            "/api/rules/Bad Name", json={"effect": "deny", "when": "\n  args.(", "tool": ["refund"], "approvals": 2}
        )
        body = assert_problem(several, 422)
        assert (body["line"], body["column"]) == (2, 8)  # counted in the condition as sent
        errors = {e["loc"]: e["msg"] for e in body["errors"]}
        assert {"name", "when"} <= set(errors), body
        assert errors["when"].endswith("at line 2, column 8")
        unknown = await admin.put("/api/rules/x", json={"effect": "allow", "when": "arg.amount > 1"})
        assert "unknown variable 'arg'" in assert_problem(unknown, 422)["errors"][0]["msg"]
        other_name = await admin.put("/api/rules/x", json={"name": "y", "effect": "allow"})
        assert_problem(other_name, 422)
        nul = await admin.put("/api/rules/x", json={"effect": "allow", "description": "a\u0000b"})
        assert_problem(nul, 422)
        assert (await admin.get("/api/rules")).json()["items"] == []

        checks: list[tuple[str, dict[str, Any]]] = [
            ("args.amount < 50", {"valid": True, "error": None, "line": None, "column": None}),
            ("", {"valid": True, "error": None, "line": None, "column": None}),
            ("args.amount <", {"line": 1, "column": 14, "valid": False}),
            ("1 +* 2", {"line": 1, "column": 4, "valid": False}),
        ]
        for when, expected in checks:
            checked = (await admin.post("/api/rules/check", json={"when": when})).json()
            assert checked.items() >= expected.items(), (when, checked)
        unknown_var = (await admin.post("/api/rules/check", json={"when": "foo == 1"})).json()
        assert unknown_var["valid"] is False and "unknown variable 'foo'" in unknown_var["error"]
        assert unknown_var["line"] is None
    assert await web.store.rules.list_rules() == []


async def test_writing_rules_takes_an_admin_with_rules_write_and_reading_takes_rules_read(web: WebApp) -> None:
    async with web.api("admin") as admin:
        await admin.put("/api/rules/small-refunds", json=SMALL_REFUNDS)
    writes: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", "/api/rules/small-refunds", {"json": {**SMALL_REFUNDS, "when": "true"}}),
        ("PUT", "/api/rules/other", {"json": SMALL_REFUNDS}),
        ("POST", "/api/rules/small-refunds/enabled", {"json": {"enabled": False}}),
        ("DELETE", "/api/rules/small-refunds", {}),
        ("POST", "/api/rules/apply", {"content": RULES_FILE, "headers": YAML}),
        ("POST", "/api/rules/dry-run", {"json": {"rule": {"name": "x", "effect": "allow"}}}),
    ]
    for role in ("viewer", "reviewer"):
        async with web.api(role) as client:
            for method, path, options in writes:
                response = await client.request(method, path, **options)
                assert_problem(response, 403)
            assert (await client.get("/api/rules")).status_code == 200
            assert (await client.get("/api/rules/small-refunds")).status_code == 200
            checked = await client.post("/api/rules/check", json={"when": "true"})  # reviewers remember conditions
            assert checked.status_code == (403 if role == "viewer" else 200)
    async with web.client() as nobody:
        assert_problem(await nobody.get("/api/rules"), 401)
        assert_problem(await nobody.put("/api/rules/x", json=SMALL_REFUNDS), 401)

    reader = await web.store.people.create_token(
        "reader", role="admin", actor=SYSTEM, user="api-admin", scopes=["rules:read"]
    )
    async with web.client(headers={"Authorization": f"Bearer {reader}"}) as client:
        assert (await client.get("/api/rules")).status_code == 200
        assert "rules:write" in assert_problem(await client.put("/api/rules/x", json=SMALL_REFUNDS), 403)["detail"]
    calls_only = await web.store.people.create_token("calls", role="admin", actor=SYSTEM, scopes=["calls:read"])
    async with web.client(headers={"Authorization": f"Bearer {calls_only}"}) as client:
        assert "rules:read" in assert_problem(await client.get("/api/rules"), 403)["detail"]
    writer = await web.store.people.create_token("writer", role="admin", actor=SYSTEM, scopes=["rules:write"])
    async with web.client(headers={"Authorization": f"Bearer {writer}"}) as client:
        assert (await client.put("/api/rules/other", json=SMALL_REFUNDS)).status_code == 201
    assert [r.spec.when for r in await web.store.rules.list_rules()] == ["args.amount < 50", "args.amount < 50"]


async def test_a_browser_session_uses_the_api_with_its_csrf_token(web: WebApp) -> None:
    async with session(web, "ada") as (client, csrf):
        refused = await client.put("/api/rules/small-refunds", json=SMALL_REFUNDS)
        assert_problem(refused, 403)
        assert (await client.put("/api/rules/small-refunds", json=SMALL_REFUNDS, headers=csrf)).status_code == 201


async def test_applying_a_rules_file_is_idempotent_and_says_what_changed(web: WebApp) -> None:
    async with web.api("admin") as admin:
        first = await admin.post("/api/rules/apply", content=RULES_FILE, headers=YAML)
        assert first.status_code == 200, first.text
        assert first.json()["created"] == ["small-refunds", "big-refunds", "no-deleting-customers"]
        assert first.json()["lines"][0] == "+ small-refunds (allow)"

        again = await admin.post("/api/rules/apply", content=RULES_FILE, headers={"content-type": "text/yaml"})
        diff = again.json()
        assert (diff["created"], diff["changed"], diff["removed"]) == ([], [], [])
        assert sorted(diff["unchanged"]) == ["big-refunds", "no-deleting-customers", "small-refunds"]
        assert diff["lines"] == ["no changes"]

        changed_file = RULES_FILE.replace("args.amount < 50", "args.amount < 40")
        preview = await admin.post("/api/rules/apply", content=changed_file, headers=YAML, params={"dry_run": True})
        assert preview.json()["dry_run"] is True
        assert preview.json()["changed"] == [
            {"name": "small-refunds", "fields": {"when": ["args.amount < 50", "args.amount < 40"]}}
        ]
        assert (await admin.get("/api/rules/small-refunds")).json()["version"] == 1  # a dry run changes nothing

        applied = await admin.post("/api/rules/apply", content=changed_file, headers=YAML)
        assert applied.json()["changed"][0]["name"] == "small-refunds"
        assert (await admin.get("/api/rules/small-refunds")).json()["version"] == 2
        assert (await admin.get("/api/rules/big-refunds")).json()["version"] == 1

        as_json = {"rules": [{"name": "small-refunds", **SMALL_REFUNDS}]}
        pruned = await admin.post("/api/rules/apply", json=as_json, params={"prune": True})
        assert pruned.status_code == 200, pruned.text
        assert pruned.json()["removed"] == ["big-refunds", "no-deleting-customers"]
        assert pruned.json()["changed"][0]["fields"] == {
            "description": ["Refunds under 50 need nobody.", ""],
            "when": ["args.amount < 40", "args.amount < 50"],
        }
        assert [r["name"] for r in (await admin.get("/api/rules")).json()["items"]] == ["small-refunds"]
    applied_events = await web.store.audit.audit_events(action="rules.applied", limit=10)
    assert len(applied_events.items) == 3  # the unchanged apply and the dry run wrote nothing


async def test_a_rules_file_with_any_error_changes_nothing_and_every_problem_is_named(web: WebApp) -> None:
    async with web.api("admin") as admin:
        await admin.post("/api/rules/apply", content=RULES_FILE, headers=YAML)
        broken = RULES_FILE.replace("args.amount >= 500", "args.amount >=") + (
            "  - name: no-reason\n    tool: wipe\n    effect: deny\n"
        )
        refused = await admin.post("/api/rules/apply", content=broken, headers=YAML, params={"prune": True})
        body = assert_problem(refused, 422)
        messages = [e["msg"] for e in body["errors"]]
        assert any(m.startswith("rule 2 (big-refunds): when:") and "line 1, column 15" in m for m in messages), body
        assert any(m.startswith("rule 4 (no-reason)") and "needs a reason" in m for m in messages), body

        not_yaml = await admin.post("/api/rules/apply", content="rules: [\n  - name: x", headers=YAML)
        assert "not valid YAML" in assert_problem(not_yaml, 422)["detail"]
        duplicate = "rules:\n  - {name: a, effect: allow}\n  - {name: a, effect: allow}\n"
        assert_problem(await admin.post("/api/rules/apply", content=duplicate, headers=YAML), 422)
        for empty in ("", "{}\n", "rules:\n", "- {name: a, effect: allow}\n"):  # never "no rules", with prune
            refused = await admin.post("/api/rules/apply", content=empty, headers=YAML, params={"prune": True})
            assert "one key" in assert_problem(refused, 422)["detail"], empty
        wrong_shape = await admin.post("/api/rules/apply", json={"rules": {"name": "a"}})
        assert_problem(wrong_shape, 422)
        not_json = await admin.post("/api/rules/apply", content="{rules", headers={"content-type": "application/json"})
        assert_problem(not_json, 422)
        binary = await admin.post("/api/rules/apply", content=b"\xff\xfe", headers=YAML)
        assert_problem(binary, 422)
        text = await admin.post("/api/rules/apply", content=RULES_FILE, headers={"content-type": "text/plain"})
        assert_problem(text, 415)
        versions = {r["name"]: r["version"] for r in (await admin.get("/api/rules")).json()["items"]}
    assert versions == {"big-refunds": 1, "no-deleting-customers": 1, "small-refunds": 1}


async def test_a_dry_run_shows_what_the_rule_and_all_rules_would_have_decided(web: WebApp) -> None:
    async with web.api("admin") as admin:
        await admin.put(
            "/api/rules/no-deleting",
            json={"tool": "delete_*", "effect": "deny", "reason": "the data team deletes customers"},
        )
    small = await ask(web, "refund", {"amount": 20}, "k1")
    big = await ask(web, "refund", {"amount": 900}, "k2")
    deleting = await ask(web, "delete_customer", {"customer_id": 7}, "k3")
    odd = await ask(web, "refund", {"order": "A-1"}, "k4")  # no amount: the condition cannot be evaluated
    async with web.api("admin") as admin:
        response = await admin.post(
            "/api/rules/dry-run", json={"rule": {"name": "small-refunds", **SMALL_REFUNDS, "enabled": False}}
        )
        assert response.status_code == 200, response.text
        result = response.json()
        rows = {row["call_id"]: row for row in result["rows"]}
        assert (result["matched"], result["failed"], len(rows)) == (2, 1, 4)  # the failed one asks: it counts
        assert rows[small["call_id"]]["rule"]["effect"] == "allow"
        assert rows[small["call_id"]]["policy"]["rule"] == "small-refunds"
        assert (rows[small["call_id"]]["status"], rows[small["call_id"]]["tool"]) == ("pending", "refund")
        assert rows[small["call_id"]]["args"] == {"amount": 20}
        assert rows[big["call_id"]]["rule"]["effect"] is None and rows[big["call_id"]]["policy"]["effect"] is None
        denied = rows[deleting["call_id"]]
        assert denied["status"] == "denied" and denied["decided_by"] == "rule:no-deleting"
        assert (denied["rule"]["effect"], denied["policy"]["effect"], denied["policy"]["rule"]) == (
            None,
            "deny",
            "no-deleting",
        )
        failed = rows[odd["call_id"]]["rule"]
        assert failed["effect"] == "ask" and "amount" in failed["failures"][0]["error"]

        limited = await admin.post("/api/rules/dry-run", json={"rule": {"name": "x", "effect": "allow"}, "limit": 2})
        assert len(limited.json()["rows"]) == 2
        invalid = await admin.post("/api/rules/dry-run", json={"rule": {"name": "x", "effect": "allow", "when": "("}})
        assert assert_problem(invalid, 422)["line"] == 1
        assert_problem(await admin.post("/api/rules/dry-run", json={"rule": {}, "limit": 5000}), 422)
    assert [r.name for r in await web.store.rules.list_rules()] == ["no-deleting"]


async def test_flags_and_a_conditions_last_failure_are_shown_on_the_rule(web: WebApp) -> None:
    rules = """
rules:
  - {name: never, tool: refund, when: "1 > 2", effect: ask}
  - {name: refunds-denied, tool: refund, effect: deny, reason: no refunds today}
  - {name: small-refunds, tool: refund, when: "args.amount < 50", effect: allow}
  - {name: allow-refunds, tool: refund, effect: allow}
  - {name: euros-only, tool: pay, when: "args.currency == 'EUR'", effect: allow}
  - {name: finance-asks, tool: wire, effect: ask, groups: [nobody-here]}
"""
    async with web.api("admin") as admin:
        assert (await admin.post("/api/rules/apply", content=rules, headers=YAML)).status_code == 200
    paid = await ask(web, "pay", {"amount": 5}, "k1")  # no currency: the rule cannot tell, so a person decides
    assert paid["decision"] == "pending"
    async with web.api("viewer") as viewer:
        flags = {r["name"]: r["flags"] for r in (await viewer.get("/api/rules")).json()["items"]}
        euros = (await viewer.get("/api/rules/euros-only")).json()
    assert flags["never"][0] == "never matches: its condition is always false"
    assert any("shadowed by refunds-denied (deny)" in flag for flag in flags["allow-refunds"])
    assert flags["finance-asks"] == ["nobody can approve: no user is in nobody-here"]
    assert flags["refunds-denied"] == []
    assert [flag.split(": ", 1)[1] for flag in flags["euros-only"]] == [euros["last_error"]]  # the failure is a flag
    assert flags["euros-only"][0].startswith("its condition failed at ")
    assert "currency" in euros["last_error"] and euros["last_error_at"] is not None

    remembered = Remember(RememberScope.SESSION, dt.timedelta(hours=1))
    _, rule = await web.store.rules.approve_and_remember(
        paid["call_id"], remembered, actor=Actor("api-reviewer", "reviewer")
    )
    async with web.api("viewer") as viewer:
        listed = {r["name"]: r for r in (await viewer.get("/api/rules", params={"kind": "remembered"})).json()["items"]}
    assert list(listed) == [rule.name]
    assert listed[rule.name]["author"] == "api-reviewer" and listed[rule.name]["expires_at"] is not None


async def test_a_remembered_rule_is_revoked_by_its_author_or_an_admin_only(web: WebApp) -> None:
    first = await ask(web, "pay", {"amount": 5}, "k1")
    second = await ask(web, "pay", {"amount": 6}, "k2")
    remembered = Remember(RememberScope.SESSION, dt.timedelta(hours=1), pinned=["amount"])
    _, mine = await web.store.rules.approve_and_remember(
        first["call_id"], remembered, actor=Actor("api-reviewer", "reviewer")
    )
    _, other = await web.store.rules.approve_and_remember(second["call_id"], remembered, actor=Actor("bob", "reviewer"))
    async with web.api("reviewer") as reviewer:
        assert_problem(await reviewer.delete(f"/api/rules/{other.name}"), 403)
        revoked = await reviewer.delete(f"/api/rules/{mine.name}")
        assert revoked.status_code == 200 and revoked.json()["deleted"] is True
    async with web.api("admin") as admin:
        assert (await admin.delete(f"/api/rules/{other.name}")).status_code == 200
    assert await web.store.rules.list_rules() == []


async def test_the_rules_routes_are_in_the_openapi_schema(web: WebApp) -> None:
    async with web.client() as client:
        spec = (await client.get("/api/openapi.json")).json()
    paths = spec["paths"]
    assert {"get", "put", "delete"} <= set(paths["/api/rules/{name}"])
    body = paths["/api/rules/{name}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["effect"]["enum"] == ["allow", "deny", "ask"]
    assert set(paths["/api/rules/apply"]["post"]["requestBody"]["content"]) == {"application/json", "application/yaml"}
    assert "415" in paths["/api/rules/apply"]["post"]["responses"]
