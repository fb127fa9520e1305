"""Background work outside requests: resuming runs and following up.

The durable deliverer of outbound channels lives below, in `approvals.channels.deliverer`; it is
re-exported here for the callers that knew it as `approvals.worker.Deliverer`.
"""

from __future__ import annotations

from ..channels.deliverer import Deliverer, DelivererHealth, DestinationHealth

__all__ = ("Deliverer", "DelivererHealth", "DestinationHealth")
