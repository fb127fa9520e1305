"""Who a reviewer is outside the inbox: their e-mail address and their Slack member id.

A click in Slack or a link in a mail decides as an inbox user, so the same rules apply as
on the web (role, groups, quorum, self-approval). This module maps those outside
identities to users, links them (admins for anyone, a user for themselves), and lists who
a call is routed to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from ..calls.actors import Actor
from ..calls.states import ROLE_RANK
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from .accounts import AccountOps
from .linked_identity import latest_identity
from .models import UserRow

__all__ = ("IdentityOps", "actor_for", "check_email", "check_slack_user_id")

_EMAIL = re.compile(r"[^@\s<>,;\"']{1,64}@[^@\s<>,;\"']{1,255}")
_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,39}")
_UNSET = object()


def check_email(email: str) -> str:
    """An address as stored: trimmed and lowercase, one `@`, no spaces or header separators."""
    cleaned = email.strip().lower()
    if len(cleaned) > 320 or not _EMAIL.fullmatch(cleaned) or "." not in cleaned.rsplit("@", 1)[1]:
        raise UserError(f"{email!r} is not an e-mail address")
    return cleaned


def check_slack_user_id(slack_user_id: str) -> str:
    """A Slack member id as Slack writes it: `U` or `W` and capitals and digits (e.g. U024BE7LH)."""
    cleaned = slack_user_id.strip()
    if not _SLACK_USER.fullmatch(cleaned):
        raise UserError(f"{slack_user_id!r} is not a Slack member id (it looks like U024BE7LH)")
    return cleaned


def actor_for(user: UserRow) -> Actor | None:
    """The actor an enabled user decides as; None for a disabled one."""
    if user.disabled:
        return None
    return Actor(id=user.username, role=user.role, groups=frozenset(user.groups or ()))


class IdentityOps(AccountOps):
    """Users' outside identities and the reviewers a call is routed to."""

    async def reviewer_actor(self, user: UserRow) -> Actor | None:
        """The actor `user` decides as from outside the web (Slack, an e-mail link), with the provider identity
        they last signed in as; None for a disabled user."""
        actor = actor_for(user)
        if actor is None:
            return None
        async with self.db.read() as session:
            identity = await latest_identity(session, user.id)
        return replace(actor, identity=identity) if identity is not None else actor

    async def set_user_contact(
        self,
        username: str,
        *,
        actor: Actor,
        email: str | object | None = _UNSET,
        slack_user_id: str | object | None = _UNSET,
    ) -> UserRow:
        """Set (or clear, with None) a user's e-mail and Slack member id: admins for anyone, a user for themselves."""
        if not actor.can("admin") and actor.id != username:
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not change another user's e-mail or Slack link")
        values: dict[str, Any] = {}
        if email is not _UNSET:
            values["email"] = check_email(str(email)) if email else None
        if slack_user_id is not _UNSET:
            values["slack_user_id"] = check_slack_user_id(str(slack_user_id)) if slack_user_id else None
        if not values:
            return await self.get_user(username)
        try:
            async with self.transaction() as tx:
                row = await tx.session.scalar(select(UserRow).where(UserRow.username == username).with_for_update())
                if row is None:
                    raise NotFound(f"No user {username!r}")
                changed = {key: value for key, value in values.items() if getattr(row, key) != value}
                if not changed:
                    return row
                await tx.session.execute(update(UserRow).where(UserRow.id == row.id).values(**changed))
                for key, value in changed.items():
                    setattr(row, key, value)
                tx.audit(actor.id, "user.contact_changed", "user", username, details=changed)
        except IntegrityError:
            taken = ", ".join(f"{key} {value!r}" for key, value in values.items() if value)
            raise Conflict(f"Another user already has {taken}") from None
        return row

    async def user_by_email(self, email: str) -> UserRow | None:
        """The user with this address (any case), enabled or not."""
        try:
            cleaned = check_email(email)
        except UserError:
            return None
        async with self.db.read() as session:
            return await session.scalar(select(UserRow).where(UserRow.email == cleaned))

    async def user_by_slack_id(self, slack_user_id: str) -> UserRow | None:
        """The user linked to this Slack member id, enabled or not."""
        async with self.db.read() as session:
            return await session.scalar(select(UserRow).where(UserRow.slack_user_id == slack_user_id))

    async def reviewers_in(self, groups: Iterable[str] | None) -> list[UserRow]:
        """Enabled reviewers and admins who may approve a call routed to `groups` (None or empty: anyone).

        Whether each may decide a particular call (self-approval, quorum) is checked when
        they decide, as on the web; this is who is told.
        """
        wanted = set(groups or ())
        async with self.db.read() as session:
            users = (await session.scalars(select(UserRow).where(UserRow.disabled.is_(False)))).all()
        return [
            user
            for user in sorted(users, key=lambda user: user.username)
            if ROLE_RANK.get(user.role, 0) >= ROLE_RANK["reviewer"] and (not wanted or wanted & set(user.groups or ()))
        ]
