"""Routing and approve-and-remember in a real browser: a finance reviewer remembers an approval for the
session, the session's next matching call runs without asking, and a reviewer outside finance is told why
they cannot approve.

Calls come through the gate over HTTP, as a program that runs elsewhere asks; the rule that
routes refunds to finance is written through the store, as an admin's rules file would be.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import Browser, Page, expect

from approvals.calls.options import call_options
from approvals.calls.states import CallStatus
from approvals.policy import parse_rule
from approvals.store import SYSTEM, Actor

from ..live_server import LiveServer

SESSION = "browser-session"
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}
OUTSIDER_SENTENCE = call_options(
    Actor("someone", "reviewer"), CallStatus.PENDING, started_by=None, approver_groups=["finance"]
).why_not_approve


def _ask(server: LiveServer, token: str, key: str, order_id: str, amount: float) -> dict[str, Any]:
    body = {
        "source": "billing-service",
        "session_id": SESSION,
        "tool_name": "refund",
        "args": {"order_id": order_id, "amount": amount},
        "idempotency_key": key,
        "json_schema": SCHEMA,
        "description": "Refund an order",
    }
    response = httpx.post(f"{server.url}/api/gate/calls", json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _routing_rule(server: LiveServer) -> str:
    """Refunds of 50 or more ask finance; the token a program asks with."""
    rule = parse_rule(
        {"name": "refunds-need-finance", "tool": "refund", "when": "args.amount >= 50", "effect": "ask",
         "groups": ["finance"]}
    )  # fmt: skip
    server.call(server.store.rules.save_rule(rule, actor=SYSTEM))
    server.call(server.store.people.set_user_groups("alice", ["finance"], actor=SYSTEM))
    return server.call(server.store.people.create_token("billing", role="reviewer", actor=SYSTEM, scopes=["calls:ask"]))


def test_a_finance_reviewer_remembers_an_approval_for_the_session(server: LiveServer, page: Page) -> None:
    token = _routing_rule(server)
    first = _ask(server, token, "first", "A-1", 120)
    assert first["decision"] == "pending"

    server.login(page, "alice")
    page.goto(f"{server.url}/calls/{first['call_id']}")
    card = page.locator(".slot.current article.call-card")
    expect(card.locator(".routing")).to_contain_text("Routed to: finance (1 approval)")
    expect(card.locator(".routing a")).to_have_attribute("href", "/rules/refunds-need-finance")

    card.locator("summary", has_text="Approve and remember").click()
    form = card.locator("form.remember-form")
    expect(form.get_by_label("In this session")).to_be_checked()
    expect(form.locator("textarea[name=condition]")).to_have_value(re.compile(r"args\.amount == 120"))
    form.locator("input[name=pin][value=order_id]").uncheck()  # pin the amount only
    expect(form.locator("input[name=pin][value=amount]")).to_be_checked()
    form.get_by_label("For how long").select_option(label="8 hours")
    form.get_by_role("button", name="Approve and remember").click()

    expect(card.locator(".flash.ok")).to_contain_text("calls like this are allowed by rule remembered-")
    expect(card.locator(".outcome")).to_contain_text("Approved by alice")
    remembered = card.locator("section.remembered")
    expect(remembered).to_contain_text("args.amount == 120")
    expect(remembered).to_contain_text("this session")
    name = remembered.locator("a.rule-link").first.inner_text()
    assert name.startswith("remembered-")

    second = _ask(server, token, "second", "A-2", 120)  # another order, the same amount, the same session
    assert (second["decision"], second["decided_by"]) == ("approved", f"rule:{name}")
    third = _ask(server, token, "third", "A-3", 130)
    assert third["decision"] == "pending"

    run_id = server.call(server.store.calls.get_call(second["call_id"])).run_id
    page.goto(f"{server.url}/runs/{run_id}")
    entry = page.locator("ol.timeline li.entry.call").filter(has_text="A-2")
    expect(entry).to_contain_text(f"Approved by rule {name}, version 1")
    expect(entry.locator(".rule-mention .badge")).to_have_text("remembered")
    expect(entry.locator("a.rule-link")).to_have_attribute("href", f"/rules/{name}")
    expect(page.locator("ol.timeline li.entry.call").filter(has_text="A-3")).to_contain_text("pending")


def test_a_reviewer_outside_the_group_sees_why_and_no_approve_button(
    server: LiveServer, page: Page, browser: Browser
) -> None:
    token = _routing_rule(server)
    call = _ask(server, token, "routed", "B-1", 300)
    server.login(page, "bob")  # in no group
    page.goto(f"{server.url}/calls/{call['call_id']}")
    card = page.locator(".slot.current article.call-card")
    expect(card.locator(".routing")).to_contain_text("Routed to: finance")
    assert OUTSIDER_SENTENCE is not None
    expect(card).to_contain_text(OUTSIDER_SENTENCE)
    expect(card.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(card.locator("summary", has_text="Approve and remember")).to_have_count(0)
    expect(card.locator("summary", has_text="Edit & approve")).to_have_count(0)
    expect(card.locator("summary", has_text="Deny")).to_have_count(1)  # deny stays

    page.goto(f"{server.url}/?for_me=1")
    expect(page.locator(".whose a.active")).to_contain_text("For me 0")
    expect(page.locator("tr[data-call]")).to_have_count(0)
