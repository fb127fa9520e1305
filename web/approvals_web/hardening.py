"""Protections every response and request gets, whatever the route: headers, body size, URL characters.

- Headers: a Content-Security-Policy that allows only this site's own scripts and styles
  and forbids framing (`frame-ancestors 'none'`, and `X-Frame-Options: DENY` for older
  browsers), so a page elsewhere cannot overlay an approval button (clickjacking);
  `nosniff`, a same-origin referrer, and `Cache-Control: no-store` on everything but the
  static files, since pages and API answers carry reviewers' data.
- Body size: a request body over the limit is refused with 413 before any of it is read
  into memory or any route (or login check) runs; bodies without a declared length are
  counted as they stream.
- URL characters: a NUL anywhere in a page's path or query is a 400, never a database error
  (the API answers 422 naming the parameter).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from fastapi import HTTPException, Request

__all__ = ("CONTENT_SECURITY_POLICY", "SecurityMiddleware", "reject_nul_in_url")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class BodyTooLarge(HTTPException):
    """The request body went past the limit while it streamed in; rendered like any HTTP error (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body is larger than {limit} bytes.")


SELF_LIMITED_PREFIX = "/api/hooks/"
"""Routes that read their body within the limit themselves: a coding CLI's hook must get a denial it
understands, not a 413 (most CLIs run the tool when a hook fails)."""


class SecurityMiddleware:
    """Adds the security headers to every HTTP response and caps request bodies at `max_body_bytes`."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                headers = list(message.get("headers", []))
                headers += [(name, value) for name, value in _HEADERS if name not in present]
                if not static and b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        if str(scope.get("path", "")).startswith(SELF_LIMITED_PREFIX):  # they answer an oversized body themselves
            await self.app(scope, receive, send_with_headers)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _too_large(scope, send_with_headers, self.max_body_bytes)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_headers(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _too_large(scope, send_with_headers, self.max_body_bytes)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(scope: Scope, send: Send, limit: int) -> None:
    """413 as a problem document for the API, as plain text elsewhere."""
    api = str(scope.get("path", "")).startswith("/api/")
    if api:
        body = (
            '{"type":"about:blank","title":"Content Too Large","status":413,'
            f'"detail":"The request body is larger than {limit} bytes."}}'
        ).encode()
        content_type = b"application/problem+json"
    else:
        body = f"The request body is larger than {limit} bytes.".encode()
        content_type = b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def reject_nul_in_url(request: Request) -> None:
    """A NUL in a page's path or query is never meaningful, and PostgreSQL refuses it in text: a clear 400.

    The JSON API validates each parameter itself and answers 422 naming it.
    """
    if request.scope["path"].startswith("/api/"):  # the path as `request.url` has it, without building the URL
        return
    if "\x00" in request.url.path or "\x00" in unquote(request.url.query):
        raise HTTPException(400, "The address contains a NUL character (%00), which no page or resource has.")
