"""Wake-ups between processes: PostgreSQL `LISTEN/NOTIFY`, or an in-process broadcast on SQLite.

Writers announce inside their transaction (`pg_notify` is delivered only on commit, so a
listener never sees a change before it is visible); with SQLite, which serves one process,
the store publishes after commit to subscribers in the same process. Listeners use the
same interface either way: `async with notifier.listen(channel) as messages`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager, suppress

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from .._outage import Outage
from .db import Database
from .errors import describe

__all__ = ("PENDING_CHANNEL", "READY_CHANNEL", "RUNS_CHANNEL", "Notifier")

READY_CHANNEL = "approvals_ready"
"""A run became ready to resume; payload: run id."""
PENDING_CHANNEL = "approvals_pending"
"""Calls started or stopped waiting for a person; payload: run id."""
RUNS_CHANNEL = "approvals_runs"
"""A run changed status; payload: run id."""
_CHANNEL_NAME = re.compile(r"^[a-z_]{1,60}$")
logger = logging.getLogger("approvals.store")


def _check_channel(channel: str) -> None:
    if not _CHANNEL_NAME.match(channel):
        raise ValueError(f"invalid channel name {channel!r}")


class Notifier:
    """Announces and listens for changes on named channels."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._subscribers: dict[str, set[MemoryObjectSendStream[str]]] = defaultdict(set)
        self._relayed: set[str] = set()
        """PostgreSQL channels a running `relay` listens to for this process: their listeners share it."""

    async def send_in_transaction(self, session: AsyncSession, messages: list[tuple[str, str]]) -> None:
        """On PostgreSQL, queue `pg_notify` for each message in one statement; delivered at commit."""
        if not self.db.is_postgres or not messages:
            return
        unique = list(dict.fromkeys(messages))
        calls = ", ".join(f"pg_notify(:c{i}, :p{i})" for i in range(len(unique)))
        params: dict[str, str] = {}
        for i, (channel, payload) in enumerate(unique):
            params[f"c{i}"] = channel
            params[f"p{i}"] = payload
        await session.execute(text(f"SELECT {calls}"), params)

    def publish(self, messages: list[tuple[str, str]]) -> None:
        """On SQLite, deliver in-process announcements after their transaction committed."""
        if self.db.is_postgres:
            return
        for channel, payload in dict.fromkeys(messages):
            self._fan_out(channel, payload)

    def _fan_out(self, channel: str, payload: str) -> None:
        """Hand `payload` to every listener of `channel` in this process."""
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
        """PostgreSQL: listen to `channels` on one connection each for the whole process, until `until` is set.

        While it runs, `listen` on those channels costs no connection: a server whose many
        callers wait for decisions at once (the gate's long polls, hooks) would otherwise
        hold one connection per waiting caller. On SQLite listeners are in-process already.
        """
        for channel in channels:
            _check_channel(channel)
        if not self.db.is_postgres:
            task_status.started()
            return
        async with anyio.create_task_group() as group:
            for channel in channels:
                group.start_soon(self._listen_until_cancelled, channel, functools.partial(self._fan_out, channel))
            self._relayed.update(channels)
            task_status.started()
            try:
                await (until.wait() if until is not None else anyio.sleep_forever())
            finally:
                self._relayed.difference_update(channels)
                group.cancel_scope.cancel()

    @asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
        """Receive payloads announced on `channel` from now on, until the block ends.

        On PostgreSQL a lost connection is reopened in the background, with backoff; an empty
        payload after it says that announcements may have been missed meanwhile.
        """
        _check_channel(channel)
        send, receive = anyio.create_memory_object_stream[str](max_buffer_size=1_000)
        if not self.db.is_postgres or channel in self._relayed:  # in-process: nothing to lose, or relayed
            self._subscribers[channel].add(send)
            try:
                yield receive
            finally:
                self._subscribers[channel].discard(send)
                send.close()
                receive.close()
            return
        async with anyio.create_task_group() as group:
            group.start_soon(self._listen_for, channel, send)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()
                receive.close()

    async def _listen_for(self, channel: str, send: MemoryObjectSendStream[str]) -> None:
        """One listener's own LISTEN connection (a channel no `relay` serves)."""

        def deliver(payload: str) -> None:
            with suppress(anyio.WouldBlock):
                send.send_nowait(payload)

        async with send:
            await self._listen_until_cancelled(channel, deliver)

    async def _listen_until_cancelled(self, channel: str, deliver: Callable[[str], None]) -> None:
        """Hold a LISTEN connection, and open a new one whenever it is lost (server restart, dropped connection).

        After a reconnection an empty payload wakes the listener up: announcements made while
        the connection was down are lost, so it should look for itself.
        """
        import psycopg

        conninfo = self.db.sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
        outage = Outage(f"listening for {channel!r}", logger)
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=10)
            except (psycopg.Error, OSError) as exc:
                await anyio.sleep(outage.failed(describe(exc)))
                continue
            try:
                await connection.execute(f'LISTEN "{channel}"')
                if outage.ongoing:
                    outage.succeeded()
                    deliver("")
                async for notification in connection.notifies():
                    deliver(notification.payload)
                raise psycopg.OperationalError("the server closed the LISTEN connection")
            except (psycopg.Error, OSError) as exc:
                delay = outage.failed(describe(exc))
            finally:
                with anyio.CancelScope(shield=True):
                    await connection.close()
            await anyio.sleep(delay)
