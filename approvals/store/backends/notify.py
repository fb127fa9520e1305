"""Wake-ups: `async with notifier.listen(channel) as messages`, whichever database announces them.

Writers announce inside their transaction; listeners hear of it only once it committed, so
a listener never sees a change before it is visible. This `Notifier` serves SQLite, which
serves one process: the store publishes each transaction's announcements after its commit
to the listeners in the same process. PostgreSQL's (`postgres_backend.PostgresNotifier`)
sends them with `pg_notify` and listens with `LISTEN`, across processes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..wakeups import PENDING_CHANNEL, READY_CHANNEL, RUNS_CHANNEL, check_channel

if TYPE_CHECKING:
    from .database import Database

__all__ = ("PENDING_CHANNEL", "READY_CHANNEL", "RUNS_CHANNEL", "Notifier")


class Notifier:
    """Announces and listens for changes on named channels, within this process."""

    look_every = 0.2
    """Seconds between waiters' looks for changes no announcement told this process of (`store.waiters`):
    here, another process's writes to the same SQLite file."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._subscribers: dict[str, set[MemoryObjectSendStream[str]]] = defaultdict(set)
        self._watchers: dict[str, list[Callable[[str], None]]] = defaultdict(list)
        self._relayed: set[str] = set()
        """Channels a running `relay` listens to for this process: their listeners share it."""

    def hears(self, channel: str) -> bool:
        """Whether `watch` callbacks get the channel's announcements: this process's own, on SQLite."""
        return True

    def watch(self, channel: str, deliver: Callable[[str], None]) -> None:
        """Call `deliver(payload)` for every announcement on `channel` this process hears, for its lifetime.

        No stream and no task: the cheap way for one registry to serve many waiters (`store.waiters`).
        `deliver` must not block; an empty payload means announcements may have been missed.
        """
        check_channel(channel)
        self._watchers[channel].append(deliver)

    def publish(self, messages: list[tuple[str, str]]) -> None:
        """Deliver announcements to this process's listeners once their transaction committed."""
        for channel, payload in dict.fromkeys(messages):
            self._fan_out(channel, payload)

    def _fan_out(self, channel: str, payload: str) -> None:
        """Hand `payload` to every listener of `channel` in this process."""
        for deliver in self._watchers.get(channel, ()):
            deliver(payload)
        for stream in list(self._subscribers[channel]):
            try:
                stream.send_nowait(payload)
            except anyio.WouldBlock:
                pass  # a slow listener misses a wake-up; listeners also poll
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers[channel].discard(stream)

    async def relay(
        self,
        channels: Collection[str],
        *,
        until: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve every listener of `channels` from one connection each, until `until` is set.

        While it runs, `listen` on those channels costs no connection: a server whose many
        callers wait for decisions at once (the gate's long polls, hooks) would otherwise hold
        one connection per waiting caller. In-process listeners need none, so here it only starts.
        """
        for channel in channels:
            check_channel(channel)
        task_status.started()

    @asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
        """Receive payloads announced on `channel` from now on, until the block ends.

        Across processes (`PostgresNotifier`) a lost connection is reopened in the background,
        with backoff; an empty payload after it says that announcements may have been missed meanwhile.
        """
        check_channel(channel)
        send, receive = anyio.create_memory_object_stream[str](max_buffer_size=1_000)
        self._subscribers[channel].add(send)
        try:
            yield receive
        finally:
            self._subscribers[channel].discard(send)
            send.close()
            receive.close()
