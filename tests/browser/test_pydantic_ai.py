"""A pydantic-ai agent's run in the browser: started over the API, decided in the inbox, completed by pydantic-ai.

The agent is a real `pydantic_ai.Agent` with pydantic-ai's `FunctionModel`; the app's worker
resumes it with the reviewers' decisions as pydantic-ai `DeferredToolResults` (issue 16).
"""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from approvals.store import SYSTEM

from ..live_server import LiveServer


def test_a_pydantic_ai_run_is_edited_approved_and_denied_in_the_browser(server: LiveServer, page: Page) -> None:
    token = server.call(server.store.people.create_token("chat-app", role="reviewer", actor=SYSTEM, user="bob"))
    response = httpx.post(
        f"{server.url}/api/runs",
        json={"agent": "pai-helpdesk", "prompt": "Ann's machine broke.", "deps": {"log": str(server.tool_log)}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]

    server.login(page, "alice")
    page.goto(server.url + "/")
    rows = page.locator("tr[data-call]")
    expect(rows).to_have_count(3, timeout=20_000)
    rows.filter(has_text="refund").locator("a[data-action=open]").click()

    refund = page.locator(".slot.current article.call-card")
    expect(refund.locator("h2")).to_have_text("refund")
    expect(refund).to_contain_text("Refund part or all of an order.")
    expect(refund).to_contain_text("How much, in cents.")
    expect(page.locator(".conversation")).to_contain_text("Ann's machine broke.")
    refund.locator("summary", has_text="Edit & approve").click()
    refund.locator("input[name='args.amount_cents']").fill("0")
    refund.get_by_role("button", name="Approve with these arguments").click()
    expect(refund.locator(".edit-field.invalid .field-error")).to_contain_text("greater than 0")  # pydantic-ai's rule
    refund.locator("input[name='args.amount_cents']").fill("12000")
    refund.get_by_role("button", name="Approve with these arguments").click()
    expect(refund.locator(".outcome")).to_contain_text("Edited and approved by alice")

    voucher = page.locator("article.call-card", has=page.locator("h2", has_text="send_voucher"))
    voucher.get_by_role("button", name="Approve", exact=True).click()
    expect(voucher.locator(".outcome")).to_contain_text("Approved by alice")

    close = page.locator("article.call-card", has=page.locator("h2", has_text="close_account"))
    close.locator("summary", has_text="Deny").click()
    close.get_by_label("Reason (the model reads it)").fill("Ann wants to stay a customer.")
    close.get_by_role("button", name="Deny").click()
    expect(close.locator(".outcome")).to_contain_text("Denied by alice")

    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run h1 .badge")).to_have_text("completed", timeout=20_000)
    timeline = page.locator("ol.timeline")
    expect(timeline.locator(".entry.system")).to_contain_text("You are the helpdesk of a coffee-machine shop.")
    expect(timeline.locator(".entry.call")).to_have_count(3)
    expect(timeline.locator(".entry.result", has_text="send_voucher")).to_contain_text("voucher of 10 EUR sent to ann@")
    expect(timeline.locator(".entry.denied")).to_contain_text("Ann wants to stay a customer.")
    expect(timeline.locator(".entry.text").last).to_contain_text("refund=success:refunded 12000 on A-1042")
    expect(timeline.locator(".entry.text").last).to_contain_text("close_account=denied:Ann wants to stay a customer.")
    assert sorted(server.tool_log.read_text().splitlines()) == ["refund A-1042 12000", "voucher ann@example.com 10"]
