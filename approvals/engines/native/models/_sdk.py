"""What the SDK-based adapters share: one SDK client per event loop, and safe error texts.

An SDK's async client holds an httpx connection pool, and pooled connections belong to
the event loop that opened them. `Agent.run_sync` starts a new loop each time, and the
CLI seeds in one loop before the server runs in another, so a client made once per model
fails on the second loop with "Event loop is closed". `LoopBoundClients` keeps one client
per running loop instead, made from the same settings.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ("LoopBoundClients", "endpoint", "redact")


class _Closable(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Closable)


class LoopBoundClients(Generic[ClientT]):
    """The client for the running event loop, made on first use by `factory`.

    A client the user passed in (`fixed`) is used as it is, in whatever loop: its
    lifecycle is the user's.
    """

    def __init__(self, factory: Callable[[], ClientT], *, fixed: ClientT | None = None) -> None:
        self._factory = factory
        self._fixed = fixed
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientT] = weakref.WeakKeyDictionary()
        self.template = fixed if fixed is not None else factory()
        """A client made at once, so wrong settings fail when the model is made; it serves the first loop."""
        self._template_taken = fixed is not None

    def current(self) -> ClientT:
        """The client for the running loop."""
        if self._fixed is not None:
            return self._fixed
        loop = asyncio.get_running_loop()
        client = self._by_loop.get(loop)
        if client is None:
            if not self._template_taken:
                client, self._template_taken = self.template, True
            else:
                client = self._factory()
            self._by_loop[loop] = client
        return client

    async def close_current(self) -> None:
        """Close the running loop's client (not a user's); the next request makes a new one."""
        if self._fixed is not None:
            return
        client = self._by_loop.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()


def redact(value: Any, secrets: tuple[str | None, ...]) -> Any:
    """`value` (a parsed error body) with every occurrence of each secret masked."""
    for secret in secrets:
        if secret:
            value = _redact_one(value, secret)
    return value


def _redact_one(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {key: _redact_one(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_one(item, secret) for item in value]
    return value


def endpoint(request: Any) -> str:
    """Where a request (the SDK's httpx request) went, without query string or credentials."""
    url = request.url
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"
