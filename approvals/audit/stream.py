"""Streaming the audit log to its sinks: the durable deliverer, run over the configured sinks until stopped.

`approvals serve` runs `stream_audit` beside the web requests (`approvals_web.app`); any
number of processes may run it at once, each sink's cursor lease makes one of them its
sender. Everything about retries, backoff, outages and order is the deliverer's
(`approvals.channels.deliverer`); this module only opens the sinks, places new cursors where
the settings say the copy starts, and says how each sink is doing (`AuditStreamHealth`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc

from .._outage import Outage
from ..channels.deliverer import Deliverer, DelivererHealth
from ..store.audit_sinks import open_sink_cursor
from ..store.errors import describe
from .sinks import AuditSinkSettings, Sink, SinkChannel
from .sinks_syslog import SyslogSink
from .sinks_webhook import WebhookSink

if TYPE_CHECKING:
    from ..store import Store

__all__ = ("AuditStreamHealth", "open_sinks", "stream_audit", "stream_to")

logger = logging.getLogger("approvals.audit.stream")


class AuditStreamHealth(DelivererHealth):
    """The deliverer's view of each sink, with the per-sink detail `/readyz` shows (names are the operator's)."""

    def sinks(self) -> dict[str, dict[str, Any]]:
        """By sink name: state, cursor, failed tries in a row, last delivery; no sites or error texts."""
        shown: dict[str, dict[str, Any]] = {}
        for destination in self.destinations.values():
            name = destination.site.split(" ", 1)[0]
            shown[name] = {
                "state": destination.state,
                "last_event_id": destination.last_event_id,
                "failures": destination.failures,
                "delivered": destination.delivered,
                "last_delivery": None if destination.last_delivery is None else destination.last_delivery.isoformat(),
            }
        return shown


def open_sinks(settings: AuditSinkSettings) -> list[Sink]:
    """The sinks `settings` name; nothing connects before the first send."""
    sinks: list[Sink] = [SyslogSink(syslog) for syslog in settings.syslog]
    sinks += [WebhookSink(webhook) for webhook in settings.webhooks]
    names = [sink.name for sink in sinks]
    if len(set(names)) != len(names):
        raise ValueError(f"audit sinks need distinct names, not {names}")
    return sinks


async def stream_audit(store: Store, settings: AuditSinkSettings, stop: anyio.Event, **options: Any) -> None:
    """Stream the log to the sinks of `settings` until `stop` is set; `options` are `stream_to`'s."""
    if not settings.any:
        return
    await stream_to(store, open_sinks(settings), stop, start=settings.start, **options)


async def stream_to(
    store: Store,
    sinks: Sequence[Sink],
    stop: anyio.Event,
    *,
    start: Literal["beginning", "head"] = "beginning",
    backoff: float = 1.0,
    max_backoff: float = 60.0,
    attempt_timeout: float = 10.0,
    poll_interval: float = 5.0,
    lease_seconds: float = 30.0,
    owner: str | None = None,
    health: DelivererHealth | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver the log to `sinks` until `stop`; `task_status` is started once every sink has its cursor.

    The sinks are closed on the way out.
    """
    channels = [SinkChannel(sink) for sink in sinks]
    async with AsyncExitStack() as stack:
        for sink in sinks:
            stack.push_async_callback(sink.aclose)
        await _place_cursors(store, channels, start, stop)
        if stop.is_set():
            task_status.started()
            return
        deliverer = Deliverer(
            store,
            channels,
            owner=owner,
            backoff=backoff,
            max_backoff=max_backoff,
            attempt_timeout=attempt_timeout,
            poll_interval=poll_interval,
            lease_seconds=lease_seconds,
            health=health,
        )
        await deliverer.run(stop, task_status=task_status)


async def _place_cursors(
    store: Store, channels: Sequence[SinkChannel], start: Literal["beginning", "head"], stop: anyio.Event
) -> None:
    """Each new sink's cursor where its copy starts, waiting out a database that cannot be reached."""
    outage = Outage("placing audit sink cursors", logger)
    while not stop.is_set():
        try:
            for channel in channels:
                await open_sink_cursor(store.outbound, channel.destination_id, channel.site, start)
            outage.succeeded()
            return
        except Exception as exc:
            delay = outage.failed(describe(exc))
            with anyio.move_on_after(delay):
                await stop.wait()
