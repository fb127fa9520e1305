"""Slack's requests to the app: `POST /slack/interactions` (button clicks, modal submissions) and account linking.

Slack signs every request it sends; the signature (`X-Slack-Signature`, v0, with
`X-Slack-Request-Timestamp` within 5 minutes) is checked with slack_sdk's verifier on the
raw body before anything in it is read. A forged or stale request gets 401 and a warning in
the log (never the secret or the body). No session or CSRF token is involved: the
signature is the authentication, and who decides is the Slack member mapped to an inbox
user (`slack.people`). Without Slack configured the route does not exist (404).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, BackgroundTasks, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from slack_sdk.signature import SignatureVerifier

from ..auth import ContextDep
from . import link
from .decide import SlackAnswer, on_block_actions, on_view_submission

__all__ = ("router", "verify_slack_signature")

logger = logging.getLogger("approvals.slack")

router = APIRouter(include_in_schema=False)
router.include_router(link.router)


def verify_slack_signature(signing_secret: str, body: bytes, headers: Mapping[str, str]) -> str | None:
    """None when Slack signed `body` within the last 5 minutes; else what is wrong (for the log: no secret in it)."""
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    if not timestamp or not signature:
        return "no signature"
    try:
        valid = SignatureVerifier(signing_secret).is_valid(body=body, timestamp=timestamp, signature=signature)
    except (ValueError, UnicodeDecodeError):  # a timestamp that is no number, a body that is not UTF-8
        return "a malformed timestamp or body"
    return None if valid else "a wrong signature or a timestamp over 5 minutes off"


@router.post("/slack/interactions")
async def interactions(request: Request, context: ContextDep, background: BackgroundTasks) -> Response:
    slack = context.settings.outbound().slack
    if slack is None:
        raise HTTPException(404, "Slack is not configured")
    body = await request.body()
    problem = verify_slack_signature(slack.signing_secret, body, request.headers)
    if problem is not None:
        client = request.client.host if request.client else "unknown"
        logger.warning("slack: refused an interaction from %s with %s", client, problem)
        return JSONResponse({"error": "invalid signature"}, status_code=401)
    payload = _payload(body)
    if payload is None:
        return JSONResponse({"error": "no interaction payload"}, status_code=400)

    def later(post: Callable[[], Awaitable[None]]) -> None:
        background.add_task(post)

    kind = payload.get("type")
    if kind == "block_actions":
        answer = await on_block_actions(context, slack, payload, later)
    elif kind == "view_submission":
        answer = await on_view_submission(context, slack, payload)
    else:  # other interactions (a modal closed, a shortcut) are acknowledged and left
        answer = SlackAnswer()
    if answer.body is None:
        return Response(status_code=200)
    return JSONResponse(answer.body)


def _payload(body: bytes) -> dict[str, Any] | None:
    """The interaction: Slack posts it form-encoded, as JSON in the `payload` field."""
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True)
        data = json.loads(fields["payload"][-1])
    except (UnicodeDecodeError, KeyError, IndexError, ValueError):
        return None
    return data if isinstance(data, dict) else None
