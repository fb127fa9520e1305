"""Wait for something to happen: poll a check until it holds or a deadline passes.

The one way tests wait for a server, a worker or a deliverer to get somewhere, instead of
sleeping for a time that is too long on a quiet machine and too short on a busy one.
`eventually` is for async tests (it yields to the event loop between checks),
`eventually_sync` for a test's thread while something runs elsewhere.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import anyio
import pytest

__all__ = ("eventually", "eventually_sync")

T = TypeVar("T")


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]],
    what: str = ...,
    *,
    seconds: float = ...,
    interval: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
) -> T: ...
@overload
async def eventually(
    check: Callable[[], T | None],
    what: str = ...,
    *,
    seconds: float = ...,
    interval: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
) -> T: ...
async def eventually(
    check: Callable[[], Any],
    what: str = "the condition to hold",
    *,
    seconds: float = 15.0,
    interval: float = 0.02,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """What `check()` returns (awaited if it is a coroutine) once it is truthy; fail saying `what` did not
    happen within `seconds`. Exceptions of the types in `ignoring` count as "not yet"."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
        except ignoring:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:g} s for {what}")
        await anyio.sleep(interval)


def eventually_sync(
    check: Callable[[], T | None], what: str = "the condition to hold", *, seconds: float = 15.0, interval: float = 0.05
) -> T:
    """What `check()` returns once it is truthy, polling from this thread; fail saying `what` did not happen
    within `seconds`."""
    deadline = time.monotonic() + seconds
    while not (result := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:g} s for {what}")
        time.sleep(interval)
    return result
