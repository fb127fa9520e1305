"""Linking one's own Slack account from the link an unmapped member gets in Slack, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from approvals.calls.states import CallStatus
from approvals.channels.slack_blocks import ACTION_APPROVE
from approvals_web.slack.people import LINK_SALT, LINK_TTL, link_token

from ..fixtures.fake_slack import FakeSlack
from .conftest import CSRF_FIELD, WebApp
from .test_slack import NOBODY, ephemeral_to, fake, paused_run, posted_about, web  # noqa: F401 - fixtures

pytestmark = pytest.mark.anyio

SECRET_KEY = "test-secret"
LINK = re.compile(r"<https://approvals\.example(/account/slack\?token=[^|>]+)\|")


async def link_from_slack(web: WebApp, fake: FakeSlack, tmp_path: Path) -> str:  # noqa: F811
    """The path an unmapped member's ephemeral links to, after clicking Approve."""
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    async with web.client() as slack_side:
        await fake.click(slack_side, message, ACTION_APPROVE, NOBODY)
    [told] = await ephemeral_to(fake, NOBODY)
    found = LINK.search(told["text"])
    assert found is not None, told["text"]
    return html.unescape(found.group(1))


async def test_a_member_links_their_account_and_then_decides_as_themselves(
    web: WebApp,  # noqa: F811
    fake: FakeSlack,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = await link_from_slack(web, fake, tmp_path)
    async with web.client() as anonymous:
        away = await anonymous.get(path)
    assert away.status_code == 303 and away.headers["location"].startswith("/login?next=/account/slack?token=")

    client, _ = await web.login("bob")
    page = await client.get(path)
    assert page.status_code == 200
    assert NOBODY in page.text and "bob" in page.text and "T0FAKETEAM" in page.text
    assert "<strong>Nobody</strong>" in page.text  # the member's name in Slack: whose account is linked
    assert "If someone sent you this link, do not link it." in page.text
    form_csrf = CSRF_FIELD.search(page.text)
    assert form_csrf is not None
    token = path.split("token=", 1)[1]
    forged = await client.post("/account/slack", data={"token": token})
    assert forged.status_code == 403
    assert (await web.store.people.user_by_slack_id(NOBODY)) is None
    linked = await client.post("/account/slack", data={"token": token, "csrf_token": form_csrf.group(1)})
    assert linked.status_code == 200 and "now linked to bob" in linked.text
    user = await web.store.people.user_by_slack_id(NOBODY)
    assert user is not None and user.username == "bob"

    [message] = fake.posted()
    async with web.client() as slack_side:
        await fake.click(slack_side, message, ACTION_APPROVE, NOBODY)
    call = await web.store.calls.get_call(message.buttons()[ACTION_APPROVE]["value"].split('"')[3])
    assert call.decided_by == "bob" and call.status != CallStatus.PENDING


class _LongAgo(TimestampSigner):
    def get_timestamp(self) -> int:
        return int(time.time()) - LINK_TTL - 60


async def test_bad_or_expired_tokens_get_a_clear_page_and_link_nothing(web: WebApp) -> None:  # noqa: F811
    expired = URLSafeTimedSerializer(SECRET_KEY, salt=LINK_SALT, signer=_LongAgo).dumps(
        {"user": NOBODY, "team": "T0FAKETEAM"}
    )
    forged = link_token("another-secret-key", NOBODY, "T0FAKETEAM")
    client, csrf = await web.login("bob")
    for token in (expired, forged, "nonsense", ""):
        page = await client.get("/account/slack", params={"token": token})
        assert page.status_code == 400 and "invalid or has expired" in page.text
        posted = await client.post("/account/slack", data={"token": token, "csrf_token": csrf})
        assert posted.status_code == 400
    good = link_token(SECRET_KEY, NOBODY, "T0FAKETEAM")
    assert (await client.get("/account/slack", params={"token": good})).status_code == 200
    assert await web.store.people.user_by_slack_id(NOBODY) is None


async def test_a_member_already_linked_to_someone_else_is_not_taken_over(web: WebApp) -> None:  # noqa: F811
    token = link_token(SECRET_KEY, "U0ALICE", "T0FAKETEAM")  # alice's member id
    client, csrf = await web.login("bob")
    taken = await client.post("/account/slack", data={"token": token, "csrf_token": csrf})
    assert taken.status_code == 409 and "already has" in taken.text
    user = await web.store.people.user_by_slack_id("U0ALICE")
    assert user is not None and user.username == "alice"
