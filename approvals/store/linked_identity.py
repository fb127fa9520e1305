"""The provider identity a person last signed in as: what their decisions are recorded with (issue 40).

A user made by an OpenID provider has one identity per provider (`user_identities`); the one
used most recently speaks for them on channels without a sign-in of their own (Slack, e-mail
links, their API tokens). A web session knows the identity it was opened with.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls.actors import ProviderIdentity
from .models import UserIdentityRow

__all__ = ("latest_identity",)


async def latest_identity(session: AsyncSession, user_id: int) -> ProviderIdentity | None:
    """The identity `user_id` signed in as last; None for a local account."""
    found = (
        await session.execute(
            select(UserIdentityRow.issuer, UserIdentityRow.subject)
            .where(UserIdentityRow.user_id == user_id)
            .order_by(UserIdentityRow.last_login_at.desc().nulls_last(), UserIdentityRow.id.desc())
            .limit(1)
        )
    ).first()
    return ProviderIdentity(issuer=found.issuer, subject=found.subject) if found is not None else None
