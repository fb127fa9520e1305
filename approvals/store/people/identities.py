"""Accounts made and kept by an OpenID provider (issue 40): just-in-time users and their identities.

A sign-in names the user by the provider's (issuer, subject); the first one creates the user
(or links the existing user of the same name: the username claim must be one the provider
controls), every one sets their role and groups from the provider's claims. A mapping that
yields no role, or a disabled user, is refused; refusals are audited like logins, with the
issuer and subject, in a transaction of their own so the refusal is recorded and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from ...calls.actors import SYSTEM_ACTOR_ID
from ...calls.states import Role
from ...exceptions import Forbidden
from ..accounts import AccountOps, check_groups
from ..backend import Transaction
from ..models import UserIdentityRow, UserRow
from ..run_plan import utcnow

__all__ = ("ProviderLogin", "ProviderLoginOps", "SignInRefused")


@dataclass(frozen=True)
class ProviderLogin:
    """What a validated ID token says, after the provider's mapping was applied."""

    issuer: str
    subject: str
    provider: str
    username: str
    role: Role | None
    """None when no mapped group gives a role: the sign-in is refused."""
    groups: tuple[str, ...]
    email: str | None = None


class SignInRefused(Forbidden):
    """The provider vouched for the person, but approvals will not let them in; `reason` says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def _take_provider_email(
    tx: Transaction[AsyncSession], user: UserRow, email: str, source: dict[str, str]
) -> None:
    """Make the provider's verified e-mail the user's, so that Slack (which maps members by e-mail) and e-mail
    links reach the same person; left as it is when another user has that address (audited, not fatal)."""
    taken_by = await tx.session.scalar(select(UserRow.username).where(UserRow.email == email, UserRow.id != user.id))
    if taken_by is not None:
        details = {"email": email, "kept": user.email, "reason": f"{taken_by} has that address", **source}
        tx.audit(SYSTEM_ACTOR_ID, "user.contact_kept", "user", user.username, details=details)
        return
    details = {"email": email, "previous_email": user.email, **source}
    user.email = email
    tx.audit(SYSTEM_ACTOR_ID, "user.contact_changed", "user", user.username, details=details)


class ProviderLoginOps(AccountOps):
    """Sign-ins through an OpenID provider: find or make the user, bring role and groups up to date."""

    async def provider_login(self, login: ProviderLogin) -> UserRow:
        """The user `login` names, created or refreshed and audited; `SignInRefused` otherwise."""
        groups = check_groups(login.groups)
        source = {"source": login.issuer, "provider": login.provider}
        who = {"issuer": login.issuer, "subject": login.subject, "provider": login.provider}
        refusal: SignInRefused | None = None
        async with self.transaction() as tx:
            identity = await tx.session.scalar(
                select(UserIdentityRow)
                .where(UserIdentityRow.issuer == login.issuer, UserIdentityRow.subject == login.subject)
                .with_for_update()
            )
            if identity is not None:
                user = await tx.session.scalar(select(UserRow).where(UserRow.id == identity.user_id).with_for_update())
            else:
                user = await tx.session.scalar(
                    select(UserRow).where(UserRow.username == login.username).with_for_update()
                )
            name = user.username if user is not None else login.username
            if login.role is None:
                refusal = SignInRefused(
                    "no_role", f"{login.provider} signed you in, but none of your groups gives a role in approvals"
                )
            elif user is not None and user.disabled:
                refusal = SignInRefused("disabled", f"The account {name!r} is disabled")
            elif user is None and name == SYSTEM_ACTOR_ID:
                refusal = SignInRefused("reserved", f"{name!r} is reserved and cannot sign in")
            if refusal is not None:
                tx.audit(name, "login.refused", "user", name, details={**who, "reason": refusal.reason})
                user = None
            else:
                assert login.role is not None
                now = utcnow()
                if user is None:
                    user = UserRow(
                        username=name, password_hash=None, role=login.role, groups=groups or None,
                        disabled=False, created_at=now,
                    )  # fmt: skip
                    tx.session.add(user)
                    await tx.session.flush()
                    details = {"role": login.role, "groups": groups, **source}
                    tx.audit(SYSTEM_ACTOR_ID, "user.created", "user", name, details=details)
                else:
                    previous = sorted(user.groups or ())
                    if previous != groups:
                        user.groups = groups or None
                        details = {"groups": groups, "previous": previous, **source}
                        tx.audit(SYSTEM_ACTOR_ID, "user.groups_changed", "user", name, details=details)
                    if user.role != login.role:
                        details = {"role": login.role, "previous_role": user.role, **source}
                        user.role = login.role
                        tx.audit(SYSTEM_ACTOR_ID, "user.updated", "user", name, details=details)
                if login.email is not None and user.email != login.email:
                    await _take_provider_email(tx, user, login.email, source)
                if identity is None:
                    identity = UserIdentityRow(
                        issuer=login.issuer, subject=login.subject, user_id=user.id, created_at=now
                    )
                    tx.session.add(identity)
                identity.last_login_at = now
                tx.audit(name, "user.logged_in", "user", name, details=who)
        self.verified_tokens.clear()  # the user's tokens act with the role and groups now stored
        if refusal is not None:
            raise refusal
        assert user is not None
        return user

    async def record_sign_in_failure(self, provider: str, issuer: str, reason: str) -> None:
        """Audit a callback that proved nothing (bad state, token or code): no user is known, only the provider."""
        async with self.transaction() as tx:
            details = {"issuer": issuer, "reason": reason[:500]}
            tx.audit(SYSTEM_ACTOR_ID, "login.failed", "provider", provider, details=details)

    async def user_identities(self, username: str) -> list[UserIdentityRow]:
        """The provider identities linked to `username`, oldest first."""
        async with self.db.read() as session:
            rows = await session.scalars(
                select(UserIdentityRow)
                .join(UserRow, UserRow.id == UserIdentityRow.user_id)
                .where(UserRow.username == username)
                .order_by(UserIdentityRow.id)
            )
            return list(rows.all())
