"""A SCIM deactivation reaches Slack on the next click: the member's user is disabled, so nothing is decided.

Against the fake Slack of tests/web/test_slack.py (its `fake` and `web` fixtures), on SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals.calls.states import CallStatus
from approvals.channels.slack_blocks import ACTION_APPROVE
from approvals.store import SYSTEM

from ..fixtures.fake_slack import FakeSlack
from .conftest import WebApp
from .test_slack import ALICE, BOB, fake, paused_run, posted_about, web  # noqa: F401 - fixtures used by name
from .test_slack import ephemeral_to as told_privately

pytestmark = pytest.mark.anyio

PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


async def test_a_deactivated_user_decides_nothing_in_slack_and_others_still_do(
    web: WebApp,  # noqa: F811 - test_slack's fixture
    fake: FakeSlack,  # noqa: F811 - test_slack's fixture
    tmp_path: Path,
) -> None:
    call = (await paused_run(web, tmp_path, agent="mailer"))["send_email"]
    [message] = await posted_about(fake, call)
    token = await web.store.people.create_token("idp", role="admin", actor=SYSTEM, scopes=["scim"])
    alice = await web.store.people.get_user("alice")
    off = {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "path": "active", "value": False}]}
    async with web.client(headers={"Authorization": f"Bearer {token}"}) as idp:
        assert (await idp.patch(f"/scim/v2/Users/{alice.id}", json=off)).status_code == 200
    async with web.client() as slack_side:
        assert (await fake.click(slack_side, message, ACTION_APPROVE, ALICE)).status_code == 200
    [told] = await told_privately(fake, ALICE)
    assert "Nothing was decided" in told["text"] and "disabled" in told["text"]
    assert (await web.store.calls.get_call(call.id)).status == CallStatus.PENDING
    assert await web.store.calls.decisions_for(call.id) == []

    async with web.client() as slack_side:  # someone else still decides
        await fake.click(slack_side, message, ACTION_APPROVE, BOB)
    assert (await web.store.calls.get_call(call.id)).decided_by == "bob"
