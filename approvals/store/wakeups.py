"""The channels writers announce on and listeners wait on: names only, so every layer of the store may import them."""

from __future__ import annotations

import re

__all__ = ("PENDING_CHANNEL", "READY_CHANNEL", "RUNS_CHANNEL", "check_channel")

READY_CHANNEL = "approvals_ready"
"""A run became ready to resume; payload: run id."""
PENDING_CHANNEL = "approvals_pending"
"""Calls started or stopped waiting for a person; payload: run id."""
RUNS_CHANNEL = "approvals_runs"
"""A run changed status; payload: run id."""
_CHANNEL_NAME = re.compile(r"^[a-z_]{1,60}$")


def check_channel(channel: str) -> None:
    """Refuse a channel name that could not be a PostgreSQL identifier as written."""
    if not _CHANNEL_NAME.match(channel):
        raise ValueError(f"invalid channel name {channel!r}")
