"""The gateway's side of the approvals server's HTTP gate: ask about a call, wait for it, report how it went.

The gateway is a client of `POST /api/gate/calls` like any program in any language: the
policies, the inbox, quorum and the audit log all live in the server, and the gateway holds
no database. Every fault becomes a `GateUnavailable` with a sentence the model can read, and
the middleware then forwards nothing (fail closed): a call nobody could ask about is a call
nobody approved. The token is sent in a header and never logged or put in a message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from ... import tracing

__all__ = ("GateAnswer", "GateClient", "GateConflict", "GateRefused", "GateUnavailable", "InvalidArguments")

logger = logging.getLogger("approvals.mcp")

TIMEOUT_MARGIN = 15.0
"""Seconds an HTTP request may take beyond the long poll it asks the server for."""


class GateUnavailable(Exception):
    """No answer from the approvals server (unreachable, restarting, failing): the call is not forwarded.

    While a call is pending this is worth retrying (the call is stored; a restart loses nothing).
    """


class GateRefused(GateUnavailable):
    """The server refused the request (a bad token, invalid arguments, a conflict): retrying will not help."""


class GateConflict(GateRefused):
    """The server has it otherwise already (409): an outcome reported twice, a call settled by a person."""


class InvalidArguments(GateRefused):
    """The arguments do not fit the tool's input schema (422): nothing was stored; the model may fix them and retry."""

    def __init__(self, errors: str) -> None:
        super().__init__(f"the arguments are not valid for this tool: {errors}")
        self.errors = errors


@dataclass(frozen=True)
class GateAnswer:
    """Where a call stands (the gate's answer JSON, as the middleware reads it)."""

    call_id: str
    decision: str
    """pending, approved, denied, answered or expired."""
    status: str
    args: Any
    edited: bool
    reason: str | None
    answer: Any
    url: str
    created: bool = False
    handed_out: bool = False
    """This answer hands the approved call to this request to run; an approval handed to another request says False."""


class GateClient:
    """Asks one approvals server with one `calls:ask` token."""

    def __init__(self, url: str, token: str, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"the approvals URL must be an http(s) address, not {url!r}")
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=httpx.Timeout(TIMEOUT_MARGIN),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def ask(self, body: dict[str, Any], *, wait: float) -> GateAnswer:
        """Ask about one call (`POST /api/gate/calls`), waiting up to `wait` seconds for its decision."""
        response = await self._send("POST", "/api/gate/calls", wait, json=body)
        return _answer(response, created=response.status_code == 201)

    async def wait(self, call_id: str, *, wait: float) -> GateAnswer:
        """The call's decision, waiting up to `wait` seconds while it is pending."""
        return _answer(await self._send("GET", f"/api/gate/calls/{quote(call_id, safe='')}", wait))

    async def report(self, call_id: str, outcome: str, result: Any = None) -> None:
        """Say how an approved call went (`succeeded`, `failed`, `outcome_unknown`) and what it returned."""
        path = f"/api/gate/calls/{quote(call_id, safe='')}/outcome"
        await self._send("POST", path, None, json={"outcome": outcome, "result": result})

    async def _send(self, method: str, path: str, wait: float | None, **kwargs: Any) -> httpx.Response:
        params = {"wait": f"{wait:g}"} if wait else None
        timeout = httpx.Timeout(TIMEOUT_MARGIN + (wait or 0))
        try:
            headers = tracing.carrier()  # the gateway's W3C traceparent when it traces: its calls join its trace
            response = await self._client.request(
                method, path, params=params, timeout=timeout, headers=headers, **kwargs
            )
        except httpx.TransportError as exc:
            raise GateUnavailable(f"cannot reach the approvals server at {self.url} ({type(exc).__name__})") from None
        if response.status_code in (401, 403):
            raise GateRefused(f"the approvals server refused the gateway's token: {_detail(response)}")
        if response.status_code == 422:
            raise InvalidArguments(_fields(response))
        if response.status_code >= 500:
            raise GateUnavailable(f"the approvals server failed (HTTP {response.status_code})")
        if response.status_code == 409:
            raise GateConflict(f"the approvals server refused the call (HTTP 409): {_detail(response)}")
        if response.status_code >= 400:
            raise GateRefused(
                f"the approvals server refused the call (HTTP {response.status_code}): {_detail(response)}"
            )
        return response


def _answer(response: httpx.Response, *, created: bool = False) -> GateAnswer:
    try:
        data = response.json()
        return GateAnswer(
            call_id=str(data["call_id"]),
            decision=str(data["decision"]),
            status=str(data["status"]),
            args=data["args"],
            edited=bool(data["edited"]),
            reason=data.get("reason"),
            answer=data.get("answer"),
            url=str(data["url"]),
            created=created,
            handed_out=data.get("handed_out") is True,  # missing (an older server): never run, fail closed
        )
    except (ValueError, KeyError, TypeError):
        raise GateUnavailable("the approvals server answered something that is not a gate answer") from None


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    return str(data.get("detail") or data.get("title") or data)[:300] if isinstance(data, dict) else str(data)[:300]


def _fields(response: httpx.Response) -> str:
    try:
        errors = response.json().get("errors") or []
        return "; ".join(f"{error['loc']}: {error['msg']}" for error in errors) or _detail(response)
    except (ValueError, AttributeError, KeyError, TypeError):
        return _detail(response)
