"""The fake Slack refuses what Slack documents it refuses: the Slack tests are only as good as it is."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from .fixtures.fake_slack import TRIGGER_SECONDS, FakeSlack, running_fake_slack, sign

SECTION = {"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    slack = FakeSlack(channels={"C1": True, "C2": False})
    slack.add_user("U1", "ann", email="ann@example.com", confirmed=False)
    with running_fake_slack(slack) as running:
        yield running


def call(
    fake: FakeSlack, method: str, token: str | None = "", headers: dict[str, str] | None = None, **kwargs: Any
) -> httpx.Response:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token or fake.token}"
    return httpx.post(fake.url + method, headers=sent, timeout=5, **kwargs)


def error(response: httpx.Response) -> str | None:
    data = response.json()
    return None if data["ok"] else str(data["error"])


def button(**overrides: Any) -> dict[str, Any]:
    element = {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "action_id": "go", "value": "v"}
    return {"type": "actions", "elements": [{**element, **overrides}]}


def test_tokens_are_checked(fake: FakeSlack) -> None:
    body = {"json": {"channel": "C1", "text": "hi"}}
    assert error(call(fake, "chat.postMessage", token=None, **body)) == "not_authed"
    assert error(call(fake, "chat.postMessage", token="xoxb-wrong", **body)) == "invalid_auth"
    form = httpx.post(fake.url + "chat.postMessage", data={"token": fake.token, "channel": "C1", "text": "hi"})
    assert form.json()["ok"] is True  # the docs allow the token as a POST parameter


def test_post_message_answers_as_documented_and_requires_its_arguments(fake: FakeSlack) -> None:
    posted = call(fake, "chat.postMessage", json={"channel": "C1", "text": "hi", "blocks": [SECTION]}).json()
    assert posted["ok"] and posted["channel"] == "C1" and posted["message"]["text"] == "hi"
    assert posted["message"]["ts"] == posted["ts"]
    assert error(call(fake, "chat.postMessage", json={"text": "hi"})) == "invalid_arguments"
    assert error(call(fake, "chat.postMessage", json={"channel": "C1"})) == "no_text"
    assert error(call(fake, "chat.postMessage", json={"channel": "C9", "text": "x"})) == "channel_not_found"
    assert error(call(fake, "chat.postMessage", json={"channel": "C2", "text": "x"})) == "not_in_channel"
    direct = call(fake, "chat.postMessage", json={"channel": "U1", "text": "x"}).json()
    assert direct["channel"] == "D1"
    form_blocks = {"channel": "C1", "blocks": [json.dumps(SECTION)]}  # a form's blocks must be a JSON string
    assert error(call(fake, "chat.postMessage", data={"channel": "C1", "blocks": json.dumps([SECTION])})) is None
    assert error(call(fake, "chat.postMessage", data=form_blocks)) == "invalid_blocks"
    assert error(call(fake, "chat.postMessage", content=b"channel=C1", headers={"Content-Type": "text/csv"})) == (
        "invalid_post_type"
    )


@pytest.mark.parametrize(
    "blocks",
    [
        [SECTION] * 51,
        [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
        [button(text={"type": "plain_text", "text": "x" * 76})],
        [button(value="x" * 2001)],
        [button(action_id="x" * 256)],
        [button(style="pink")],
        [{"type": "no_such_block"}],
    ],
    ids=["51 blocks", "section text", "button text", "button value", "action_id", "style", "unknown type"],
)
def test_blocks_past_the_documented_limits_are_invalid(fake: FakeSlack, blocks: list[Any]) -> None:
    assert error(call(fake, "chat.postMessage", json={"channel": "C1", "text": "x", "blocks": blocks})) == (
        "invalid_blocks"
    )


def test_update_needs_the_conversation_and_ts_of_an_existing_message(fake: FakeSlack) -> None:
    direct = call(fake, "chat.postMessage", json={"channel": "U1", "text": "x"}).json()
    assert error(call(fake, "chat.update", json={"channel": "D1", "ts": direct["ts"], "text": "y"})) is None
    assert error(call(fake, "chat.update", json={"channel": "U1", "ts": direct["ts"], "text": "y"})) == (
        "channel_not_found"  # the docs: a direct message's D… id, not the member's
    )
    assert error(call(fake, "chat.update", json={"channel": "D1", "ts": "1.2", "text": "y"})) == "message_not_found"
    assert error(call(fake, "chat.update", json={"channel": "D1", "text": "y"})) == "invalid_arguments"


def test_views_open_takes_a_fresh_trigger_once(fake: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "T"}, "blocks": [SECTION]}
    trigger = fake.issue_trigger()
    opened = call(fake, "views.open", json={"trigger_id": trigger, "view": view}).json()
    assert opened["ok"] and opened["view"]["id"].startswith("V")
    again = call(fake, "views.open", json={"trigger_id": trigger, "view": view}).json()
    assert again == {
        "ok": False,
        "error": "invalid_arguments",
        "response_metadata": {"messages": ["invalid `trigger_id`"]},
    }
    late = fake.issue_trigger()
    later = time.monotonic() + TRIGGER_SECONDS + 1
    monkeypatch.setattr("tests.fixtures.fake_slack.time.monotonic", lambda: later)
    assert error(call(fake, "views.open", json={"trigger_id": late, "view": view})) == "invalid_arguments"
    long_title = {**view, "title": {"type": "plain_text", "text": "x" * 25}}
    assert error(call(fake, "views.open", json={"trigger_id": fake.issue_trigger(), "view": long_title})) == (
        "invalid_arguments"
    )


def test_users_info_reads_forms_not_json(fake: FakeSlack) -> None:
    user = call(fake, "users.info", data={"user": "U1"}).json()["user"]
    assert user["is_email_confirmed"] is False and user["profile"]["email"] == "ann@example.com"
    assert error(call(fake, "users.info", json={"user": "U1"})) == "invalid_arguments"
    assert error(call(fake, "users.info", data={"user": "U9"})) == "user_not_found"


def test_outages_and_rate_limits_answer_as_slack_does(fake: FakeSlack) -> None:
    fake.fail_next(1, status=429, retry_after=7)
    fake.fail_next(1, status=503)
    limited = call(fake, "chat.postMessage", json={"channel": "C1", "text": "x"})
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "7"
    assert limited.json() == {"ok": False, "error": "ratelimited"}
    assert call(fake, "chat.postMessage", json={"channel": "C1", "text": "x"}).status_code == 503
    assert call(fake, "chat.postMessage", json={"channel": "C1", "text": "x"}).json()["ok"] is True


def test_interaction_signatures_are_slacks(fake: FakeSlack) -> None:
    """Computed here with hmac, checked by slack_sdk's verifier: two implementations of the documented scheme."""
    body = b"payload=%7B%22type%22%3A%22block_actions%22%7D"
    stamp = str(int(time.time()))
    verifier = SignatureVerifier(fake.signing_secret)
    assert verifier.is_valid(body=body, timestamp=stamp, signature=sign(fake.signing_secret, stamp, body))
    assert not verifier.is_valid(body=body + b"x", timestamp=stamp, signature=sign(fake.signing_secret, stamp, body))
    # the example in Slack's "Verifying requests from Slack" guide
    example = sign(
        "8f742231b10e8888abcd99yyyzzz85a5",
        "1531420618",
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
    )
    assert example == "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
