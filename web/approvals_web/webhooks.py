"""Webhooks from the app's settings: the URLs and their secrets (`APPROVALS_WEBHOOK_*`).

Everything else is the core's: the webhook channel (events, bodies, signatures, one POST)
is `approvals.channels.webhooks`, and delivery (a cursor and a lease per URL, backoff,
outages, once in order across processes) is `approvals.worker.deliverer`. `approvals serve`
runs this beside the web requests; `approvals worker` runs the same delivery from the same
settings, and any number of both share the work safely.
"""

from __future__ import annotations

import anyio
import anyio.abc

from approvals.channels import webhooks
from approvals.worker import DelivererHealth

from .context import AppContext

__all__ = ("deliver_webhooks",)


async def deliver_webhooks(
    context: AppContext,
    stop: anyio.Event,
    *,
    backoff: float = 1.0,
    max_backoff: float = 300.0,
    request_timeout: float = webhooks.DEFAULT_REQUEST_TIMEOUT,
    poll_interval: float = 5.0,
    lease_seconds: float = 30.0,
    shutdown_grace: float = 2.0,
    owner: str | None = None,
    health: DelivererHealth | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver the app's webhooks until `stop` is set; `task_status` is started once every URL has its cursor.

    The options are `approvals.channels.webhooks.deliver_webhooks`'s. The lease owner names
    this process and the app's store, so run one deliverer per app at a time (a restarted
    one takes its predecessor's leases back at once).
    """
    settings = context.settings
    await webhooks.deliver_webhooks(
        context.store,
        settings.webhook_urls,
        stop,
        secret_for=settings.secret_for_webhook,
        backoff=backoff,
        max_backoff=max_backoff,
        request_timeout=request_timeout,
        poll_interval=poll_interval,
        lease_seconds=lease_seconds,
        shutdown_grace=shutdown_grace,
        owner=owner,
        health=health,
        task_status=task_status,
    )
