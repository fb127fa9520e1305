"""Callers waiting in this process for calls' decisions: each woken for its own call's run, all from one subscription.

A gate's long poll or a coding CLI's hook waits for a person (`Calls.wait_for_decision`). With a
listener of its own each, one decision woke every waiting task, and each re-read its call every
second: 10,000 callers waiting cost 10,000 reads a second and 10,000 wake-ups a decision. Here a
waiter is an event in a dict keyed by run id (the PENDING channel's payload); the notifier hands
each announcement to `CallWaiters.wake` (`Notifier.watch`), which sets that run's events only.

What this process's notifier cannot hear (another process's writes on SQLite, whose wake-ups stay
in-process; announcements made while PostgreSQL's LISTEN connection was down) is found by one look
at the audit log past a watermark every `Notifier.look_every` seconds, made by whichever waiter
holds the watch at the time, never by each: every change of a call is audited with its run, in its
own transaction, and the audit chain numbers events in commit order.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from sqlalchemy import func, select

from .backends.database import Database
from .backends.notify import Notifier
from .models import AuditEventRow
from .wakeups import PENDING_CHANNEL

__all__ = ("CallWaiters", "Waiter", "call_waiters")

logger = logging.getLogger("approvals.store.waiters")

_PAGE = 1_000
"""Audit events read per query of a look; a look reads pages until it is through."""
_NEWER = select(AuditEventRow.id, AuditEventRow.run_id).order_by(AuditEventRow.id).limit(_PAGE)
_LAST = select(func.max(AuditEventRow.id))
_REGISTRIES: weakref.WeakKeyDictionary[Notifier, CallWaiters] = weakref.WeakKeyDictionary()


class Waiter:
    """One caller waiting on a call: its event is set when the call's run changed (or to hand it the watch)."""

    __slots__ = ("event", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.event = anyio.Event()

    def arm(self) -> None:
        """A fresh event, before each look at the call: a change after it sets this one."""
        if self.event.is_set():
            self.event = anyio.Event()


def call_waiters(db: Database, notifier: Notifier) -> CallWaiters | None:
    """The registry of this notifier's waiters, or None when the notifier does not hear its channel here
    (PostgreSQL with no `relay` running: a library's process, not `serve`)."""
    if not notifier.hears(PENDING_CHANNEL):
        return None
    registry = _REGISTRIES.get(notifier)
    if registry is None:
        registry = _REGISTRIES[notifier] = CallWaiters(db, notifier)
    return registry


class CallWaiters:
    """This process's waiters by run id, woken by the notifier's announcements and by the watch's looks."""

    def __init__(self, db: Database, notifier: Notifier) -> None:
        self.db = db
        self.notifier = notifier
        self._by_run: dict[str, set[Waiter]] = {}
        self._mark: int | None = None
        """The last audit event looked at; None while nobody waits."""
        self._watcher: Waiter | None = None
        """The waiter whose task looks at the audit log now."""
        notifier.watch(PENDING_CHANNEL, self.wake)

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._by_run.values())

    @asynccontextmanager
    async def waiting(self, run_id: str) -> AsyncIterator[Waiter]:
        """Wait on a call of `run_id` for the block: registered before the caller looks at its call, so no
        change after that look is missed."""
        waiter = Waiter(run_id)
        self._by_run.setdefault(run_id, set()).add(waiter)
        try:
            if self._mark is None:
                mark = await self._last_event()
                if self._mark is None:  # another first waiter read it meanwhile: either is early enough
                    self._mark = mark
            yield waiter
        finally:
            self._leave(waiter)

    async def sleep(self, waiter: Waiter, seconds: float) -> None:
        """Until the waiter's run changed, it was handed the watch, or `seconds` passed."""
        if math.isinf(seconds):  # no cancel scope of its own: thousands wait at once, each scope costs a KiB
            await self._sleep(waiter)
            return
        with anyio.move_on_after(seconds):
            await self._sleep(waiter)

    async def _sleep(self, waiter: Waiter) -> None:
        while not waiter.event.is_set():
            if self._watcher is None:
                self._watcher = waiter
            if self._watcher is not waiter:
                await waiter.event.wait()
                return
            with anyio.move_on_after(self.notifier.look_every):
                await waiter.event.wait()
            if not waiter.event.is_set():
                await self._look()

    def wake(self, run_id: str) -> None:
        """The run's waiters look at their calls again; an empty run id (announcements missed) wakes every one."""
        if not run_id:
            for waiters in self._by_run.values():
                for waiter in waiters:
                    waiter.event.set()
            return
        for waiter in self._by_run.get(run_id, ()):
            waiter.event.set()

    def _leave(self, waiter: Waiter) -> None:
        waiters = self._by_run.get(waiter.run_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._by_run[waiter.run_id]
        if not self._by_run:
            self._mark = None
        if self._watcher is waiter:
            self._watcher = None
        if self._watcher is None:  # the watch passes to a waiter, woken to take it (one woken already takes it
            for waiters in self._by_run.values():  # when it sleeps again, or passes it on when it leaves too)
                idle = next((other for other in waiters if not other.event.is_set()), None)
                if idle is not None:
                    idle.event.set()
                    return

    async def _last_event(self) -> int:
        async with self.db.read() as session:
            return int((await session.execute(_LAST)).scalar() or 0)

    async def _look(self) -> None:
        """Wake the waiters of runs with audited changes past the watermark: changes no announcement told of."""
        try:
            while self._mark is not None:
                async with self.db.read() as session:
                    rows = (await session.execute(_NEWER.where(AuditEventRow.id > self._mark))).all()
                if not rows or self._mark is None:
                    return
                self._mark = max(self._mark, rows[-1].id)
                for run_id in {row.run_id for row in rows if row.run_id}:
                    self.wake(run_id)
                if len(rows) < _PAGE:
                    return
        except Exception:  # a database hiccup: announcements still wake, and the next look catches up
            logger.warning("could not look for changes in the audit log", exc_info=True)
