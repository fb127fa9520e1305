"""A reviewer's path through the app in a real browser: live inbox, call page, edit, approve, deny, run page.

What only a browser can show: the inbox fills in over server-sent events without a reload,
htmx swaps the 422 and 409 answers into the card (our responseHandling config), and the
keyboard shortcuts work.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from ..live_server import LiveServer
from .agents import PROMPT


def _screenshot(page: Page, path: Path, max_height: int = 1200) -> None:
    """The top of the page, down to the end of its content or `max_height`."""
    box = page.locator("main").bounding_box()
    assert box is not None
    height = min(box["y"] + box["height"] + 16, max_height)
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 1360, "height": height})


def _open_inbox(server: LiveServer, page: Page) -> None:
    server.login(page, "alice")
    page.goto(server.url + "/")
    expect(page.locator(".live-region")).to_have_attribute("data-live", "open")  # the event stream is open
    page.evaluate("window.stillTheSamePage = true")


def test_a_reviewer_edits_approves_and_denies_and_the_run_completes(
    server: LiveServer, page: Page, screenshots: Path
) -> None:
    _open_inbox(server, page)
    expect(page.locator(".empty")).to_contain_text("no call is waiting")

    run_id = server.start_run("support", PROMPT)
    rows = page.locator("tr[data-call]")
    expect(rows).to_have_count(3, timeout=20_000)  # appeared over server-sent events
    assert page.evaluate("window.stillTheSamePage") is True, "the inbox reloaded"
    refund_row = rows.filter(has_text="refund")
    expect(refund_row).to_have_class("expiring")  # ten minutes left, inside the "expiring soon" window
    expect(refund_row.locator(".summary")).to_contain_text('order_id=A-1042, amount=149.90, reason="Arrived with')
    server.start_run("mailer", "Tell Ann her order shipped")
    expect(rows).to_have_count(4)
    expect(page.locator(".counts a.active")).to_contain_text("pending 4")
    _screenshot(page, screenshots / "inbox.png")

    refund_row.locator("a[data-action=open]").click()
    expect(page).to_have_url(re.compile(r"/calls/[0-9a-f]+$"))
    refund = page.locator(".slot.current article.call-card")
    expect(refund.locator("h2")).to_have_text("refund")
    expect(refund).to_contain_text("Refund part or all of an order to the customer's card.")
    expect(refund).to_contain_text("How much to refund, in euros.")
    expect(page.locator("article.call-card")).to_have_count(3)  # the step's other calls, to decide one by one
    expect(page.locator(".conversation")).to_contain_text("my espresso machine from order A-1042")
    expect(page.locator(".conversation")).to_contain_text("lookup_order returned")
    _screenshot(page, screenshots / "call-detail.png")
    call_id = page.url.rsplit("/", 1)[1]

    refund.locator("summary", has_text="Edit & approve").click()
    refund.locator("input[name='args.amount']").fill("abc")
    refund.get_by_role("button", name="Approve with these arguments").click()
    error = refund.locator(".edit-field.invalid .field-error")
    expect(error).to_contain_text("valid decimal")  # the 422 answer was swapped in place
    expect(refund.locator("input[name='args.amount']")).to_have_value("abc")
    assert server.call(server.store.calls.get_call(call_id)).status == "pending"  # nothing was saved

    refund.locator("input[name='args.amount']").fill("120.00")
    refund.get_by_role("button", name="Approve with these arguments").click()
    expect(refund.locator(".outcome")).to_contain_text("Edited and approved by alice")

    ship = page.locator("article.call-card", has=page.locator("h2", has_text="ship_replacement"))
    expect(ship).to_contain_text("Recipient's full name.")  # a field of the nested model
    ship.get_by_role("button", name="Approve", exact=True).click()
    expect(ship.locator(".outcome")).to_contain_text("Approved by alice")

    close = page.locator("article.call-card", has=page.locator("h2", has_text="close_account"))
    close.locator("summary", has_text="Deny").click()
    close.get_by_label("Reason (the model reads it)").fill("Keep the account until the replacement has arrived.")
    close.get_by_role("button", name="Deny").click()
    expect(close.locator(".outcome")).to_contain_text("Denied by alice")

    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run h1 .badge")).to_have_text("completed", timeout=20_000)
    output = page.locator(".card.output")
    expect(output).to_contain_text('refund returned "refunded 120.00 EUR on A-1042"')
    timeline = page.locator("ol.timeline")
    expect(timeline.locator(".entry.denied")).to_contain_text("Keep the account until the replacement has arrived.")
    expect(timeline.locator(".entry.text").last).to_contain_text(
        "close_account was denied (Keep the account until the replacement has arrived.), so I did not do it"
    )
    expect(timeline).to_contain_text("ran with arguments a reviewer edited")


def test_keyboard_approval_in_the_inbox_and_the_run_page_updates_itself(server: LiveServer, page: Page) -> None:
    _open_inbox(server, page)
    run_id = server.start_run("mailer", "Tell Ann her order shipped")
    row = page.locator("tr[data-call]")
    expect(row).to_have_count(1, timeout=20_000)
    page.keyboard.press("j")
    expect(row).to_be_focused()
    page.keyboard.press("a")
    # The row shows the call as it is once the verdict is stored; a quick worker may already
    # have claimed the run and marked the call executing (or run it) by then.
    expect(row.locator(".badge").last).to_have_text(re.compile(r"^(approved|executing|succeeded)$"))
    expect(row).to_contain_text("by alice")
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run h1 .badge")).to_have_text("completed", timeout=20_000)
    expect(page.locator(".card.output")).to_contain_text('send_email returned "sent"')

    second = server.start_run("mailer", "Tell Ben his order shipped")
    page.goto(server.url + "/")
    expect(row).to_have_count(1, timeout=20_000)
    page.keyboard.press("j")
    page.keyboard.press("d")
    expect(page.locator("[data-action=deny-reason]")).to_be_focused()
    page.keyboard.type("Ben unsubscribed")
    page.keyboard.press("Enter")
    expect(row).to_contain_text("denied")
    page.goto(f"{server.url}/runs/{second}")
    expect(page.locator("#run h1 .badge")).to_have_text("completed", timeout=20_000)
    expect(page.locator(".entry.denied")).to_contain_text("Ben unsubscribed")


def test_a_late_approval_shows_who_decided_first(server: LiveServer, page: Page, browser: Browser) -> None:
    server.start_run("mailer", "Tell Ann her order shipped")
    server.login(page, "alice")
    page.goto(server.url + "/")
    expect(page.locator("tr[data-call]")).to_have_count(1, timeout=20_000)
    page.locator("a[data-action=open]").click()
    card = page.locator(".slot.current article.call-card")
    expect(card).to_contain_text("send_email")

    other = browser.new_context()
    bob = other.new_page()
    server.login(bob, "bob")
    bob.goto(page.url)
    bob.locator(".slot.current article.call-card summary", has_text="Deny").click()
    bob.get_by_label("Reason (the model reads it)").fill("Ann asked for no emails")
    bob.get_by_role("button", name="Deny").click()
    expect(bob.locator(".outcome")).to_contain_text("Denied by bob")
    other.close()

    card.get_by_role("button", name="Approve", exact=True).click()  # the page still shows the old state
    expect(card.locator(".flash")).to_have_text("bob decided this call first (denied); your decision was not applied.")
    expect(card.locator(".outcome")).to_contain_text("Denied by bob")


def test_filters_and_search_update_the_list_in_place(server: LiveServer, page: Page) -> None:
    server.start_run("support", PROMPT)
    server.start_run("mailer", "Tell Ann her order shipped")
    _open_inbox(server, page)
    rows = page.locator("tr[data-call]")
    expect(rows).to_have_count(4, timeout=20_000)
    page.get_by_label("Tool").select_option("send_email")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"tool=send_email"))
    page.get_by_label("Tool").select_option("")
    page.get_by_label("Search arguments").fill("10969")  # the postcode in the parcel address
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("ship_replacement")
    page.get_by_label("Search arguments").fill("no such thing")
    expect(page.locator(".empty")).to_be_visible()
    assert page.evaluate("window.stillTheSamePage") is True, "filtering reloaded the page"


def test_a_live_refresh_waits_while_the_reviewer_types(server: LiveServer, page: Page) -> None:
    server.start_run("mailer", "Tell Ann her order shipped")
    _open_inbox(server, page)
    rows = page.locator("tr[data-call]")
    expect(rows).to_have_count(1, timeout=20_000)
    reason = rows.first.locator("[data-action=deny-reason]")
    reason.fill("Ann unsub")  # half-typed when a new call arrives
    server.start_run("support", PROMPT)
    page.wait_for_timeout(2_500)  # the refresh would have come after 1 s
    expect(rows).to_have_count(1)
    expect(reason).to_have_value("Ann unsub")
    page.locator("h1").click()  # leaving the field lets the list catch up
    expect(rows).to_have_count(4)
