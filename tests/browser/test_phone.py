"""The reviewer's pages on a phone, in a real browser: 390 by 844, touch, a device scale factor of 3.

Below 600 px the inbox's rows become cards; what only a browser can show is that nothing scrolls
sideways, that Approve and Deny are within the screen's width, that a long argument summary wraps,
and that tapping them decides the calls. Calls come through the gate over HTTP (and from the support
agent, whose call page has a conversation and nested arguments to edit).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from approvals.store import SYSTEM

from ..live_server import LiveServer
from .agents import PROMPT
from .test_reviewer import _screenshot

WIDTH = 390
LONG_MESSAGE = (
    "Release 4.2 is ready: see https://ci.example.com/builds/main/2025-06-01T12:00:00Z/artifacts/approvals-4.2.0"
    "-py3-none-any.whl for the wheel"
)
"""A long argument, with a run of characters that has no space to break at."""


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(
        viewport={"width": WIDTH, "height": 844}, device_scale_factor=3, is_mobile=True, has_touch=True
    )
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def _ask(gate: httpx.Client, tool: str, args: dict[str, Any], key: str) -> str:
    """A call asked through the gate, as a program that runs elsewhere asks; its id."""
    body = {"source": "release-bot", "session_id": "phone", "tool_name": tool, "args": args, "idempotency_key": key}
    response = gate.post("/api/gate/calls", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["decision"] == "pending"
    call_id: str = response.json()["call_id"]
    return call_id


def _assert_fits(page: Page) -> None:
    """No horizontal scrolling: the document is no wider than the viewport (the elements that stick out, if any)."""
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')]
              .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
              .map(e => e.tagName.toLowerCase() + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))
              .slice(0, 8)"""
    )
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] == WIDTH, (widths, wide)


def _box(element: Locator) -> dict[str, float]:
    """Where `element` is drawn, read in one step in the page: the live inbox may swap its row between
    a visibility check and a separate read of its box (which is then None), never within one evaluate."""
    expect(element).to_be_visible()
    box: dict[str, float] = element.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, height: r.height} }"
    )
    return box


def _assert_within_reach(control: Locator) -> None:
    box = _box(control)
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, box


def test_a_reviewer_decides_calls_on_a_phone(server: LiveServer, phone: Page, screenshots: Path) -> None:
    token = server.call(
        server.store.people.create_token("release", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    )
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as gate:
        announce = _ask(gate, "post_announcement", {"channel": "#releases", "message": LONG_MESSAGE}, "announce")
        approve_id = _ask(gate, "deploy", {"service": "billing", "version": "4.2.0"}, "deploy")
        deny_id = _ask(gate, "drop_table", {"table": "invoices_2019"}, "drop")
    run_id = server.start_run("support", PROMPT)

    server.login(phone, "alice")
    phone.goto(server.url + "/")
    rows = phone.locator("tr[data-call]")
    expect(rows).to_have_count(6, timeout=20_000)  # three asked through the gate, three from the support agent
    _assert_fits(phone)
    for row in rows.all():
        _assert_within_reach(row.get_by_role("button", name="Approve", exact=True))
        _assert_within_reach(row.get_by_role("button", name="Deny", exact=True))
        _assert_within_reach(row.get_by_label("Reason to deny"))
    summary = phone.locator(f"#row-{announce} td.summary")
    expect(summary).to_contain_text("https://ci.example.com/builds/main/")
    box = _box(summary)
    assert box["x"] + box["width"] <= WIDTH, box
    lines = summary.evaluate(
        "e => { const text = document.createRange(); text.selectNodeContents(e); return text.getClientRects().length }"
    )
    assert lines > 1, "the summary did not wrap"
    _screenshot(phone, screenshots / "phone-inbox.png")

    # the decided row the reviewer sees is the POST's answer, swapped in; the live list drops it a second after
    # (it lists pending calls), so on a slow machine the row may be gone before a look at the page
    approve_row = phone.locator(f"#row-{approve_id}")
    with phone.expect_response(lambda r: r.url.endswith(f"/calls/{approve_id}/approve")) as approving:
        approve_row.get_by_role("button", name="Approve", exact=True).tap()
    assert approving.value.ok and "by alice" in approving.value.text()
    deny_row = phone.locator(f"#row-{deny_id}")
    deny_row.get_by_label("Reason to deny").tap()
    phone.keyboard.type("Keep the 2019 invoices: the auditors need them.")
    with phone.expect_response(lambda r: r.url.endswith(f"/calls/{deny_id}/deny")) as denying:
        deny_row.get_by_role("button", name="Deny", exact=True).tap()
    assert denying.value.ok and "by alice" in denying.value.text()
    expect(approve_row.filter(has_text="pending")).to_have_count(0)  # decided, whether shown so or dropped
    _assert_fits(phone)
    approved = server.call(server.store.calls.get_call(approve_id))
    assert (approved.status, approved.verdict, approved.decided_by) == ("approved", "approve", "alice")
    denied = server.call(server.store.calls.get_call(deny_id))
    assert (denied.status, denied.decided_by) == ("denied", "alice")
    assert denied.denial_reason == "Keep the 2019 invoices: the auditors need them."

    # The support agent's refund: a conversation, nested arguments, and every form of the card opened.
    phone.locator("tr[data-call]", has_text="refund").locator("a[data-action=open]").tap()
    card = phone.locator(".slot.current article.call-card")
    expect(card.locator("h2")).to_have_text("refund")
    _assert_fits(phone)
    _assert_within_reach(card.get_by_role("button", name="Approve", exact=True))
    for form in ("Deny", "Edit & approve", "Answer instead"):
        card.locator("summary", has_text=form).tap()
    _assert_within_reach(card.get_by_role("button", name="Deny", exact=True))
    _assert_within_reach(card.get_by_role("button", name="Approve with these arguments"))
    _assert_within_reach(card.get_by_role("button", name="Send answer"))
    _assert_within_reach(card.get_by_label("Reason (the model reads it)"))
    _assert_fits(phone)
    _screenshot(phone, screenshots / "phone-call.png", max_height=1800)

    # A call asked through the gate: the session's calls beside it, and approve and remember.
    phone.goto(f"{server.url}/calls/{announce}")
    card = phone.locator(".slot.current article.call-card")
    card.locator("summary", has_text="Approve and remember").tap()
    _assert_within_reach(card.get_by_role("button", name="Approve and remember"))
    _assert_within_reach(card.locator("textarea[name=condition]"))
    expect(card.locator(".value").filter(has_text="https://ci.example.com")).to_be_visible()
    _assert_fits(phone)
    _screenshot(phone, screenshots / "phone-call-remember.png", max_height=1500)

    phone.goto(f"{server.url}/runs/{run_id}")
    expect(phone.locator("#run h1 .badge")).to_have_text("awaiting approval")
    _assert_fits(phone)
    _screenshot(phone, screenshots / "phone-run.png")
