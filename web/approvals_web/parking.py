"""Parked requests: a long poll or a hook waits for a person without holding the request's whole stack (issue 41).

A request that waits is held open for up to an hour, and thousands wait at once. Waiting inside
its route held everything FastAPI keeps for a request (its dependency exit stacks, the route's
and the middlewares' frames, the parsed body, the rows read): about 40 KiB a waiter. Here the
route hands `park` what makes its answer once the wait is over, and returns; this
middleware then drops what the route returned, strips what the inner layers added to the
request's scope, and makes that answer: what stays while it waits is uvicorn's connection, this
middleware's frame and the few ids the answer needs.

It sits inside `SecurityMiddleware` (so the parked answer gets the security headers) and
outside the session middleware (an API answer sets no cookie). Only `/api/` requests can park.
A parked answer that fails is answered here as the app's error handlers would have: the core's
errors and database failures as problem details.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from approvals.exceptions import ApprovalsError
from approvals.store.errors import describe

from .api import problems

__all__ = ("Gone", "ParkingMiddleware", "park")

logger = logging.getLogger("approvals.web")

_SLOT = "approvals.parking"
Gone = Callable[[], Awaitable[bool]]
"""Whether the client has gone (its connection closed): nothing is handed out to a caller that left."""
Later = Callable[[Gone], Awaitable[Response]]


class _Slot:
    """Where a route leaves the answer to make once it returned."""

    __slots__ = ("later",)

    def __init__(self) -> None:
        self.later: Later | None = None


async def park(request: Request, later: Later) -> Response:
    """Answer `request` with what `later` makes, after the route returned when the app parks requests;
    at once (the route waits) where nothing parks it. The returned response is what the route returns."""
    slot = request.scope.get(_SLOT)
    if not isinstance(slot, _Slot):
        return await later(request.is_disconnected)
    slot.later = later
    return Response(status_code=204)  # never sent: the middleware answers instead


class ParkingMiddleware:
    """Makes the answers that routes leave for later, once the route and the layers inside returned."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api/"):
            await self.app(scope, receive, send)
            return
        later = await self._route(scope, receive, send)
        if later is None:
            return
        request = Request(scope, receive)
        try:
            response = await later(request.is_disconnected)
        except ApprovalsError as exc:
            response = problems.approvals_error_problem(exc)
        except SQLAlchemyError as exc:
            failure = problems.database_failure(exc)
            if failure.transient:
                logger.warning("%s %s: database unavailable: %s", scope["method"], scope["path"], describe(exc))
            else:
                logger.error("%s %s: database error", scope["method"], scope["path"], exc_info=exc)
            response = problems.database_problem(failure)
        await response(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> Later | None:
        """Let the inner layers answer, on a copy of the scope they may grow (it and all they keep in it are gone
        when they return); what the route left for later, if it parked the request (its answer is not sent)."""
        slot = _Slot()

        async def send_unless_parked(message: Message) -> None:
            if slot.later is None:
                await send(message)

        await self.app({**scope, _SLOT: slot}, receive, send_unless_parked)
        return slot.later
