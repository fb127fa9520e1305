"""Slack against a fake of Slack's servers (tests/fixtures/fake_slack.py), on SQLite and PostgreSQL.

The app runs with Slack configured, so its lifespan runs the durable deliverer with the
Slack channel, as `approvals serve` does; Slack's side (posting, clicking, modals) is the
fake's, over real HTTP one way (the Web API) and signed requests the other (interactions).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import approvals_web.webhooks
from approvals.calls.options import CallRefusal, refusal_sentence
from approvals.calls.states import CallStatus, RunStatus
from approvals.calls.verdicts import Approve
from approvals.channels.outbound import deliver_outbound
from approvals.channels.slack_blocks import ACTION_APPROVE, ACTION_DENY, ACTION_OPEN, REASON_ACTION, REASON_BLOCK
from approvals.policy import load_rules
from approvals.policy.follow_ups import Step
from approvals.store import SYSTEM, Actor, Store
from approvals.store.models import ToolCallRow
from approvals.worker.resumer import AgentRegistry
from approvals_web.app import create_app
from approvals_web.settings import Settings

from ..eventually import eventually
from ..fixtures.fake_slack import FakeSlack, SlackMessage, running_fake_slack
from ..store.agents import email_agent, shop_agent
from .conftest import PASSWORDS, ROLES, WebApp
from .test_gate import gate_call

pytestmark = pytest.mark.anyio

PUBLIC_URL = "https://approvals.example"
REVIEW, FINANCE, LOCKED = "C0REVIEW", "C0FINANCE", "C0LOCKED"
ALICE, BOB, NOBODY, EVE, CAROL = "U0ALICE", "U0BOB", "U0NOBODY", "U0EVE", "U0CAROL"
SERVICE = Actor("svc", "reviewer")
ROUTING = """
rules:
  - name: refunds-need-finance
    tool: refund
    effect: ask
    groups: [finance]
"""


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    slack = FakeSlack(channels={REVIEW: True, FINANCE: True, LOCKED: False}, trigger_seconds=60)
    slack.add_user(ALICE, "alice")
    slack.add_user(BOB, "bob", email="Bob@Example.com", confirmed=True)
    slack.add_user(NOBODY, "nobody")
    slack.add_user(EVE, "eve", email="alice@example.com", confirmed=False)
    with running_fake_slack(slack) as running:
        yield running


def slack_settings(db_url: str, fake: FakeSlack, **overrides: Any) -> Settings:
    return Settings(
        database_url=db_url,
        worker=True,
        secret_key="test-secret",
        public_url=PUBLIC_URL,
        slack_bot_token=fake.token,
        slack_signing_secret=fake.signing_secret,
        slack_channel=REVIEW,
        slack_routes={"finance": FINANCE},
        slack_api_url=fake.url,
        **overrides,
    )


@pytest.fixture
async def web(db_url: str, fake: FakeSlack) -> AsyncIterator[WebApp]:
    """The app with Slack on, its deliverer caught up with the log; alice linked to her Slack member id."""
    async for app in running_app(slack_settings(db_url, fake)):
        yield app


async def running_app(settings: Settings) -> AsyncIterator[WebApp]:
    app = create_app(settings, registry=AgentRegistry([shop_agent, email_agent]))
    async with app.router.lifespan_context(app):
        store: Store = app.state.context.store
        for name, role in ROLES.items():
            await store.people.create_user(name, PASSWORDS[name], role=role, actor=SYSTEM)
        await store.people.set_user_contact("alice", actor=SYSTEM, slack_user_id=ALICE, email="alice@example.com")
        await store.people.set_user_contact("bob", actor=SYSTEM, email="bob@example.com")
        health = app.state.deliverer_health
        await eventually(lambda: health.destinations.get("slack") is not None)
        await eventually(lambda: health.destinations["slack"].state == "delivering")
        yield WebApp(app=app, store=store)


async def paused_run(web: WebApp, tmp_path: Path, agent: str = "shop") -> dict[str, ToolCallRow]:
    """A run waiting for people: its calls by tool."""
    run_id = await web.store.runs.start_run(agent, "go", actor=SERVICE, deps={"log": str(tmp_path / "log")})
    assert (await web.app.state.context.service.resume_now(run_id)).status == "awaiting_approval"
    return {call.tool_name: call for call in await web.store.calls.run_calls(run_id)}


async def posted_about(fake: FakeSlack, call: ToolCallRow, count: int = 1) -> list[SlackMessage]:
    """The top-level messages about `call`, once `count` of them are there."""

    def found() -> list[SlackMessage]:
        return [m for m in fake.posted() if call.id in m.all_text()]

    await eventually(lambda: len(found()) >= count)
    return found()


async def settled(web: WebApp, call_id: str) -> ToolCallRow:
    with anyio.fail_after(10):
        while (call := await web.store.calls.get_call(call_id)).status == CallStatus.PENDING:
            await anyio.sleep(0.02)
    return call


async def ephemeral_to(fake: FakeSlack, user: str, count: int = 1) -> list[dict[str, Any]]:
    await eventually(lambda: len([e for e in fake.ephemerals if e["user"] == user]) >= count)
    return [e for e in fake.ephemerals if e["user"] == user]


def says(fake: FakeSlack, channel: str, ts: str, text: str) -> bool:
    return text in fake.message(channel, ts).all_text()


def has_buttons(message: SlackMessage) -> bool:
    return bool(message.buttons())


# --- a pending call reaches Slack ---------------------------------------------------------------


async def test_a_pending_call_is_posted_once_with_its_arguments_and_buttons(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    calls = await paused_run(web, tmp_path, agent="mailer")
    call = calls["send_email"]
    [message] = await posted_about(fake, call)
    assert message.channel == REVIEW
    text = message.all_text()
    assert "*mailer* asks to run *send_email*" in text
    assert "to: ann@example.com" in text and "body: Hello" in text
    assert "Any reviewer may approve" in text and "Expires <!date^" in text
    buttons = message.buttons()
    assert set(buttons) == {ACTION_APPROVE, ACTION_DENY, ACTION_OPEN}
    assert buttons[ACTION_APPROVE]["text"]["text"] == "Approve" and buttons[ACTION_APPROVE]["style"] == "primary"
    assert call.id in buttons[ACTION_APPROVE]["value"] and call.args_digest in buttons[ACTION_APPROVE]["value"]
    assert buttons[ACTION_OPEN]["url"] == f"{PUBLIC_URL}/calls/{call.id}"
    with anyio.fail_after(5):  # recorded right after Slack answered
        while not (recorded := await web.store.outbound.sent_messages(call.id, "slack")):
            await anyio.sleep(0.02)
    [sent] = recorded
    assert (sent.destination, sent.purpose, sent.ref) == (REVIEW, "pending", f"{REVIEW} {message.ts}")
    post = fake.calls_of("chat.postMessage")[0]
    assert post.headers["Authorization"] == f"Bearer {fake.token}"
    assert post.headers["Content-Type"].startswith("application/json")
    await anyio.sleep(0.3)
    assert len(fake.calls_of("chat.postMessage")) == 1  # never posted twice


async def test_a_call_routed_to_a_group_goes_to_its_route(web: WebApp, fake: FakeSlack, tmp_path: Path) -> None:
    await web.store.rules.apply_rules(load_rules(ROUTING), actor=SYSTEM)
    calls = await paused_run(web, tmp_path)
    refund, delete = calls["refund"], calls["delete_customer"]
    assert refund.approver_groups == ["finance"]
    [routed] = await posted_about(fake, refund)
    [other] = await posted_about(fake, delete)
    assert routed.channel == FINANCE and "Routed to finance" in routed.all_text()
    assert other.channel == REVIEW and "2 approvals needed" in other.all_text()


# --- deciding in Slack --------------------------------------------------------------------------


async def test_approving_in_slack_with_a_quorum_completed_on_the_web_resumes_the_run(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    calls = await paused_run(web, tmp_path)
    refund, delete = calls["refund"], calls["delete_customer"]
    [refund_message] = await posted_about(fake, refund)
    [delete_message] = await posted_about(fake, delete)
    async with web.client() as slack_side:
        started = time.monotonic()
        answer = await fake.click(slack_side, refund_message, ACTION_APPROVE, ALICE)
        assert answer.status_code == 200 and time.monotonic() - started < 3
        assert (await fake.click(slack_side, delete_message, ACTION_APPROVE, ALICE)).status_code == 200
    assert (await web.store.calls.get_call(refund.id)).decided_by == "alice"
    await eventually(lambda: "1 of 2 approvals (alice)" in fake.message(REVIEW, delete_message.ts).all_text())
    assert has_buttons(fake.message(REVIEW, delete_message.ts))  # the quorum still needs someone

    await web.store.calls.decide(delete.id, Approve(args_digest=delete.args_digest), actor=Actor("bob", "reviewer"))
    with anyio.fail_after(15):
        while (await web.store.runs.get_run(refund.run_id)).status != RunStatus.COMPLETED:
            await anyio.sleep(0.05)
    assert "refund A-1 450" in (tmp_path / "log").read_text()
    await eventually(lambda: "Approved by alice" in fake.message(REVIEW, refund_message.ts).all_text())
    await eventually(lambda: "Approved by bob" in fake.message(REVIEW, delete_message.ts).all_text())
    assert not has_buttons(fake.message(REVIEW, refund_message.ts))
    assert not has_buttons(fake.message(REVIEW, delete_message.ts))
    assert not fake.ephemerals  # nobody was told anything went wrong


async def test_deny_opens_a_modal_whose_reason_reaches_the_call(web: WebApp, fake: FakeSlack, tmp_path: Path) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        assert (await fake.click(slack_side, message, ACTION_DENY, ALICE)).status_code == 200
        [view_id] = fake.views
        view = fake.views[view_id]
        assert view["title"]["text"] == "Deny this call" and call.id in view["private_metadata"]
        empty = await fake.submit(slack_side, view_id, ALICE, {REASON_BLOCK: {REASON_ACTION: "  "}})
        assert empty.json()["response_action"] == "errors" and REASON_BLOCK in empty.json()["errors"]
        assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
        done = await fake.submit(slack_side, view_id, ALICE, {REASON_BLOCK: {REASON_ACTION: "not to customers"}})
        assert done.status_code == 200 and done.content == b""  # an empty answer closes the modal
    denied = await web.store.calls.get_call(call.id)
    assert (denied.status, denied.denial_reason, denied.decided_by) == (CallStatus.DENIED, "not to customers", "alice")
    await eventually(lambda: "Denied by alice: not to customers" in fake.message(REVIEW, message.ts).all_text())
    assert not has_buttons(fake.message(REVIEW, message.ts))


async def test_a_modal_sent_after_someone_else_decided_says_so_on_its_field(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        await fake.click(slack_side, message, ACTION_DENY, ALICE)
        [view_id] = fake.views
        await web.store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=Actor("bob", "reviewer"))
        answer = await fake.submit(slack_side, view_id, ALICE, {REASON_BLOCK: {REASON_ACTION: "too late"}})
    assert "bob decided this call first" in answer.json()["errors"][REASON_BLOCK]  # approved, or run by now
    assert (await web.store.calls.get_call(call.id)).decided_by == "bob"


# --- refusals -----------------------------------------------------------------------------------


async def test_forged_or_stale_signatures_are_refused_logged_and_decide_nothing(
    web: WebApp, fake: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    payload = fake.block_actions(message, ACTION_APPROVE, ALICE)
    caplog.set_level(logging.WARNING, logger="approvals.slack")
    async with web.client() as slack_side:
        forged = await fake.send(slack_side, payload, secret="not-the-signing-secret")
        stale = await fake.send(slack_side, payload, timestamp=int(time.time()) - 6 * 60)
        unsigned = await fake.send(slack_side, payload, signed=False)
        bad_time = await slack_side.post(
            "/slack/interactions",
            content=b"payload=%7B%7D",
            headers={"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"},
        )
    assert [r.status_code for r in (forged, stale, unsigned, bad_time)] == [401, 401, 401, 401]
    refusals = [r.getMessage() for r in caplog.records if "refused an interaction" in r.getMessage()]
    assert len(refusals) == 4
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert fake.signing_secret not in logged and "block_actions" not in logged
    assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
    assert await web.store.calls.decisions_for(call.id) == []


async def test_an_unmapped_member_is_told_privately_and_nothing_is_decided(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        assert (await fake.click(slack_side, message, ACTION_APPROVE, NOBODY)).status_code == 200
        assert (await fake.click(slack_side, message, ACTION_DENY, NOBODY)).status_code == 200
    told = await ephemeral_to(fake, NOBODY, count=2)
    assert all(e["channel"] == REVIEW for e in told)
    assert "Nothing was decided: your Slack account is not linked" in told[0]["text"]
    assert f"<{PUBLIC_URL}/account/slack?token=" in told[0]["text"]
    assert not fake.views  # no modal for someone who cannot decide
    assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
    assert await web.store.calls.decisions_for(call.id) == []


async def test_a_confirmed_slack_email_maps_to_its_user_and_an_unconfirmed_one_does_not(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        await fake.click(slack_side, message, ACTION_APPROVE, EVE)  # claims alice's address, unconfirmed
        [told] = await ephemeral_to(fake, EVE)
        assert "not linked" in told["text"]
        assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
        await fake.click(slack_side, message, ACTION_APPROVE, BOB)  # bob@example.com, confirmed by Slack
    approved = await web.store.calls.get_call(call.id)
    assert (approved.verdict, approved.decided_by) == ("approve", "bob")
    lookups = fake.calls_of("users.info")
    assert {c.arguments["user"] for c in lookups} == {EVE, BOB}
    await eventually(lambda: "Approved by bob" in fake.message(REVIEW, message.ts).all_text())


async def test_a_lost_race_is_told_privately_and_the_message_says_who_won(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    await web.store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=Actor("bob", "reviewer"))
    async with web.client() as slack_side:
        assert (await fake.click(slack_side, message, ACTION_APPROVE, ALICE)).status_code == 200
    [told] = await ephemeral_to(fake, ALICE)
    assert "bob decided this call first" in told["text"] and "your decision was not applied" in told["text"]
    assert (await web.store.calls.get_call(call.id)).decided_by == "bob"
    await eventually(lambda: "Approved by bob" in fake.message(REVIEW, message.ts).all_text())


async def test_a_reviewer_outside_the_routed_group_is_refused_privately(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    await web.store.rules.apply_rules(load_rules(ROUTING), actor=SYSTEM)
    refund = (await paused_run(web, tmp_path))["refund"]
    [message] = await posted_about(fake, refund)
    async with web.client() as slack_side:
        await fake.click(slack_side, message, ACTION_APPROVE, ALICE)
    [told] = await ephemeral_to(fake, ALICE)
    assert told["channel"] == FINANCE
    assert refusal_sentence(CallRefusal.NOT_IN_GROUPS).split(":")[0] in told["text"]
    assert (await web.store.calls.get_call(refund.id)).status == CallStatus.PENDING


async def test_whoever_asked_a_call_is_refused_privately_when_they_click_approve(web: WebApp, fake: FakeSlack) -> None:
    """Carol asks through the gate with her own token; her Slack click on Approve is hers too, so it is refused."""
    fake.add_user(CAROL, "carol")
    await web.store.people.create_user("carol", "carol-pw-1234", role="reviewer", actor=SYSTEM)
    await web.store.people.set_user_contact("carol", actor=SYSTEM, slack_user_id=CAROL)
    token = await web.store.people.create_token(
        "carol-ask", role="reviewer", actor=SYSTEM, user="carol", scopes=["calls:ask"]
    )
    async with web.client(headers={"Authorization": f"Bearer {token}"}) as carol:
        asked = await carol.post("/api/gate/calls", json=gate_call(source="billing", session_id="carol-1"))
    assert asked.status_code == 201, asked.text
    call = await web.store.calls.get_call(asked.json()["call_id"])
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        assert (await fake.click(slack_side, message, ACTION_APPROVE, CAROL)).status_code == 200
    [told] = await ephemeral_to(fake, CAROL)
    assert refusal_sentence(CallRefusal.OWN_CALL) in told["text"]
    assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
    assert await web.store.calls.decisions_for(call.id) == []
    assert has_buttons(fake.message(REVIEW, message.ts))  # still waiting for another reviewer


async def test_interactions_need_slack_configured(db_url: str, fake: FakeSlack) -> None:
    app = create_app(Settings(database_url=db_url, worker=False, secret_key="s"))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        assert (await client.post("/slack/interactions", content=b"payload=%7B%7D")).status_code == 404


# --- outages ------------------------------------------------------------------------------------


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's deliverer tries a failed message again after 0.05 s (doubling up to 0.2 s), not 1 s doubling
    up to 5 minutes: these tests are about what is retried and what is lost, not the backoff's length
    (tests/worker/test_deliverer.py tests that). Set up before the app, whose lifespan starts the deliverer."""
    monkeypatch.setattr(
        approvals_web.webhooks, "deliver_outbound", partial(deliver_outbound, backoff=0.05, max_backoff=0.2)
    )


@pytest.mark.usefixtures("quick_retries")
@pytest.mark.parametrize("status", [500, 429])
async def test_a_slack_outage_is_retried_and_nothing_is_lost(
    web: WebApp, fake: FakeSlack, tmp_path: Path, status: int
) -> None:
    fake.fail_next(2, status=status, retry_after=1 if status == 429 else None, method="chat.postMessage")
    started = time.monotonic()
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    if status == 429:
        assert time.monotonic() - started >= 2  # Retry-After honoured on each of the two refusals
    failed = [c for c in fake.calls if c.method == "chat.postMessage" and c.status != 200]
    assert [c.status for c in failed] == [status, status]
    fake.fail_next(1, status=503, method="chat.update")
    await web.store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=Actor("bob", "reviewer"))
    await eventually(lambda: "Approved by bob" in fake.message(REVIEW, message.ts).all_text())
    await anyio.sleep(0.3)
    assert len([m for m in fake.posted() if call.id in m.all_text()]) == 1


async def test_a_destination_the_bot_cannot_post_to_is_passed_over(
    db_url: str, fake: FakeSlack, tmp_path: Path
) -> None:
    settings = slack_settings(db_url, fake).model_copy(update={"slack_routes": {"finance": LOCKED, "ops": FINANCE}})
    async for web in running_app(settings):
        rules = ROUTING.replace("groups: [finance]", "groups: [finance, ops]")
        await web.store.rules.apply_rules(load_rules(rules), actor=SYSTEM)
        refund = (await paused_run(web, tmp_path))["refund"]
        [message] = await posted_about(fake, refund)
        assert message.channel == FINANCE
        refused = [c for c in fake.calls_of("chat.postMessage") if c.answer.get("error") == "not_in_channel"]
        assert [c.arguments["channel"] for c in refused] == [LOCKED]
        with anyio.fail_after(5):
            while not (recorded := await web.store.outbound.sent_messages(refund.id, "slack")):
                await anyio.sleep(0.02)
        assert [m.destination for m in recorded] == [FINANCE]


async def test_a_reminder_replies_in_the_thread_and_an_escalation_reaches_the_escalation_route(
    web: WebApp, fake: FakeSlack, tmp_path: Path
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    now = dt.datetime.now(dt.UTC)
    assert await web.store.outbound.follow_up(call.id, Step.REMIND, due_at=now)
    await eventually(lambda: len(fake.replies(message)) == 1)
    [reply] = fake.replies(message)
    assert "still waits for a decision" in reply.text and "expires <!date^" in reply.text
    assert await web.store.outbound.follow_up(call.id, Step.ESCALATE, due_at=now, groups=["finance"])
    [escalated] = (await posted_about(fake, call, count=2))[1:]
    assert escalated.channel == FINANCE and "Escalated: nobody decided yet" in escalated.all_text()
    assert has_buttons(escalated)
    await web.store.calls.decide(call.id, Approve(args_digest=call.args_digest), actor=Actor("bob", "reviewer"))
    for channel, ts in ((message.channel, message.ts), (escalated.channel, escalated.ts)):  # every message updated
        await eventually(partial(says, fake, channel, ts, "Approved by bob"))
    await anyio.sleep(0.3)
    assert len(fake.replies(message)) == 1 and len(fake.posted()) == 2
    purposes = sorted(m.purpose for m in await web.store.outbound.sent_messages(call.id, "slack"))
    assert purposes == ["escalation", "pending", "reminder"]
