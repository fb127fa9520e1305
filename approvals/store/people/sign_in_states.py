"""Sign-ins under way: Authlib's state cache, kept in the database (issue 40).

Between the redirect to the provider and the callback, the state, nonce and PKCE verifier
wait here (the session cookie only carries a marker). The callback takes the row (reads and deletes it), so a
replayed `state` finds nothing even with an old copy of the cookie; every web process sees
the same rows. Expired rows go whenever a new sign-in starts.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select

from .._base import StoreBase
from ..models import OidcStateRow
from ..run_plan import utcnow

__all__ = ("SignInStateOps",)


class SignInStateOps(StoreBase):
    """get, set and delete of a small key-value store with expiry, the shape Authlib's cache wants."""

    async def take_sign_in_state(self, key: str) -> str | None:
        """The state's value, deleted in the same transaction: of two callbacks with one state, one wins."""
        async with self.db.write() as session:
            row = await session.scalar(select(OidcStateRow).where(OidcStateRow.key == key).with_for_update())
            if row is None:
                return None
            await session.delete(row)
            return row.value if row.expires_at > utcnow() else None

    async def save_sign_in_state(self, key: str, value: str, expires_in: int) -> None:
        now = utcnow()
        async with self.db.write() as session:
            await session.execute(delete(OidcStateRow).where(OidcStateRow.expires_at <= now))
            session.add(OidcStateRow(key=key, value=value, expires_at=now + dt.timedelta(seconds=expires_in)))

    async def drop_sign_in_state(self, key: str) -> bool:
        """Delete the state; False when it was gone already (used, expired or never made)."""
        async with self.db.write() as session:
            result = await session.execute(delete(OidcStateRow).where(OidcStateRow.key == key))
            return bool(result.rowcount)  # type: ignore[attr-defined]
