"""Every outbound channel of a process, delivered by one durable deliverer: webhooks, Slack, e-mail.

`approvals serve` and `approvals worker` both run `deliver_outbound`; each destination has
its own cursor and lease, so however many processes run it, each message is sent by one
of them (`approvals.channels.deliverer`).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .base import Channel
from .deliverer import Deliverer, DelivererHealth
from .settings import OutboundSettings
from .webhooks import DEFAULT_REQUEST_TIMEOUT, open_webhook_channels, webhook_site

if TYPE_CHECKING:
    from ..store import Store

__all__ = ("deliver_outbound",)

logger = logging.getLogger("approvals.channels")


async def deliver_outbound(
    store: Store,
    outbound: OutboundSettings,
    stop: anyio.Event,
    *,
    backoff: float = 1.0,
    max_backoff: float = 300.0,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    poll_interval: float = 5.0,
    lease_seconds: float = 30.0,
    shutdown_grace: float = 2.0,
    owner: str | None = None,
    health: DelivererHealth | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver to every configured channel until `stop` is set; `task_status` is started once each has its cursor."""
    urls = list(dict.fromkeys(outbound.webhook_urls))
    for url in urls:
        if not outbound.webhook_secret_for(url):  # the app allows it with APPROVALS_WEBHOOK_ALLOW_UNSIGNED only
            logger.warning("webhooks to %s are sent unsigned: its receiver cannot trust them", webhook_site(url))
    async with AsyncExitStack() as stack:
        channels: list[Channel] = []
        if urls:
            channels += await stack.enter_async_context(
                open_webhook_channels(urls, outbound.webhook_secret_for, request_timeout=request_timeout)
            )
        if outbound.slack is not None:
            from .slack import open_slack_channel

            channels.append(
                await stack.enter_async_context(
                    open_slack_channel(store, outbound.slack, public_url=outbound.public_url)
                )
            )
        if outbound.smtp is not None:
            from .email import open_email_channel

            channels.append(
                await stack.enter_async_context(
                    open_email_channel(store, outbound.smtp, public_url=outbound.public_url)
                )
            )
        deliverer = Deliverer(
            store,
            channels,
            owner=owner,
            backoff=backoff,
            max_backoff=max_backoff,
            attempt_timeout=request_timeout,
            poll_interval=poll_interval,
            lease_seconds=lease_seconds,
            shutdown_grace=shutdown_grace,
            health=health,
        )
        await deliverer.run(stop, task_status=task_status)
