"""Background work outside requests: for now the durable deliverer of outbound channels (`deliverer.py`)."""

from __future__ import annotations

from .deliverer import Deliverer, DelivererHealth, DestinationHealth

__all__ = ("Deliverer", "DelivererHealth", "DestinationHealth")
