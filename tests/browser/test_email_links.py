"""A reviewer denies a call from a real mail, in Chromium: the message comes from a real SMTP server (aiosmtpd).

The app runs under uvicorn with its worker on; its durable deliverer mails the call with the
e-mail channel. The test reads the delivered message, follows its Deny link in the browser,
types a reason, submits, and the run goes on with the call denied for that reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import anyio
import pytest
from playwright.sync_api import Page, expect

from approvals.channels.outbound import deliver_outbound
from approvals.channels.settings import OutboundSettings, SmtpSettings
from approvals.store import SYSTEM, Store
from approvals.store.outbox import WebhookCursors

from ..fixtures.smtp_server import SmtpServer, smtp_server
from ..live_server import LiveServer
from .test_phone import _assert_fits

REASON = "Ann asked us not to write to her again."


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with smtp_server() as server:
        yield server


@pytest.fixture
def mailing(server: LiveServer, smtp: SmtpServer) -> Iterator[None]:
    """The e-mail channel's deliverer on the server's event loop, as `approvals serve` runs it."""
    outbound = OutboundSettings(
        public_url=server.url,
        smtp=SmtpSettings(host=smtp.host, port=smtp.port, sender="approvals@example.com", security="none"),
    )

    async def start(store: Store) -> tuple[anyio.Event, asyncio.Task[None]]:
        stop = anyio.Event()
        task = asyncio.get_running_loop().create_task(
            deliver_outbound(store, outbound, stop, backoff=0.05, poll_interval=0.2)
        )
        with anyio.fail_after(10):
            while await WebhookCursors(store.outbound).get("email") is None:  # following the log from here on
                await anyio.sleep(0.05)
        return stop, task

    async def end(stop: anyio.Event, task: asyncio.Task[None]) -> None:
        stop.set()
        await task

    stop, task = server.call(start(server.store))
    yield
    server.call(end(stop, task))


def test_a_reviewer_denies_a_call_from_the_link_in_a_mail(
    server: LiveServer, smtp: SmtpServer, mailing: None, page: Page
) -> None:
    server.call(server.store.people.set_user_contact("alice", actor=SYSTEM, email="alice@example.com"))
    run_id = server.start_run("mailer", "Write to Ann.")
    [mail] = smtp.wait_for(1, seconds=20)
    assert mail.recipients == ["alice@example.com"] and mail.subject == "Approval needed: send_email (mailer)"
    deny = mail.link("Deny")
    assert deny.startswith(f"{server.url}/email/")

    page.set_viewport_size({"width": 390, "height": 844})  # read on a phone
    page.goto(deny)
    expect(page.get_by_role("heading", name="Deny send_email?")).to_be_visible()
    expect(page.locator("pre.email-args")).to_contain_text('"to": "ann@example.com"')
    _assert_fits(page)
    page.get_by_label("Reason").fill(REASON)
    page.get_by_role("button", name="Deny").click()
    expect(page.get_by_role("heading", name="Denied")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text(REASON)

    [call] = server.call(server.store.calls.run_calls(run_id))
    assert (call.status, call.decided_by, call.denial_reason) == ("denied", "alice", REASON)
    deadline = time.monotonic() + 20
    while (run := server.call(server.store.runs.get_run(run_id))).status != "completed":  # the worker resumes it
        assert time.monotonic() < deadline, run.status
        time.sleep(0.1)
    assert REASON in (run.output or "")

    page.goto(deny)  # the link worked once
    expect(page.get_by_role("heading", name="Link already used")).to_be_visible()
