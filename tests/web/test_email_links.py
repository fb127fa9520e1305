"""The pages behind the links in reviewers' mail, followed from real messages (aiosmtpd), on SQLite and PostgreSQL.

A GET shows the call and changes nothing; the POST from that page decides once, as the
recipient, through the same rules as the inbox. Used, expired, unknown, stale and refused
links each get a clear page with their status, and leave the call as it was.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import update

from approvals import Agent
from approvals.calls.options import CallRefusal, refusal_sentence
from approvals.calls.verdicts import Approve, EditAndApprove
from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolDeniedPart,
    model_facing_content,
)
from approvals.engines.native.models import AgentInfo, FunctionModel
from approvals.store import SYSTEM, Actor
from approvals.store.email_links import LinkProblem
from approvals.store.models import EmailLinkRow

from ..eventually import eventually
from ..fixtures.smtp_server import Delivered, SmtpServer, smtp_server
from .conftest import WebApp
from .test_email import SERVICE, gate_refund, mailing, paused_run, reviewers
from .test_gate import gate_call

pytestmark = pytest.mark.anyio

ALICE = "alice@example.com"


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with smtp_server() as server:
        yield server


def _wipe_model(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
    """Asks to wipe a disk, then says back word for word what it was told about that call."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="wipe_disk", args={"disk": "/dev/sdb"}, tool_call_id="w1")])
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    told = [model_facing_content(p) for p in last.parts if isinstance(p, ToolDeniedPart)]
    return ModelResponse(parts=[TextPart(content="The model read: " + " | ".join(told))])


wiper: Agent[Any] = Agent(FunctionModel(_wipe_model), name="wiper")


@wiper.tool_plain(requires_approval=True)
def wipe_disk(disk: str) -> str:
    """Erase a disk."""
    raise AssertionError("a denied call must never run")


def token_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def path_of(url: str) -> str:
    return url.removeprefix("http://testserver")


async def mail_for(web: WebApp, smtp: SmtpServer, address: str = ALICE, count: int = 1) -> Delivered:
    await eventually(lambda: len(smtp.messages(to=address)) >= count)
    return smtp.messages(to=address)[count - 1]


def assert_private(response: httpx.Response) -> None:
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-store"


async def test_approving_by_mail_shows_a_page_then_decides_once_and_the_run_goes_on(
    web: WebApp, smtp: SmtpServer, tmp_path: Path
) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        run_id = await paused_run(web, tmp_path)
        mail = await mail_for(web, smtp)
    approve = path_of(mail.link("Approve"))
    [call] = await web.store.calls.run_calls(run_id)
    async with web.client() as browser:
        for _ in range(2):  # a mail scanner, then the reviewer: looking changes nothing
            page = await browser.get(approve)
            assert page.status_code == 200, page.text
            assert_private(page)
            assert "Approve <code>send_email</code>?" in page.text and "as <strong>alice</strong>" in page.text
            assert '"to": "ann@example.com"' in html.unescape(page.text)
            assert 'name="csrf_token"' not in page.text and "<textarea" not in page.text
        assert (await web.store.calls.get_call(call.id)).status == "pending"
        assert all(link.used_at is None for link in await web.store.outbound.email_links_of(call.id))

        done = await browser.post(approve)
        assert done.status_code == 200, done.text
        assert_private(done)
        assert "You approved send_email" in done.text
        decided = await web.store.calls.get_call(call.id)
        assert (decided.status, decided.decided_by) == ("approved", "alice")
        assert (await web.app.state.context.service.resume_now(run_id)).status == "completed"
        assert (tmp_path / "log").read_text() == "email ann@example.com\n"

        again = await browser.post(approve)  # reused: the link worked once
        assert again.status_code == 410 and "Link already used" in again.text
        assert "(by alice)" in again.text  # and what became of the call
        assert (await browser.get(approve)).status_code == 410
        other = await browser.post(path_of(mail.link("Deny")), data={"reason": "too late"})
        assert other.status_code == 409 and "Approved by alice" in other.text
    assert (await web.store.calls.get_call(call.id)).status == "succeeded"


async def test_denying_by_mail_reaches_the_model_with_the_reason(web: WebApp, smtp: SmtpServer, tmp_path: Path) -> None:
    await reviewers(web)
    web.app.state.context.registry.register(wiper)
    async with mailing(web, smtp):
        run_id = await web.store.runs.start_run("wiper", "tidy up", actor=SERVICE)
        assert (await web.app.state.context.service.resume_now(run_id)).status == "awaiting_approval"
        mail = await mail_for(web, smtp)
    deny = path_of(mail.link("Deny"))
    async with web.client() as browser:
        page = await browser.get(deny)
        assert page.status_code == 200
        assert "Deny <code>wipe_disk</code>?" in page.text and '<textarea id="reason" name="reason"' in page.text
        blank = await browser.post(deny, data={"reason": "   "})  # refused, and the link stays unused
        assert blank.status_code == 422 and "Write why you deny this call" in blank.text
        [call] = await web.store.calls.run_calls(run_id)
        assert call.status == "pending"
        done = await browser.post(deny, data={"reason": "That disk holds the <backups>."})
        assert done.status_code == 200, done.text
        assert "The agent is told why: That disk holds the &lt;backups&gt;." in done.text
    run = await web.app.state.context.service.resume_now(run_id)
    assert run.status == "completed"
    assert run.output.startswith("The model read: DENIED")
    assert "That disk holds the <backups>." in run.output
    denied = await web.store.calls.get_call(call.id)
    assert (denied.status, denied.decided_by, denied.denial_reason) == (
        "denied",
        "alice",
        "That disk holds the <backups>.",
    )


async def test_an_expired_or_unknown_link_gets_a_clear_page_and_decides_nothing(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1")
        mail = await mail_for(web, smtp)
    approve = path_of(mail.link("Approve"))
    async with web.client() as browser:
        unknown = await browser.get(approve[:-4] + "AAAA")
        assert unknown.status_code == 404 and "Link not found" in unknown.text
        assert (await browser.post(approve[:-4] + "AAAA")).status_code == 404
        async with web.store.db.write() as session:
            await session.execute(
                update(EmailLinkRow).values(expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
            )
        for response in (await browser.get(approve), await browser.post(approve)):
            assert response.status_code == 410 and "Link expired" in response.text
            assert_private(response)
    assert (await web.store.calls.get_call(call_id)).status == "pending"


async def test_arguments_edited_after_the_mail_make_its_links_stale(
    web: WebApp, smtp: SmtpServer, tmp_path: Path
) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        run_id = await paused_run(web, tmp_path, agent="shop")  # delete_customer needs two approvals
        await eventually(lambda: len(smtp.messages(to=ALICE)) == 2)
    [mail] = [m for m in smtp.messages(to=ALICE) if "delete_customer" in m.subject]
    calls = {c.tool_name: c for c in await web.store.calls.run_calls(run_id)}
    delete = calls["delete_customer"]
    edit = EditAndApprove(args={"customer_id": 8}, args_digest=delete.current_digest)
    await web.app.state.context.service.decide(delete.id, edit, actor=Actor("bob", "reviewer"))  # 1 of 2
    approve = path_of(mail.link("Approve"))
    async with web.client() as browser:
        for response in (await browser.get(approve), await browser.post(approve)):
            assert response.status_code == 409 and "The arguments changed" in response.text
            assert "Nothing was decided" in response.text and f'href="/calls/{delete.id}"' in response.text
    now = await web.store.calls.get_call(delete.id)
    assert now.status == "pending" and [d.actor for d in await web.store.calls.decisions_for(delete.id)] == ["bob"]
    assert all(link.used_at is None for link in await web.store.outbound.email_links_of(delete.id))


async def test_a_decision_that_lost_the_race_says_who_won(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1")
        mail = await mail_for(web, smtp)
    approve = path_of(mail.link("Approve"))
    async with web.client() as browser:
        assert (await browser.get(approve)).status_code == 200  # alice reads the page...
        fred = Actor("fred", "reviewer", frozenset({"finance"}))
        await web.store.calls.decide(call_id, Approve(), actor=fred)  # ...while fred approves in the inbox
        lost = await browser.post(approve)
        assert lost.status_code == 409, lost.text
        assert "Already decided" in lost.text and "Approved by fred" in lost.text
        assert "Nothing was changed" in lost.text or "was not applied" in lost.text
    assert [d.actor for d in await web.store.calls.decisions_for(call_id)] == ["fred"]


async def test_a_disabled_reviewer_or_one_outside_the_groups_is_refused(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1")
        alice = await mail_for(web, smtp)
        fred = await mail_for(web, smtp, "fred@example.com")
    await web.store.people.update_user("alice", actor=SYSTEM, disabled=True)
    await web.store.people.set_user_groups("fred", ["support"], actor=SYSTEM)
    async with web.client() as browser:
        for response in (
            await browser.get(path_of(alice.link("Approve"))),
            await browser.post(path_of(alice.link("Approve"))),
        ):
            assert response.status_code == 403 and "disabled" in response.text
        outsider = await browser.post(path_of(fred.link("Approve")))
        assert outsider.status_code == 403
        assert html.escape(refusal_sentence(CallRefusal.NOT_IN_GROUPS)) in outsider.text
        assert (await web.store.calls.get_call(call_id)).status == "pending"
        assert all(link.used_at is None for link in await web.store.outbound.email_links_of(call_id))
        denied = await browser.post(path_of(fred.link("Deny")), data={"reason": "Not ours to refund."})
        assert denied.status_code == 200  # anyone may deny; only finance may approve
    assert (await web.store.calls.get_call(call_id)).decided_by == "fred"


async def test_whoever_asked_a_call_cannot_approve_it_by_mail(web: WebApp, smtp: SmtpServer) -> None:
    """Carol is in finance and asks a refund through the gate with her own token: her mail's Approve is refused."""
    await reviewers(web)
    await web.store.people.create_user("carol", "carol-pw-1234", role="reviewer", actor=SYSTEM)
    await web.store.people.set_user_groups("carol", ["finance"], actor=SYSTEM)
    await web.store.people.set_user_contact("carol", actor=SYSTEM, email="carol@example.com")
    token = await web.store.people.create_token(
        "carol-ask", role="reviewer", actor=SYSTEM, user="carol", scopes=["calls:ask"]
    )
    async with mailing(web, smtp):
        async with web.client(headers={"Authorization": f"Bearer {token}"}) as carol:
            body = gate_call(session_id="carol-1", args={"order_id": "A-1", "amount": 120})
            asked = await carol.post("/api/gate/calls", json=body)
        assert asked.status_code == 201, asked.text
        mail = await mail_for(web, smtp, "carol@example.com")
    call_id = asked.json()["call_id"]
    async with web.client() as browser:
        refused = await browser.post(path_of(mail.link("Approve")))
        assert refused.status_code == 403, refused.text
        assert html.escape(refusal_sentence(CallRefusal.OWN_CALL)) in refused.text
        assert (await web.store.calls.get_call(call_id)).status == "pending"
        assert all(link.used_at is None for link in await web.store.outbound.email_links_of(call_id))
        denied = await browser.post(path_of(mail.link("Deny")), data={"reason": "Asked by mistake."})
        assert denied.status_code == 200  # she may still take her own call back
    assert (await web.store.calls.get_call(call_id)).status == "denied"


async def test_one_of_many_concurrent_claims_of_a_link_wins(web: WebApp, smtp: SmtpServer) -> None:
    await reviewers(web)
    async with mailing(web, smtp):
        call_id = await gate_refund(web, "1")
        mail = await mail_for(web, smtp)
    token = token_of(mail.link("Approve"))
    results: list[object] = []

    async def claim() -> None:
        results.append(await web.store.outbound.claim_email_link(token))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(claim)
    won = [r for r in results if isinstance(r, EmailLinkRow)]
    assert len(won) == 1 and won[0].call_id == call_id and won[0].username == "alice"
    assert [r for r in results if not isinstance(r, EmailLinkRow)] == [LinkProblem.USED] * 7
    assert await web.store.outbound.claim_email_link("no-such-token") is LinkProblem.UNKNOWN
