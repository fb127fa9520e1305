"""The receivers' check: a delivery is ours when signed by a known secret, and only while it is fresh."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from approvals.channels.webhook_signature import InvalidWebhook, sign_webhook, verify_webhook
from approvals_web.settings import Settings

BODY = b'{"event":"call.pending","id":7}'
NOW = 1_800_000_000.0


def headers(secret: str, timestamp: int = int(NOW), body: bytes = BODY) -> dict[str, str]:
    return {
        "x-approvals-timestamp": str(timestamp),
        "X-Approvals-Signature": sign_webhook(secret, body, str(timestamp)),
    }


def test_a_fresh_delivery_signed_with_the_secret_is_accepted() -> None:
    verify_webhook(BODY, headers("s3cret"), "s3cret", now=NOW + 10)
    verify_webhook(BODY, headers("new"), ["old", "new"], now=NOW)  # while rotating


@pytest.mark.parametrize(
    ("body", "sent", "secret", "now", "why"),
    [
        (BODY, headers("other"), "s3cret", NOW, "does not match"),
        (BODY + b" ", headers("s3cret"), "s3cret", NOW, "does not match"),  # a changed body
        (BODY, headers("s3cret"), "s3cret", NOW + 301, "too old"),  # a replay after the window
        (BODY, headers("s3cret"), "s3cret", NOW - 301, "too old"),  # a clock far ahead
        (BODY, {"X-Approvals-Signature": "00"}, "s3cret", NOW, "missing"),
        (BODY, {**headers("s3cret"), "x-approvals-timestamp": "soon"}, "s3cret", NOW, "whole number"),
    ],
)
def test_anything_else_is_refused(body: bytes, sent: dict[str, str], secret: str, now: float, why: str) -> None:
    with pytest.raises(InvalidWebhook, match=why):
        verify_webhook(body, sent, secret, now=now)


def test_unsigned_webhooks_are_refused_at_start_up_unless_allowed() -> None:
    with pytest.raises(ValidationError, match=r"webhook URLs without a secret \(https://hooks.example\)"):
        Settings(webhook_urls=["https://hooks.example/in?token=abc"])
    allowed = Settings(webhook_urls=["https://hooks.example/in"], webhook_allow_unsigned=True)
    assert allowed.secret_for_webhook("https://hooks.example/in") is None
    own = Settings(
        webhook_urls=["https://a.example/in", "https://b.example/in"],
        webhook_secret="shared",
        webhook_secrets={"https://b.example/in": "b-only"},
    )
    assert [own.secret_for_webhook(url) for url in own.webhook_urls] == ["shared", "b-only"]
