"""Messages sent to reviewer channels about calls: sent once each, and found again to update.

A channel records each message right after the destination accepted it; a delivery tried
again (after a crash or a failure halfway through its recipients) skips the destinations
already recorded, so each recipient gets one message per call and purpose, barring a crash
between sending and recording (then at least once).
"""

from __future__ import annotations

from sqlalchemy import select

from ._base import StoreBase
from .models import ChannelMessageRow
from .run_plan import utcnow

__all__ = ("ChannelMessageOps",)


class ChannelMessageOps(StoreBase):
    """The `channel_messages` table."""

    async def record_message(self, call_id: str, channel: str, destination: str, purpose: str, ref: str | None) -> None:
        """Remember a sent message; recording the same one twice keeps the first."""
        now = utcnow()
        values = {
            "call_id": call_id,
            "channel": channel,
            "destination": destination,
            "purpose": purpose,
            "ref": ref,
            "created_at": now,
            "updated_at": now,
        }
        async with self.db.write() as session:
            await session.execute(self.backend.insert(ChannelMessageRow).values(values).on_conflict_do_nothing())

    async def sent_messages(self, call_id: str, channel: str, *, purpose: str | None = None) -> list[ChannelMessageRow]:
        """The messages sent about a call through `channel` (of one `purpose`, or all), oldest first."""
        query = select(ChannelMessageRow).where(
            ChannelMessageRow.call_id == call_id, ChannelMessageRow.channel == channel
        )
        if purpose is not None:
            query = query.where(ChannelMessageRow.purpose == purpose)
        async with self.db.read() as session:
            return list((await session.scalars(query.order_by(ChannelMessageRow.id))).all())
