"""Outbound channels from the app's settings: webhooks (`APPROVALS_WEBHOOK_*`), Slack and e-mail.

Everything else is the core's: the webhook channel (events, bodies, signatures, one POST)
is `approvals.channels.webhooks`, and delivery (a cursor and a lease per URL, backoff,
outages, once in order across processes) is `approvals.worker.deliverer`. `approvals serve`
runs this beside the web requests; `approvals worker` runs the same delivery from the same
settings, and any number of both share the work safely.
"""

from __future__ import annotations

from typing import Any

import anyio

from approvals.channels.outbound import deliver_outbound

from .context import AppContext

__all__ = ("deliver_webhooks",)


async def deliver_webhooks(context: AppContext, stop: anyio.Event, **options: Any) -> None:
    """Deliver the app's webhooks, Slack messages and mails until `stop` is set (`deliver_outbound`'s options).

    Its `task_status` is started once every URL has its cursor. The lease owner names this
    process and the app's store, so run one deliverer per app at a time (a restarted one
    takes its predecessor's leases back at once).
    """
    await deliver_outbound(context.store, context.settings.outbound(), stop, **options)
