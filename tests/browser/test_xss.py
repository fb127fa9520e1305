"""Forty-odd XSS payloads, placed by a scripted model in text, arguments, a tool name and a result, and by
reviewers in a denial reason and an answer, run nowhere: not on the inbox, the call page, its htmx swaps,
the run page, the runs list or the audit log.

A positive control puts the same payloads into a page unescaped, with no CSP, and the same
detector catches them there, so the test would fail if the app rendered one as markup.
"""

from __future__ import annotations

from playwright.sync_api import Browser, Dialog, Page, expect

from ..live_server import LiveServer
from .xss import PAYLOADS


def _catch_dialogs(page: Page) -> list[str]:
    caught: list[str] = []

    def dismissed(dialog: Dialog) -> None:
        caught.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismissed)
    return caught


def test_the_detector_catches_the_payloads_when_they_are_not_escaped(browser: Browser) -> None:
    context = browser.new_context()
    page = context.new_page()
    caught = _catch_dialogs(page)
    page.set_content("<div>" + "\n".join(PAYLOADS) + "</div>")
    page.wait_for_timeout(1500)
    context.close()
    assert len(set(caught)) >= 20, f"only {sorted(set(caught))} ran: the harness would miss executions"


def test_no_payload_runs_anywhere_a_reviewer_looks(server: LiveServer, page: Page) -> None:
    caught = _catch_dialogs(page)
    run_id = server.start_run("xss", "go")
    server.login(page, "alice")
    page.goto(server.url + "/")
    rows = page.locator("tr[data-call]")
    expect(rows).to_have_count(3, timeout=20_000)
    calls = {c.tool_call_id: c for c in server.call(server.store.calls.run_calls(run_id))}

    page.goto(f"{server.url}/calls/{calls['gate0'].id}")
    page.locator("details.raw summary").first.click()
    page.locator(".slot.current button.approve").first.click()
    expect(page.locator(".slot.current")).to_contain_text("approved")

    reason = "\n".join(PAYLOADS)
    page.goto(f"{server.url}/calls/{calls['gate1'].id}")
    page.locator(".slot.current summary", has_text="Deny").click()
    page.locator(".slot.current textarea[name=reason]").fill(reason)
    page.locator(".slot.current button.deny").click()
    expect(page.locator(".slot.current")).to_contain_text("denied")

    page.goto(f"{server.url}/calls/{calls['gate2'].id}")
    page.locator(".slot.current summary", has_text="Answer instead").click()
    page.locator(".slot.current textarea[name=content]").fill(reason)
    page.locator(".slot.current button", has_text="Send answer").click()
    expect(page.locator(".slot.current")).to_contain_text("answered")

    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run")).to_contain_text("completed", timeout=20_000)
    run_text = page.locator("#run").inner_text()
    for payload in PAYLOADS:
        assert payload in run_text, f"not shown as text: {payload}"
    assert page.locator("#xss40").count() == 0, "a javascript: link became a real link"
    for path in ("/runs", "/audit", "/?status=all"):
        page.goto(server.url + path)
        page.wait_for_timeout(300)
    page.wait_for_timeout(1000)
    assert caught == [], f"payloads ran: {caught}"
