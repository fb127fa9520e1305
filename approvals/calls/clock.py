"""The time the core reads, from one place: a clock that tests move forward instead of sleeping.

Every "now" the core stores or compares (a lease's end, a rule's expiry, when a reminder is
due, an audit event's time) comes from `now()`, and every interval it paces itself by from
`monotonic()`. Both read the clock in use in the current context: the system's, unless a
caller (a test) runs its code under `using(SkippingClock())` and skips ahead with
`advance()`, as Temporal's time-skipping test environment does. The skipping clock keeps
ticking with real time, so what happens in order still gets times in order.

It is a context variable, not an argument threaded through every operation: asyncio tasks and
anyio worker threads started inside `using` see the same clock, and code outside it never does.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar

__all__ = ("Clock", "SkippingClock", "SystemClock", "monotonic", "now", "using")


class Clock(Protocol):
    """Where the core's time comes from."""

    def now(self) -> dt.datetime:
        """The current time, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for intervals (as `time.monotonic`)."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class SkippingClock(SystemClock):
    """The machine's clock, plus the time a test skipped (`advance`)."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def advance(self, seconds: float) -> None:
        """Skip `seconds` ahead: leases run out, rules expire and reminders fall due without a wait."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.skipped += seconds

    def now(self) -> dt.datetime:
        return super().now() + dt.timedelta(seconds=self.skipped)

    def monotonic(self) -> float:
        return super().monotonic() + self.skipped


_SYSTEM = SystemClock()
_CURRENT: ContextVar[Clock] = ContextVar("approvals_clock", default=_SYSTEM)


def now() -> dt.datetime:
    """The current time (UTC) on the clock in use."""
    return _CURRENT.get().now()


def monotonic() -> float:
    """Seconds for intervals, on the clock in use."""
    return _CURRENT.get().monotonic()


ClockT = TypeVar("ClockT", bound=Clock)


@contextmanager
def using(clock: ClockT) -> Iterator[ClockT]:
    """Run the block (and the tasks and threads it starts) on `clock`."""
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)
