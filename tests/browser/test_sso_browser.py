"""A reviewer signs in through a real OpenID provider in Chromium and approves a call (issue 40).

node-oidc-provider runs on a free port with its own login and consent pages; the app runs
with its worker on and the provider configured, no local passwords. The browser goes where
a person's would: the inbox sends them to the login page, its "Sign in with" button to the
provider, the provider back to the inbox; there they approve a call as the provider's user,
and the audit log records the provider's issuer and subject with the decision.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from playwright.sync_api import Page, expect
from sqlalchemy import select

from approvals.store.models import AuditEventRow
from approvals.worker.resumer import AgentRegistry

from ..live_server import LiveServer, serving
from ..oidc.harness import oidc_provider, provider_settings
from ..processes import free_port
from ..store.agents import email_agent


def _sign_in_at_the_provider(page: Page, user: str) -> None:
    """The provider's own pages: its login form (any password), then consent when it asks."""
    page.locator("input[name=login]").fill(user)
    page.locator("input[name=password]").fill("anything")
    page.locator("button[type=submit]").click()
    page.wait_for_load_state()
    if "/interaction/" in page.url:  # the consent page: this client asks for openid, profile and email
        page.locator("button[type=submit]").click()


def _decision_events(server: LiveServer, call_id: str) -> list[AuditEventRow]:
    async def read() -> list[AuditEventRow]:
        async with server.store.db.read() as session:
            rows = await session.scalars(
                select(AuditEventRow).where(
                    AuditEventRow.action == "call.approved", AuditEventRow.subject_id == call_id
                )
            )
            return list(rows.all())

    return server.call(read())


def test_a_reviewer_signs_in_through_the_provider_and_approves_a_call(db_url: str, tmp_path: Path, page: Page) -> None:
    port = free_port()
    registry = AgentRegistry([email_agent])
    with (
        oidc_provider(tmp_path, f"http://127.0.0.1:{port}") as provider,
        serving(
            db_url, tmp_path, registry, port=port, users=False, oidc_providers=[provider_settings(provider)]
        ) as server,
    ):
        page.goto(server.url + "/")
        expect(page).to_have_url(re.compile(r"/login"))
        expect(page.get_by_label("Password")).to_have_count(0)  # local passwords are off once a provider is configured
        page.get_by_role("link", name="Sign in with Test IdP").click()
        expect(page).to_have_url(re.compile(rf"^{re.escape(provider.issuer)}/interaction/"))
        _sign_in_at_the_provider(page, "alice")
        expect(page).to_have_url(server.url + "/")
        expect(page.locator(".who")).to_contain_text("alice")
        expect(page.locator(".live-region")).to_have_attribute("data-live", "open")

        run_id = server.start_run("mailer", "Tell Ann her order shipped")
        row = page.locator("tr[data-call]")
        expect(row).to_have_count(1, timeout=20_000)
        row.get_by_role("button", name="Approve", exact=True).click()
        expect(row).to_contain_text("by alice")

        [call] = server.call(server.store.calls.run_calls(run_id))
        [approved] = _decision_events(server, call.id)
        assert approved.actor == "alice"
        assert approved.details["channel"] == "web"
        assert approved.details["identity"] == {"issuer": provider.issuer, "subject": "alice"}
        deadline = time.monotonic() + 20
        while (run := server.call(server.store.runs.get_run(run_id))).status != "completed":  # the worker resumes it
            assert time.monotonic() < deadline, run.status
            time.sleep(0.1)
