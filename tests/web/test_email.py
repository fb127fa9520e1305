"""Reviewers' mail against a real SMTP server (aiosmtpd on 127.0.0.1), on SQLite and PostgreSQL.

The app's durable deliverer runs the e-mail channel (`approvals.channels.email`) as
`approvals serve` does; calls come through the gate under rules that route refunds to the
finance group, or from the native test agents. The tests read the messages the server
accepted: who got one, what they say, and that outages and refusals lose and repeat nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import html
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from approvals.calls.verdicts import Deny
from approvals.channels.email_content import MailLinks, compose_call_mail
from approvals.policy import load_rules
from approvals.policy.follow_ups import Step
from approvals.store import SYSTEM, Actor
from approvals.store.outbox import WebhookCursors
from approvals_web.webhooks import deliver_webhooks

from ..eventually import eventually
from ..fixtures.smtp_server import Delivered, SmtpServer, smtp_server
from .conftest import PASSWORDS, WebApp
from .test_gate import asking_client, gate_call

pytestmark = pytest.mark.anyio

MAIL_FROM = "approvals@example.com"
PUBLIC_URL = "http://testserver"
SERVICE = Actor("svc", "reviewer")
RULES = """
rules:
  - name: refunds-need-finance
    tool: refund
    effect: ask
    groups: [finance]
"""
ADDRESSES = {
    "alice": "alice@example.com",
    "fred": "fred@example.com",
    "dora": "dora@example.com",
    "ada": "ada@example.com",
    "victor": "victor@example.com",
    "sam": "sam@example.com",
}
"""bob has no address; dora is disabled; ada is an admin outside finance; victor a viewer; sam is in support."""


async def reviewers(web: WebApp) -> None:
    """Finance: alice, bob (no address), fred, dora (disabled); support: sam; ada admin, victor viewer."""
    for name in ("fred", "dora", "sam"):
        await web.store.people.create_user(name, PASSWORDS["alice"], role="reviewer", actor=SYSTEM)
    for name in ("alice", "bob", "fred", "dora"):
        await web.store.people.set_user_groups(name, ["finance"], actor=SYSTEM)
    await web.store.people.set_user_groups("sam", ["support"], actor=SYSTEM)
    for name, address in ADDRESSES.items():
        await web.store.people.set_user_contact(name, actor=SYSTEM, email=address)
    await web.store.people.update_user("dora", actor=SYSTEM, disabled=True)
    await web.store.rules.apply_rules(load_rules(RULES), actor=SYSTEM)


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with smtp_server() as server:
        yield server


@asynccontextmanager
async def mailing(web: WebApp, smtp: SmtpServer, backoff: float = 0.05, **settings: Any) -> AsyncIterator[None]:
    """Run the app's deliverer with e-mail through `smtp` until the block ends, waiting `backoff` (up to
    0.2 s, or `backoff` if longer) between failed tries."""
    context = web.app.state.context
    changed = {
        "smtp_host": smtp.host,
        "smtp_port": smtp.port,
        "smtp_security": "none",
        "mail_from": MAIL_FROM,
        "public_url": PUBLIC_URL,
        **settings,
    }
    replaced = dataclasses.replace(context, settings=context.settings.model_copy(update=changed))
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        options = {"backoff": backoff, "max_backoff": max(backoff, 0.2), "poll_interval": 0.2, "request_timeout": 5.0}
        await group.start(functools.partial(deliver_webhooks, replaced, stop, **options))
        yield
        stop.set()


async def gate_refund(web: WebApp, key: str, amount: float = 120, order_id: str | None = None) -> str:
    """A refund asked through the gate (routed to finance); its call id."""
    async with await asking_client(web) as agent:
        body = gate_call(idempotency_key=key, args={"order_id": order_id or f"A-{key}", "amount": amount})
        response = await agent.post("/api/gate/calls", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["decision"] == "pending"
    call_id: str = response.json()["call_id"]
    return call_id


async def paused_run(web: WebApp, tmp_path: Path, agent: str = "mailer") -> str:
    run_id = await web.store.runs.start_run(agent, "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    assert (await web.app.state.context.service.resume_now(run_id)).status == "awaiting_approval"
    return run_id


def recipients(mails: list[Delivered]) -> list[str]:
    return sorted(r for mail in mails for r in mail.recipients)


async def test_a_pending_call_mails_the_reviewers_it_is_routed_to_and_nobody_else(
    web: WebApp, smtp: SmtpServer
) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1", order_id="<script>alert(1)</script> & co")
        await eventually(lambda: len(smtp.messages()) == 2)
        await anyio.sleep(0.3)  # nothing more comes
    mails = smtp.messages()
    assert recipients(mails) == ["alice@example.com", "fred@example.com"]  # finance, enabled, with an address
    mail = smtp.messages(to="alice@example.com")[0]
    assert mail.sender == MAIL_FROM and mail.message["From"] == MAIL_FROM and mail.to == "alice@example.com"
    assert mail.subject == "Approval needed: refund (billing-service)"
    assert mail.message["Message-ID"] and mail.message["Auto-Submitted"] == "auto-generated"
    text = mail.text
    assert "billing-service wants to run refund" in text
    assert "  amount: 120" in text
    assert "  order_id: <script>alert(1)</script> & co" in text  # plain text: as written
    assert "Routed to: finance (1 approval needed), by rule refunds-need-finance" in text
    approve, deny = mail.link("Approve"), mail.link("Deny")
    assert approve.startswith(f"{PUBLIC_URL}/email/") and deny.startswith(f"{PUBLIC_URL}/email/") and approve != deny
    assert mail.link("Open in the inbox") == f"{PUBLIC_URL}/calls/{call_id}"
    page = mail.html
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page
    assert f'href="{html.escape(approve)}"' in page and f'href="{html.escape(deny)}"' in page
    assert smtp.messages(to="fred@example.com")[0].link("Approve") != approve  # each recipient's own links

    sent = await web.store.outbound.sent_messages(call_id, "email")
    assert sorted((m.destination, m.purpose) for m in sent) == [
        ("alice@example.com", "pending"),
        ("fred@example.com", "pending"),
    ]
    assert {m.ref for m in sent} == {str(m.message["Message-ID"]) for m in mails}
    links = await web.store.outbound.email_links_of(call_id)
    assert sorted((link.username, link.action) for link in links) == [
        ("alice", "approve"),
        ("alice", "deny"),
        ("fred", "approve"),
        ("fred", "deny"),
    ]
    call = await web.store.calls.get_call(call_id)
    assert all(link.args_digest == call.current_digest and link.used_at is None for link in links)
    assert all(len(link.token_hash) == 64 and link.token_hash not in approve + deny for link in links)


async def failing(web: WebApp, times: int = 1) -> str:
    """Wait until the e-mail cursor failed `times` times in a row; its last error."""
    cursors = WebhookCursors(web.store.outbound)
    with anyio.fail_after(10):
        while True:
            cursor = await cursors.get("email")
            if cursor is not None and cursor.failures >= times:
                return cursor.last_error or ""
            await anyio.sleep(0.05)


async def test_a_call_decided_before_its_mail_goes_out_is_not_mailed(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    smtp.stop()  # the first tries fail, and meanwhile the call is decided
    # between two tries, not during one: a mail already on its way when the decision lands may still go out
    async with mailing(web, smtp, backoff=3.0):
        decided = await gate_refund(web, "1")
        await failing(web)
        await web.store.calls.decide(
            decided, Deny(reason="no"), actor=Actor("alice", "reviewer", frozenset({"finance"}))
        )
        smtp.start()
        later = await gate_refund(web, "2")
        await eventually(lambda: len(smtp.messages()) == 2)
        await anyio.sleep(0.3)
    assert {m.link("Open in the inbox").rsplit("/", 1)[1] for m in smtp.messages()} == {later}
    assert await web.store.outbound.sent_messages(decided, "email") == []


async def test_mail_waits_out_an_smtp_outage_and_arrives_once(web: WebApp, tmp_path: Path) -> None:
    await reviewers(web)
    with smtp_server(started=False) as smtp:
        async with mailing(web, smtp):
            call_id = await gate_refund(web, "1")
            assert "SMTP 127.0.0.1" in await failing(web, times=2)
            assert await web.store.outbound.sent_messages(call_id, "email") == []
            smtp.start()  # the server is back
            await eventually(lambda: len(smtp.messages()) == 2)
            await anyio.sleep(0.5)
        assert recipients(smtp.messages()) == ["alice@example.com", "fred@example.com"]  # once each


async def test_a_recipient_refused_for_good_is_skipped_and_the_others_get_theirs(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    smtp.refuse.add("alice@example.com")
    async with mailing(web, smtp):
        first = await gate_refund(web, "1")
        second = await gate_refund(web, "2")  # not held up behind the refused recipient
        await eventually(lambda: len(smtp.messages()) == 2)
        await anyio.sleep(0.3)
    assert recipients(smtp.messages()) == ["fred@example.com", "fred@example.com"]
    assert smtp.rcpt_attempts.count("alice@example.com") == 2  # once per call, never retried
    for call_id in (first, second):
        assert [m.destination for m in await web.store.outbound.sent_messages(call_id, "email")] == ["fred@example.com"]
    cursor = await WebhookCursors(web.store.outbound).get("email")
    assert cursor is not None and cursor.failures == 0


async def test_a_recipient_deferred_for_now_is_tried_again_without_mailing_the_others_twice(
    web: WebApp, smtp: SmtpServer
) -> None:
    await reviewers(web)
    smtp.defer["fred@example.com"] = 2  # 451 twice, then accepted
    async with mailing(web, smtp):
        await gate_refund(web, "1")
        await eventually(lambda: len(smtp.messages()) == 2)
        await anyio.sleep(0.3)
    assert recipients(smtp.messages()) == ["alice@example.com", "fred@example.com"]
    assert smtp.rcpt_attempts.count("fred@example.com") == 3 and smtp.rcpt_attempts.count("alice@example.com") == 1


async def test_an_agent_call_is_mailed_to_every_reviewer_with_an_address_and_links_end_with_the_call(
    web: WebApp, smtp: SmtpServer, tmp_path: Path
) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        run_id = await paused_run(web, tmp_path)  # send_email: any reviewer, expires in 60 s
        await eventually(lambda: len(smtp.messages()) == 4)
    assert recipients(smtp.messages()) == sorted(ADDRESSES[n] for n in ("alice", "fred", "ada", "sam"))
    [call] = await web.store.calls.run_calls(run_id)
    assert call.expires_at is not None
    assert all(
        link.expires_at == call.expires_at for link in await web.store.outbound.email_links_of(call.id)
    )  # not 24 h
    mail = smtp.messages()[0]
    assert mail.subject == "Approval needed: send_email (mailer)"
    assert "Routed to: any reviewer (1 approval needed)" in mail.text
    assert f"Expires: {call.expires_at:%Y-%m-%d %H:%M} UTC" in mail.text


async def test_a_reminder_mails_the_reviewers_again_and_an_escalation_only_those_not_yet_told(
    web: WebApp, smtp: SmtpServer
) -> None:
    await reviewers(web)
    await web.store.people.set_user_groups("sam", ["support", "oncall"], actor=SYSTEM)
    await web.store.people.set_user_groups("fred", ["finance", "oncall"], actor=SYSTEM)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1")
        await eventually(lambda: len(smtp.messages()) == 2)
        now = dt.datetime.now(dt.UTC)
        assert await web.store.outbound.follow_up(call_id, Step.REMIND, due_at=now)
        await eventually(lambda: len(smtp.messages()) == 4)
        assert await web.store.outbound.follow_up(call_id, Step.ESCALATE, due_at=now, groups=["oncall"])
        await eventually(lambda: len(smtp.messages()) == 5)
        await anyio.sleep(0.3)
    reminders = [m for m in smtp.messages() if m.subject.startswith("Reminder: approval needed: refund")]
    assert recipients(reminders) == ["alice@example.com", "fred@example.com"]
    assert reminders[0].link("Approve") not in {m.link("Approve") for m in smtp.messages()[:2]}  # fresh links
    [escalation] = [m for m in smtp.messages() if m.subject.startswith("Escalated:")]
    assert escalation.recipients == ["sam@example.com"]  # fred, also on call, had his mails
    assert "escalated to oncall" in escalation.text
    purposes = sorted((m.destination, m.purpose) for m in await web.store.outbound.sent_messages(call_id, "email"))
    assert purposes == [
        ("alice@example.com", "pending"),
        ("alice@example.com", "reminder"),
        ("fred@example.com", "pending"),
        ("fred@example.com", "reminder"),
        ("sam@example.com", "escalation"),
    ]


async def test_every_value_in_the_html_part_is_escaped(web: WebApp, tmp_path: Path) -> None:
    run_id = await paused_run(web, tmp_path)
    [call] = await web.store.calls.run_calls(run_id)
    call.agent_name = 'evil"<b>agent</b>'
    call.tool_name = "tool<i>"
    call.args = {"<k>": "\"'&<v>"}
    call.approver_groups = ["<g>"]
    links = MailLinks(
        approve='https://x.example/email/a"b',
        deny="https://x.example/email/<d>",
        inbox=None,
        links_expire_at=dt.datetime.now(dt.UTC),
    )
    mail = compose_call_mail(call, sender=MAIL_FROM, recipient="a@example.com", links=links)
    body = mail.get_body(preferencelist=("html",))
    assert body is not None
    page: str = body.get_content()
    for raw in ("<b>", "<i>", "<k>", "<v>", "<g>", "<d>", 'a"b'):
        assert raw not in page
    assert "&lt;k&gt;" in page and "&quot;&#x27;&amp;&lt;v&gt;" in page and "Open in the inbox" not in page
    assert "\n" not in str(mail["Subject"])
