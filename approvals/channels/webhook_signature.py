"""Checking a webhook from approvals, for receivers: is it ours, and is it fresh?

Every delivery carries `X-Approvals-Timestamp` (Unix seconds) and `X-Approvals-Signature`,
the hex HMAC-SHA256 of `"{timestamp}.{body}"` under the endpoint's secret. A receiver
calls `verify_webhook(body, headers, secret)` with the raw body bytes before parsing them:

    from approvals.channels.webhook_signature import verify_webhook, InvalidWebhook
    try:
        verify_webhook(request_body, request_headers, os.environ["APPROVALS_WEBHOOK_SECRET"])
    except InvalidWebhook:
        return 401

The timestamp must be within `tolerance` seconds of the receiver's clock, so a captured
delivery cannot be replayed later; within that window, drop repeats by
`X-Approvals-Delivery`. Pass several secrets while rotating one.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

__all__ = (
    "DEFAULT_TOLERANCE",
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "InvalidWebhook",
    "sign_webhook",
    "verify_webhook",
)

SIGNATURE_HEADER = "X-Approvals-Signature"
TIMESTAMP_HEADER = "X-Approvals-Timestamp"
DELIVERY_HEADER = "X-Approvals-Delivery"
DEFAULT_TOLERANCE = 300.0
"""Seconds a delivery stays acceptable: longer than clock skew, shorter than a useful replay."""


class InvalidWebhook(Exception):
    """The delivery is not signed by a known secret, or is too old or from the future."""


def sign_webhook(secret: str, body: bytes, timestamp: str) -> str:
    """The signature approvals sends: hex HMAC-SHA256 of `timestamp.body` under `secret`."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | Sequence[str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> None:
    """Raise `InvalidWebhook` unless `body` is signed by (one of) `secret` within `tolerance` seconds."""
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    signature = lowered.get(SIGNATURE_HEADER.lower())
    if not timestamp or not signature:
        raise InvalidWebhook(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise InvalidWebhook(f"{TIMESTAMP_HEADER} is not a whole number of seconds") from None
    clock = time.time() if now is None else now
    if abs(clock - sent_at) > tolerance:
        raise InvalidWebhook(f"the delivery was signed {clock - sent_at:.0f} s away from now: too old to trust")
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not any(hmac.compare_digest(sign_webhook(s, body, timestamp), signature) for s in secrets if s):
        raise InvalidWebhook("the signature does not match the body under any known secret")
