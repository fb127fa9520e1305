"""Webhooks: a signed POST to each configured URL when calls become pending and when runs finish."""

from __future__ import annotations

import anyio

from .context import AppContext


async def deliver_webhooks(context: AppContext, stop: anyio.Event) -> None:
    """Deliver webhook events until `stop` is set."""
    await stop.wait()
