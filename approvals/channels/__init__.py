"""Outbound channels (webhooks; later Slack and e-mail), each delivered by `approvals.worker.Deliverer`.

`approvals.channels.webhooks` is the webhook channel; it needs httpx (the `server` extra), imported only when used.
"""

from __future__ import annotations

from .base import Channel, DeliveryFailed, DeliveryRefused

__all__ = ("Channel", "DeliveryFailed", "DeliveryRefused")
