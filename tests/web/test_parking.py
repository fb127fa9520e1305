"""Parked requests (`approvals_web.parking`): a route leaves its answer for later and lets go of its stack.

The middleware is driven by a tiny Starlette app of its own here (what the route returned is
dropped, what the inner layers added to the scope is gone, failures answer as the app's error
handlers would), and through the real app: a hook and a gate long poll parked while a reviewer
decides get the answers and the security headers an unparked request gets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import anyio
import httpx
import pytest
from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from approvals.exceptions import NotFound
from approvals.store import SYSTEM
from approvals_web.hardening import SecurityMiddleware
from approvals_web.parking import Gone, ParkingMiddleware, park

from .conftest import WebApp

pytestmark = pytest.mark.anyio


class Seen:
    """What the outer layer saw of the scope once the inner layers returned."""

    keys: ClassVar[set[str]] = set()


class Inner:
    """A layer inside the parking middleware that keeps things in the scope, as FastAPI's do."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["kept_by_the_inner_layer"] = ["a large", "object"]
        await self.app(scope, receive, send)


class Outer:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        Seen.keys = set(scope)


def app_parking(later: Callable[[Gone], Awaitable[Response]]) -> ASGIApp:
    async def route(request: Request) -> Response:
        return await park(request, later)  # parked, its response is dropped

    async def unparked(request: Request) -> Response:
        return JSONResponse({"at": "once"})

    app = Starlette(routes=[Route("/api/wait", route), Route("/api/now", unparked), Route("/page", route)])
    return Outer(SecurityMiddleware(ParkingMiddleware(Inner(app)), max_body_bytes=1000))


async def call(app: ASGIApp, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.get(path)


async def test_a_parked_request_is_answered_by_what_it_left_with_the_security_headers() -> None:
    async def later(gone: Gone) -> Response:
        assert await gone() is False
        return JSONResponse({"decided": True}, status_code=201)

    response = await call(app_parking(later), "/api/wait")
    assert (response.status_code, response.json()) == (201, {"decided": True})
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "kept_by_the_inner_layer" not in Seen.keys  # the inner layers' scope is not the one kept while parked


async def test_a_request_that_does_not_park_is_answered_by_its_route() -> None:
    async def later(gone: Gone) -> Response:
        raise AssertionError("not parked")

    response = await call(app_parking(later), "/api/now")
    assert response.json() == {"at": "once"}


async def test_outside_the_api_a_route_waits_itself() -> None:
    async def later(gone: Gone) -> Response:
        return JSONResponse({"waited": "in the route"})

    response = await call(app_parking(later), "/page")
    assert response.json() == {"waited": "in the route"}


@pytest.mark.parametrize(
    ("failure", "status", "retry_after"),
    [
        (NotFound("No call 'x'"), 404, None),
        (OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused")), 503, "5"),
        (OperationalError("SELECT 1", {}, Exception("no such table")), 500, None),
    ],
)
async def test_a_parked_answer_that_fails_is_a_problem_as_the_app_would_answer(
    failure: Exception, status: int, retry_after: str | None
) -> None:
    async def later(gone: Gone) -> Response:
        raise failure

    response = await call(app_parking(later), "/api/wait")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers.get("retry-after") == retry_after


async def test_parked_hooks_and_long_polls_get_a_reviewers_decision(web: WebApp) -> None:
    token = await web.store.people.create_token("parked", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])
    async with web.client(headers={"Authorization": f"Bearer {token}"}) as agent, web.api("reviewer") as reviewer:
        answers: dict[str, Any] = {}

        async def hook() -> None:
            body = {
                "session_id": "s-park",
                "hook_event_name": "PreToolUse",
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
                "tool_use_id": "t-park",
                "cwd": "/tmp",
            }
            answers["hook"] = await agent.post("/api/hooks/claude-code", params={"wait": 30}, json=body)

        async def gate() -> None:
            body = {"source": "svc", "session_id": "g-park", "tool_name": "refund", "args": {"amount": 3}}
            answers["gate"] = await agent.post("/api/gate/calls", params={"wait": 30}, json=body)

        async with anyio.create_task_group() as group:
            group.start_soon(hook)
            group.start_soon(gate)
            pending: list[Any] = []
            while len(pending) < 2:
                await anyio.sleep(0.05)
                pending = (await reviewer.get("/api/calls")).json()["items"]
            for call in pending:
                decided = await reviewer.post(f"/api/calls/{call['id']}/decision", json={"verdict": "approve"})
                assert decided.status_code == 200, decided.text
    hook_answer, gate_answer = answers["hook"], answers["gate"]
    assert hook_answer.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert gate_answer.status_code == 201
    assert gate_answer.json()["decision"] == "approved" and gate_answer.json()["handed_out"] is True
    for answer in (hook_answer, gate_answer):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"
