"""A compliance reviewer in Chromium: "what did alice approve last week?" in one click, then the call's story,
each line linking to its event and its hash. Screenshots go where the `screenshots` fixture says (docs/ with
APPROVALS_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from ..audit.sentences_scenario import a_day
from ..live_server import LiveServer


def test_a_reviewer_answers_what_alice_approved_last_week_and_reads_the_story(
    server: LiveServer, page: Page, tmp_path: Path, screenshots: Path
) -> None:
    calls = server.call(a_day(server.store, tmp_path / "log", native=False))
    backend = "postgresql" if server.store.backend.name == "postgresql" else "sqlite"
    shots = screenshots / "audit-review"
    shots.mkdir(exist_ok=True)

    server.login(page, "alice")
    page.goto(f"{server.url}/audit")
    expect(page.locator("li.audit-event").first).to_be_visible()
    expect(
        page.locator(".sentence", has_text="bob edited send_email: subject 'Refund' → 'Refund for A-1002'")
    ).to_be_visible()
    page.screenshot(path=str(shots / f"1-audit-log-{backend}.png"), full_page=False)

    page.get_by_role("link", name="What did alice approve last week?").click()
    expect(page).to_have_url(re.compile(r"/audit\?actor=alice&verdict=approved&since=7d$"))
    answer = page.locator("li.audit-event")
    expect(answer).to_have_count(1)
    expect(answer.locator(".sentence")).to_have_text("alice approved ship (order A-1005) via the API")
    answer.locator("summary", has_text="Details").click()
    expect(answer.locator("pre.details-json")).to_contain_text('"channel": "api"')
    page.screenshot(path=str(shots / f"2-what-alice-approved-last-week-{backend}.png"), full_page=True)

    answer.get_by_role("link", name=re.compile("story of call")).click()
    expect(page).to_have_url(re.compile(f"/calls/{calls['ship'].id}/story$"))
    story = page.locator("ol.story-log .sentence")
    expect(story).to_have_text(
        [
            "service support-app asked to run ship (order A-1005); rule ships-in-a-day v1 asks people"
            " (gate session third)",
            "alice approved ship (order A-1005) via the API",
            "service support-app was handed ship (order A-1005) to run",
            "service support-app ran ship (order A-1005): it succeeded",
        ]
    )
    page.screenshot(path=str(shots / f"3-call-story-{backend}.png"), full_page=True)

    page.locator("ol.story-log a.event-link").nth(1).click()
    expect(page.locator("h1")).to_contain_text("Event")
    expect(page.locator("dl.chain code.hash")).to_have_count(2)
    page.screenshot(path=str(shots / f"4-event-and-its-hashes-{backend}.png"), full_page=True)

    page.goto(f"{server.url}/calls/{calls['big'].id}")  # the call page loads its story below
    expect(page.locator("section.story .sentence").nth(2)).to_have_text(
        "fay approved refund (order A-1002, 900) via the web, 2 of 2 approvals"
    )
    page.locator("section.story").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"5-call-page-with-its-story-{backend}.png"), full_page=True)
