"""An admin writes a standing rule in a real browser, and the gate obeys it.

What only a browser can show: the condition is checked as the admin types (htmx posts it
after a pause in typing and swaps the answer in under the field), the dry run's table
appears in place, and the saved rule decides the next call a program asks about.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from approvals.store import SYSTEM

from ..live_server import LiveServer
from .test_reviewer import _screenshot


def _asker(server: LiveServer) -> httpx.Client:
    token = server.call(
        server.store.people.create_token("billing", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    )
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _ask(gate: httpx.Client, amount: int, key: str) -> dict[str, Any]:
    """A refund asked through the gate, as a billing service would."""
    call = {
        "source": "billing",
        "session_id": "s-1",
        "tool_name": "refund_order",
        "args": {"order_id": "A-1", "amount": amount},
        "idempotency_key": key,
    }
    response = gate.post("/api/gate/calls", json=call)
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_an_admin_writes_a_rule_checked_as_they_type_tries_it_and_the_gate_obeys_it(
    server: LiveServer, page: Page, screenshots: Path
) -> None:
    with _asker(server) as gate:
        assert _ask(gate, 20, "k-1")["decision"] == "pending"  # no rule yet: a person decides
        assert _ask(gate, 900, "k-2")["decision"] == "pending"

        server.login(page, "ada")
        page.get_by_role("link", name="Rules", exact=True).click()
        expect(page.locator("#rules")).to_contain_text("No standing rules")
        page.get_by_role("link", name="New rule").click()
        page.get_by_label("Name", exact=True).fill("small-refunds")
        page.get_by_label("Effect").select_option("allow")
        page.get_by_label("Tools").fill("refund_order")

        condition = page.get_by_label("Condition (CEL)")
        check = page.locator("#when-check")
        condition.press_sequentially("args.amount <", delay=20)
        expect(check).to_have_text(re.compile(r"^\s*Line 1, column 14: Syntax error"))
        expect(check).to_have_class("field-error")
        condition.press_sequentially(" 50", delay=20)
        expect(check).to_have_text(re.compile(r"^\s*Valid condition\.\s*$"))

        page.get_by_role("button", name="Dry run").click()
        dry_run = page.locator("#dry-run")
        expect(dry_run.locator("tbody tr")).to_have_count(2)
        expect(dry_run).to_contain_text("Over the last 2 calls this rule matches 1")
        small = dry_run.locator("tbody tr", has_text="amount=20")
        expect(small.locator(".rule-says")).to_have_text("allow")
        expect(small.locator(".policy-says")).to_have_text("allow by this rule")
        expect(small).to_contain_text("pending")  # what really happened: it waits for a person
        expect(dry_run.locator("tbody tr", has_text="amount=900").locator(".rule-says")).to_have_text("no match")
        assert server.call(server.store.rules.list_rules()) == []  # trying saved nothing
        _screenshot(page, screenshots / "rule-form.png", max_height=1600)

        page.get_by_role("button", name="Save rule").click()
        expect(page).to_have_url(server.url + "/rules")
        row = page.locator("#rule-small-refunds")
        expect(row.locator(".version")).to_have_text("1")
        expect(row).to_contain_text("args.amount < 50")
        expect(row).to_contain_text("tool refund_order")
        _screenshot(page, screenshots / "rules.png")

        allowed = _ask(gate, 10, "k-3")
        assert (allowed["decision"], allowed["decided_by"]) == ("approved", "rule:small-refunds")
        assert _ask(gate, 80, "k-4")["decision"] == "pending"
