"""Server-sent events, so an open inbox or run page learns about changes without polling.

The store's notifier announces run ids when calls become pending or are decided and when
runs change status (PostgreSQL LISTEN/NOTIFY across processes, in-process on SQLite). One
`EventHub` per web process listens once per channel and fans out to every open stream, so
a hundred open inboxes hold two database connections (one per channel), not a hundred. Events carry only the
run id: the page asks for its own fresh fragment (htmx `hx-trigger="sse:<event>"`), so an
event never leaks what a viewer could not read anyway.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from fastapi import APIRouter, FastAPI, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from approvals.store import PENDING_CHANNEL, RUNS_CHANNEL, Notifier

from .auth import ViewerPage

logger = logging.getLogger("approvals.web.sse")

RESYNC = "*"
"""Payload meaning "anything may have changed": the first event of every stream, and after the hub reconnected."""
PING_SECONDS = 15
"""A comment line this often keeps proxies from closing idle streams."""

Message = tuple[str, str]
"""(channel, run id)."""


class EventHub:
    """One listener per channel for this process, fanned out to every open event stream."""

    def __init__(self, notifier: Notifier, channels: tuple[str, ...] = (PENDING_CHANNEL, RUNS_CHANNEL)) -> None:
        self.notifier = notifier
        self.channels = channels
        self._subscribers: set[MemoryObjectSendStream[Message]] = set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on every channel until cancelled; reports started once each listener tried once."""
        async with anyio.create_task_group() as group:
            for channel in self.channels:
                await group.start(self._listen, channel)
            task_status.started()

    async def _listen(self, channel: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            try:
                async with self.notifier.listen(channel) as messages:
                    if started:
                        self.publish(channel, RESYNC)  # notifications were lost while disconnected
                    else:
                        task_status.started()
                        started = True
                    async for payload in messages:
                        self.publish(channel, payload)
            except Exception:  # the database went away: keep the web app up and try again
                logger.warning("listening on %s failed; retrying in a second", channel, exc_info=True)
            if not started:
                task_status.started()
                started = True
            await anyio.sleep(1.0)

    def publish(self, channel: str, payload: str) -> None:
        """Hand a message to every subscriber; a stream that is full misses it (the next one refreshes all)."""
        for stream in list(self._subscribers):
            try:
                stream.send_nowait((channel, payload))
            except anyio.WouldBlock:
                pass
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(stream)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[MemoryObjectReceiveStream[Message]]:
        """Messages from now until the block ends (or the hub closes)."""
        send, receive = anyio.create_memory_object_stream[Message](max_buffer_size=100)
        self._subscribers.add(send)
        try:
            yield receive
        finally:
            self._subscribers.discard(send)
            send.close()
            receive.close()

    def close(self) -> None:
        """End every open stream (the app is shutting down)."""
        for stream in list(self._subscribers):
            stream.close()
        self._subscribers.clear()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the hub beside the app; the app's own lifespan has built the store by now."""
    hub = EventHub(app.state.context.store.notifier)
    async with anyio.create_task_group() as group:
        await group.start(hub.run)
        app.state.events = hub
        try:
            yield
        finally:
            hub.close()
            group.cancel_scope.cancel()


router = APIRouter(lifespan=lifespan, include_in_schema=False)  # event streams for pages


def _hub(request: Request) -> EventHub:
    hub: EventHub = request.app.state.events
    return hub


@router.get("/events/inbox")
async def inbox_events(request: Request, actor: ViewerPage) -> EventSourceResponse:
    """`pending` whenever a call starts or stops waiting for a person; the data is the run id."""
    return EventSourceResponse(_stream(_hub(request), {PENDING_CHANNEL: "pending"}), ping=PING_SECONDS)


@router.get("/events/runs/{run_id}")
async def run_events(request: Request, run_id: str, actor: ViewerPage) -> EventSourceResponse:
    """`run` whenever this run changes status or one of its calls is decided."""
    events = {PENDING_CHANNEL: "run", RUNS_CHANNEL: "run"}
    return EventSourceResponse(_stream(_hub(request), events, run_id=run_id), ping=PING_SECONDS)


async def _stream(
    hub: EventHub, events: dict[str, str], *, run_id: str | None = None
) -> AsyncIterator[ServerSentEvent]:
    async with hub.subscribe() as messages:
        # first a refresh: whatever changed between rendering the page and subscribing (or while a
        # dropped stream reconnected) would otherwise stay unseen until the next change
        yield ServerSentEvent(event=next(iter(events.values())), data=RESYNC)
        async for channel, payload in messages:
            name = events.get(channel)
            if name is not None and (run_id is None or payload in (run_id, RESYNC)):
                yield ServerSentEvent(event=name, data=payload)
