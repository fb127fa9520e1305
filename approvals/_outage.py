"""Backing off through an outage, with one log line when it starts and one when it ends.

Loops that talk to the database or the network (the worker's claims, its LISTEN
connection, expiry, lease renewal) must outlive a restart of the server: they wait longer
after each failure, up to a cap, and say so once per outage rather than once per try.
"""

from __future__ import annotations

import logging
import random
import time

__all__ = ("Outage",)


class Outage:
    """Tracks one loop's failures in a row: how long to wait next, and what to log."""

    def __init__(
        self, what: str, logger: logging.Logger, *, first_delay: float = 0.25, max_delay: float = 10.0
    ) -> None:
        self.what = what
        self.logger = logger
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.failures = 0
        self._since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.failures > 0

    def failed(self, reason: str) -> float:
        """Record a failure; returns the seconds to wait before trying again (exponential, jittered)."""
        if self.failures == 0:
            self._since = time.monotonic()
            self.logger.warning("%s failed: %s; retrying with backoff until it works again", self.what, reason)
        else:
            self.logger.debug("%s failed again (%d in a row): %s", self.what, self.failures + 1, reason)
        self.failures += 1
        delay = min(self.max_delay, self.first_delay * 2.0 ** (self.failures - 1))
        jitter: float = random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not security
        return delay * jitter

    def succeeded(self) -> None:
        """Record a success; logs the end of an outage, if one was going on."""
        if self.failures and self._since is not None:
            seconds = time.monotonic() - self._since
            self.logger.warning("%s works again after %.1f s (%d failed tries)", self.what, seconds, self.failures)
        self.failures = 0
        self._since = None
