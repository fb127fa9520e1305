"""Every SCIM answer, good or bad, as `application/scim+json`; every refusal in the SCIM Error schema (RFC 7644 §3.12).

`ScimRoute` wraps each SCIM route, so nothing (a missing token, a store refusal, a body that
is not JSON, an unexpected failure) leaves `/scim/v2` in another shape than a SCIM Error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from scim2_models import Error, SCIMException

from approvals.calls.actors import Actor
from approvals.exceptions import Conflict, Forbidden, NotFound, UserError

from ..context import AppContext

__all__ = ("SCIM_JSON", "ScimRoute", "scim_error", "scim_json")

logger = logging.getLogger("approvals.scim")

SCIM_JSON = "application/scim+json"


def scim_json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type=SCIM_JSON, headers=headers)


def scim_error(status: int, detail: str, scim_type: str | None = None) -> Response:
    error = Error(status=status, scim_type=scim_type, detail=detail)
    return scim_json(error.model_dump(exclude_none=True), status)


def _answer(exc: Exception) -> Response:
    """The SCIM Error an exception stands for."""
    match exc:
        case SCIMException():
            error = exc.to_error()
            return scim_json(error.model_dump(exclude_none=True), int(error.status or 400))
        case ValidationError():
            first = Error.from_validation_errors(exc)[0]
            return scim_json(first.model_dump(exclude_none=True), int(first.status or 400))
        case NotFound():
            return scim_error(404, str(exc))
        case Conflict():
            return scim_error(409, str(exc), "uniqueness")
        case Forbidden():
            return scim_error(403, str(exc))
        case UserError():
            return scim_error(400, str(exc), "invalidValue")
        case HTTPException():
            headers = dict(exc.headers or {})
            return Response(
                json.dumps(Error(status=exc.status_code, detail=str(exc.detail)).model_dump(exclude_none=True)),
                status_code=exc.status_code,
                media_type=SCIM_JSON,
                headers=headers,
            )
    logger.exception("scim: unexpected failure")
    return scim_error(500, "The request failed; nothing was changed")


AUDITED = frozenset({400, 403, 409})
"""Refusals of an authenticated provider's request that are audited (`scim.refused`); a 401 has nobody to name,
a 404 is how a provider asks whether someone exists."""


async def _audit_refusal(request: Request, answer: Response) -> None:
    actor: Actor | None = getattr(request.state, "actor", None)
    if actor is None or answer.status_code not in AUDITED:
        return
    body = json.loads(bytes(answer.body))
    details = {"status": answer.status_code, "scim_type": body.get("scimType"), "detail": str(body.get("detail"))[:500]}
    context: AppContext = request.app.state.context
    try:
        await context.service.record_scim_refusal(actor.id, f"{request.method} {request.url.path}", details)
    except Exception:  # the refusal is answered even when it cannot be recorded
        logger.exception("scim: could not audit a refusal")


class ScimRoute(APIRoute):
    """A route whose every failure is answered as a SCIM Error."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answered(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # every failure becomes a SCIM Error, none escapes as an HTML page
                answer = _answer(exc)
                await _audit_refusal(request, answer)
                return answer

        return answered
