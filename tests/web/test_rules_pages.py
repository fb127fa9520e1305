"""The rules pages through the ASGI app, on SQLite and PostgreSQL: the list, the form, its checks, history, roles.

Also the pure helpers behind the form (`approvals_web.rules.pages`): a rule as fields and back.
"""

from __future__ import annotations

import datetime as dt
import html
import re

import httpx
import pytest

from approvals.policy import Remember, RememberScope, parse_rule
from approvals.store import Actor
from approvals_web.rules import pages as rules

from .conftest import WebApp
from .test_rules_api import RULES_FILE, YAML, ask

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}
XSS = "<script>alert(1)</script>"
ADA = Actor("ada", "admin")


def fields(**overrides: str) -> dict[str, str]:
    """The form's fields for a small-refunds rule, as a browser posts them."""
    return {
        "name": "small-refunds",
        "description": "Refunds under 50 need nobody.",
        "effect": "allow",
        "engine": "*",
        "agent": "*",
        "tool": "refund",
        "session": "",
        "when": "args.amount < 50",
        "reason": "",
        "approvals": "1",
        "groups": "",
        "ttl": "",
        "expires_at": "",
        "enabled": "true",
        **overrides,
    }


def row(page: str, name: str) -> str:
    """The list's row for rule `name`."""
    found = re.search(rf'<tr id="rule-{re.escape(name)}".*?</tr>', page, re.S)
    assert found is not None, f"no row for {name}"
    return found.group(0)


def when_check(page: str) -> str:
    found = re.search(r'<p id="when-check".*?</p>', page, re.S)
    assert found is not None
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(0))).split())


async def admin(web: WebApp) -> tuple[httpx.AsyncClient, str]:
    return await web.login("ada")


# --- the form: create, edit, versions -----------------------------------------------------------


async def test_an_admin_writes_a_rule_edits_it_and_reads_its_history(web: WebApp) -> None:
    client, csrf = await admin(web)
    empty = await client.get("/rules")
    assert empty.status_code == 200 and "No standing rules" in empty.text and 'href="/rules/new"' in empty.text
    assert '<a href="/rules">Rules</a>' in empty.text  # the nav links here
    new = await client.get("/rules/new")
    assert new.status_code == 200 and 'action="/rules"' in new.text
    assert 'hx-trigger="keyup changed delay:300ms, change"' in new.text

    saved = await client.post("/rules", data={**fields(), "csrf_token": csrf})
    assert saved.status_code == 303 and saved.headers["location"] == "/rules"
    listed = row((await client.get("/rules")).text, "small-refunds")
    assert '<td class="version">1</td>' in listed and "tool refund" in listed and "args.amount &lt; 50" in listed
    assert "ada" in listed and "enabled" in listed

    edit = await client.get("/rules/small-refunds/edit")
    assert 'name="expected_version" value="1"' in edit.text
    assert re.search(r'<input id="rule-name" name="name" type="text" value="small-refunds"[^>]* readonly', edit.text)
    assert ">args.amount &lt; 50</textarea>" in edit.text
    changed = await client.post(
        "/rules/small-refunds/edit",
        data={**fields(when="args.amount < 40", ttl="", name="renamed"), "expected_version": "1", "csrf_token": csrf},
    )
    assert changed.status_code == 303
    rule = await web.store.rules.get_rule("small-refunds")
    assert (rule.version, rule.spec.when, rule.author) == (2, "args.amount < 40", "ada")
    assert [r.name for r in await web.store.rules.list_rules()] == [
        "small-refunds"
    ]  # the URL names the rule, not the form

    unchanged = await client.post(
        "/rules/small-refunds/edit",
        data={**fields(when="args.amount < 40"), "expected_version": "2", "csrf_token": csrf},
    )
    assert unchanged.status_code == 303 and (await web.store.rules.get_rule("small-refunds")).version == 2

    history = await client.get("/rules/small-refunds/history")
    assert history.status_code == 200
    versions = history.text[history.text.index("<h2>Versions</h2>") : history.text.index("<h2>Audit events</h2>")]
    assert versions.index("<td>2</td>") < versions.index("<td>1</td>")  # newest first
    assert "changed when" in versions and "created" in versions
    assert "when: args.amount &lt; 40" in versions  # each version's definition, as a rules file holds it
    events = history.text[history.text.index("<h2>Audit events</h2>") :]
    assert "rule.created" in events and "rule.changed" in events


async def test_a_rule_of_every_kind_of_field_round_trips_through_the_form(web: WebApp) -> None:
    spec = parse_rule(
        {
            "name": "big-refunds",
            "description": "Big ones",
            "agent": ["shop", "billing-*"],
            "tool": "refund",
            "when": "args.amount >= 500",
            "effect": "ask",
            "approvals": 2,
            "groups": ["finance", "audit"],
            "ttl": "4h",
            "expires_at": "2031-02-03T04:05:06.789Z",
            "enabled": False,
        }
    )
    values = rules.form_values(spec)
    assert (values["ttl"], values["groups"], values["agent"], values["enabled"]) == (
        "4h",
        "audit, finance",
        "shop, billing-*",
        "",
    )
    assert parse_rule(rules.definition_from_form(values)) == spec
    assert [rules.duration_text(s) for s in (None, 90, 120, 86400 * 3, 1.5)] == ["", "90", "2m", "3d", "1.5"]


async def test_invalid_input_is_shown_next_to_each_field_and_what_was_typed_stays(web: WebApp) -> None:
    client, csrf = await admin(web)
    typed = fields(name="Small Refunds", effect="deny", when="args.amount <", approvals="two", description=XSS)
    refused = await client.post("/rules", data={**typed, "csrf_token": csrf})
    assert refused.status_code == 422
    page = refused.text
    assert "The rule was not saved" in page
    assert when_check(page).startswith("Line 1, column 14: Syntax error")
    assert re.search(r'id="rule-name-error"[^>]*>use 1 to 100 lowercase letters', page)
    assert re.search(r'id="rule-approvals-error"[^>]*>Input should be a valid integer', page)
    assert 'value="Small Refunds"' in page and ">args.amount &lt;</textarea>" in page and 'value="two"' in page
    assert XSS not in page and html.escape(XSS, quote=True) in page
    assert '<option value="deny" selected>' in page

    no_reason = await client.post("/rules", data={**fields(effect="deny"), "csrf_token": csrf})
    assert no_reason.status_code == 422
    assert re.search(r'id="rule-effect-error"[^>]*>a deny rule needs a reason', no_reason.text)
    unknown = await client.post("/rules", data={**fields(when="arg.amount < 5"), "csrf_token": csrf})
    assert "unknown variable &#39;arg&#39;" in when_check(unknown.text).replace("'", "&#39;")
    assert await web.store.rules.list_rules() == []

    await client.post("/rules", data={**fields(), "csrf_token": csrf})
    twice = await client.post("/rules", data={**fields(), "csrf_token": csrf})
    assert twice.status_code == 422 and "exists already: edit it instead" in twice.text


async def test_the_condition_is_checked_as_it_is_typed(web: WebApp) -> None:
    client, csrf = await admin(web)
    broken = await client.post("/rules/check", data={"when": "args.amount <"}, headers={**HX, "x-csrftoken": csrf})
    assert broken.status_code == 200 and broken.text.lstrip().startswith('<p id="when-check"')
    assert "<html" not in broken.text  # the fragment alone
    assert when_check(broken.text).startswith("Line 1, column 14: Syntax error: mismatched input")
    second_line = await client.post(
        "/rules/check", data={"when": "true &&\n  args.("}, headers={**HX, "x-csrftoken": csrf}
    )
    assert when_check(second_line.text).startswith("Line 2, column 8:")
    valid = await client.post("/rules/check", data={"when": "args.amount < 50"}, headers={**HX, "x-csrftoken": csrf})
    assert when_check(valid.text) == "Valid condition."
    empty = await client.post("/rules/check", data={"when": ""}, headers={**HX, "x-csrftoken": csrf})
    assert when_check(empty.text) == "No condition: the rule takes every call it matches."
    xss = await client.post("/rules/check", data={"when": f"'{XSS}' +"}, headers={**HX, "x-csrftoken": csrf})
    assert XSS not in xss.text


async def test_a_save_over_someone_elses_is_refused_and_keeps_what_was_typed(web: WebApp) -> None:
    client, csrf = await admin(web)
    await client.post("/rules", data={**fields(), "csrf_token": csrf})
    first = await client.post(
        "/rules/small-refunds/edit",
        data={**fields(when="args.amount < 40"), "expected_version": "1", "csrf_token": csrf},
    )
    assert first.status_code == 303
    late = await client.post(
        "/rules/small-refunds/edit",
        data={**fields(when="args.amount < 30"), "expected_version": "1", "csrf_token": csrf},
    )
    assert late.status_code == 409
    assert "version 2, not 1" in late.text and ">args.amount &lt; 30</textarea>" in late.text
    assert (await web.store.rules.get_rule("small-refunds")).spec.when == "args.amount < 40"


# --- enable, disable, remove --------------------------------------------------------------


async def test_enable_disable_and_remove_from_the_list(web: WebApp) -> None:
    client, csrf = await admin(web)
    await client.post("/rules", data={**fields(), "csrf_token": csrf})
    disabled = await client.post("/rules/small-refunds/disable", data={"csrf_token": csrf}, headers=HX)
    assert disabled.status_code == 200 and disabled.text.lstrip().startswith('<section id="rules">')
    assert "Disabled small-refunds (version 2)." in disabled.text
    assert "disabled" in row(disabled.text, "small-refunds") and ">Enable</button>" in disabled.text
    enabled = await client.post("/rules/small-refunds/enable", data={"csrf_token": csrf})
    assert enabled.status_code == 303 and enabled.headers["location"] == "/rules"
    assert (await web.store.rules.get_rule("small-refunds")).version == 3

    removed = await client.post("/rules/small-refunds/delete", data={"csrf_token": csrf}, headers=HX)
    assert (
        "Removed small-refunds; its history remains." in removed.text and 'id="rule-small-refunds"' not in removed.text
    )
    history = await client.get("/rules/small-refunds/history")
    assert history.status_code == 200 and "removed" in history.text and "rule.deleted" in history.text
    assert (await client.get("/rules/small-refunds/edit")).status_code == 404
    assert (await client.post("/rules/small-refunds/disable", data={"csrf_token": csrf})).status_code == 404
    assert (await client.get("/rules/nothing/history")).status_code == 404


# --- who may do what ---------------------------------------------------------------------------


async def test_reviewers_and_viewers_read_the_rules_but_every_write_is_refused(web: WebApp) -> None:
    await web.store.rules.apply_rules(
        [parse_rule({"name": "small-refunds", "tool": "refund", "effect": "allow"})], actor=ADA
    )
    for username in ("alice", "victor"):
        client, csrf = await web.login(username)
        listed = await client.get("/rules")
        assert listed.status_code == 200 and 'id="rule-small-refunds"' in listed.text
        assert (
            'href="/rules/new"' not in listed.text
            and "/edit" not in listed.text
            and "<button" not in row(listed.text, "small-refunds")
        )
        assert (await client.get("/rules/small-refunds/history")).status_code == 200
        assert (await client.get("/rules/new")).status_code == 403
        assert (await client.get("/rules/small-refunds/edit")).status_code == 403
        for path, data in [
            ("/rules", fields(name="mine")),
            ("/rules/small-refunds/edit", fields(when="true")),
            ("/rules/small-refunds/enable", {}),
            ("/rules/small-refunds/disable", {}),
            ("/rules/small-refunds/delete", {}),
            ("/rules/check", {"when": "true"}),
            ("/rules/dry-run", fields()),
        ]:
            response = await client.post(path, data={**data, "csrf_token": csrf})
            assert response.status_code == 403, (username, path)
            assert "admin role" in response.text or "reviewer role" in response.text
    rule = await web.store.rules.get_rule("small-refunds")
    assert (rule.version, rule.spec.enabled, rule.deleted) == (1, True, False)


async def test_posts_without_the_csrf_token_are_refused(web: WebApp) -> None:
    client, csrf = await admin(web)
    await client.post("/rules", data={**fields(), "csrf_token": csrf})
    for path, data in [
        ("/rules", fields(name="other")),
        ("/rules/small-refunds/edit", {**fields(when="true"), "expected_version": "1"}),
        ("/rules/small-refunds/disable", {}),
        ("/rules/small-refunds/delete", {}),
        ("/rules/check", {"when": "true"}),
        ("/rules/dry-run", fields()),
    ]:
        missing = await client.post(path, data=data)
        assert missing.status_code == 403 and "CSRF" in missing.text, path
        forged = await client.post(path, data={**data, "csrf_token": "forged"})
        assert forged.status_code == 403, path
    rule = await web.store.rules.get_rule("small-refunds")
    assert (rule.version, rule.spec.when, rule.deleted) == (1, "args.amount < 50", False)
    assert [r.name for r in await web.store.rules.list_rules()] == ["small-refunds"]


async def test_a_reviewer_revokes_a_rule_they_remembered_and_only_that_one(web: WebApp) -> None:
    first = await ask(web, "pay", {"amount": 5}, "k1")
    second = await ask(web, "pay", {"amount": 6}, "k2")
    remember = Remember(RememberScope.SESSION, dt.timedelta(hours=2), pinned=["amount"])
    _, alices = await web.store.rules.approve_and_remember(first["call_id"], remember, actor=Actor("alice", "reviewer"))
    _, bobs = await web.store.rules.approve_and_remember(second["call_id"], remember, actor=Actor("bob", "reviewer"))
    client, csrf = await web.login("alice")
    page = (await client.get("/rules")).text
    assert "No standing rules" in page
    mine, theirs = row(page, alices.name), row(page, bobs.name)
    assert ">Revoke</button>" in mine and "alice" in mine and "args.amount == 5" in mine
    assert re.search(r"<span title=\"[^\"]+\">(1h|2h|119m|120m)</span>", mine), mine
    assert "<button" not in theirs and "bob" in theirs
    assert (await client.post(f"/rules/{bobs.name}/delete", data={"csrf_token": csrf})).status_code == 403
    revoked = await client.post(f"/rules/{alices.name}/delete", data={"csrf_token": csrf})
    assert revoked.status_code == 303
    assert [r.name for r in await web.store.rules.list_rules()] == [bobs.name]
    admin_client, _ = await admin(web)
    assert ">Revoke</button>" in row((await admin_client.get("/rules")).text, bobs.name)
    edit = await admin_client.get(f"/rules/{bobs.name}/edit")  # an admin may widen a remembered rule
    assert edit.status_code == 200 and "args.amount == 6" in edit.text


# --- the dry run ---------------------------------------------------------------------------------


async def test_a_dry_run_shows_each_past_call_with_what_happened_and_what_the_rule_would_do(web: WebApp) -> None:
    async with web.api("admin") as api:
        await api.post("/api/rules/apply", content=RULES_FILE, headers=YAML)
    small = await ask(web, "refund", {"amount": 20, "note": XSS}, "k1")
    deleting = await ask(web, "delete_customer", {"customer_id": 7}, "k2")
    odd = await ask(web, "refund", {"order": "A-1"}, "k3")
    client, csrf = await admin(web)
    tried = await client.post(
        "/rules/dry-run",
        data={**fields(name="", when="args.amount < 100", enabled=""), "limit": "10", "csrf_token": csrf},
        headers=HX,
    )
    assert tried.status_code == 200 and tried.text.lstrip().startswith('<section id="dry-run"')
    text = tried.text
    assert "Over the last 3 calls this rule matches 1, and its condition could not be evaluated for 1" in text
    assert "The rule is disabled: it was tried as if enabled." in text
    assert set(re.findall(r'href="/calls/([0-9a-f]+)"', text)) == {
        small["call_id"],
        deleting["call_id"],
        odd["call_id"],
    }
    small_row = text[text.index(f'href="/calls/{small["call_id"]}"') :].split("</tr>")[0]
    assert ">allow</span>" in small_row and "allow by this rule" in small_row  # new-rule comes first by name
    assert re.search(r">(approved|executing)</span> <span class=\"muted\">by rule:small-refunds<", small_row), small_row
    assert XSS not in text and "&lt;script&gt;" in text
    deleting_row = text[text.index(f'href="/calls/{deleting["call_id"]}"') :].split("</tr>")[0]
    assert "no match" in deleting_row and "deny by no-deleting-customers" in deleting_row
    odd_row = text[text.index(f'href="/calls/{odd["call_id"]}"') :].split("</tr>")[0]
    assert "cannot tell (no field" in odd_row
    assert "new-rule" not in [r.name for r in await web.store.rules.list_rules()]  # nothing was saved

    whole = await client.post("/rules/dry-run", data={**fields(), "csrf_token": csrf})  # without htmx: the whole form
    assert whole.status_code == 200 and "<form" in whole.text and "<h2>Dry run</h2>" in whole.text
    invalid = await client.post("/rules/dry-run", data={**fields(when="args.("), "csrf_token": csrf}, headers=HX)
    assert invalid.status_code == 422 and "Fix the rule before trying it" in invalid.text
    assert "when: Syntax error" in invalid.text and "(line 1, column 6)" in invalid.text


# --- what is wrong with a rule ---------------------------------------------------------------------


async def test_flags_and_a_conditions_last_failure_are_shown_in_the_list_and_history(web: WebApp) -> None:
    file = {
        "rules": [
            {"name": "never", "tool": "refund", "when": "1 > 2", "effect": "ask"},
            {"name": "refunds-denied", "tool": "refund", "effect": "deny", "reason": "no refunds today"},
            {"name": "allow-refunds", "tool": "refund", "effect": "allow"},
            {
                "name": "euros-only",
                "tool": "pay",
                "when": "args.currency == 'EUR'",
                "effect": "allow",
                "description": XSS,
            },
        ]
    }
    async with web.api("admin") as api:
        assert (await api.post("/api/rules/apply", json=file)).status_code == 200
    await ask(web, "pay", {"amount": 5}, "k1")
    client, _ = await web.login("victor")
    page = (await client.get("/rules")).text
    assert "never matches: its condition is always false" in row(page, "never")
    assert "shadowed by refunds-denied (deny)" in row(page, "allow-refunds")
    assert "⚠" not in row(page, "refunds-denied")
    euros = row(page, "euros-only")
    assert "Condition failed" in euros and "no field &#39;currency&#39;" in euros
    assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in euros
    history = (await client.get("/rules/euros-only/history")).text
    assert "Last failure" in history and "no field &#39;currency&#39;" in history
    never = (await client.get("/rules/never/history")).text
    assert "never matches: its condition is always false" in never
