"""Users and groups as an identity provider provisions them (SCIM, issue 40): create, change, deactivate, delete.

Each operation is one transaction with its audit events (`source: scim`), so a refused
request leaves nothing half-written. Deactivating a user (`active: false`, or deleting them)
takes everything they could act with, at once and in that transaction: the user is disabled,
their web sessions end, their API tokens are revoked, their unused e-mail links expire (a
Slack click and a link are refused anyway for a disabled user), and their standing approvals
of calls still waiting are withdrawn from the quorum count: someone who left must not help
make a quorum after leaving. The decision rows stay (marked used up, `consumed_at`), and the
audit log keeps the approval and says it was withdrawn. Reactivating lets the user sign in
again; withdrawn approvals stay withdrawn, since nobody re-approved anything.

A user's groups stay the JSON list on `users` that routing reads; `ScimGroupRow` only gives a
provider's group an id, an `externalId` and a life of its own while it has no members.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ...calls.actors import SYSTEM_ACTOR_ID, Actor
from ...calls.states import OPEN_CALL_STATUSES, is_role
from ...exceptions import Conflict, Forbidden, NotFound, UserError
from ..accounts import AccountOps, check_groups
from ..backend import Transaction
from ..logins import revoke_user_sessions
from ..models import STANDING, ApiTokenRow, DecisionRow, EmailLinkRow, ScimGroupRow, ToolCallRow, UserRow
from ..reviewer_identity import check_email
from ..run_plan import utcnow
from ..wakeups import PENDING_CHANNEL

__all__ = ("ProvisionedUser", "ProvisioningOps", "UserFilter")

SOURCE = {"source": "scim"}


@dataclass(frozen=True)
class ProvisionedUser:
    """What a provider sends for a user: the fields approvals uses, and the rest kept as sent (`profile`)."""

    username: str
    external_id: str | None = None
    active: bool = True
    email: str | None = None
    profile: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class UserFilter:
    """A SQL condition on `users` made from a SCIM filter by a transpiler (values bound, never inlined)."""

    sql: str
    params: Mapping[str, Any]


def _check_provisioner(actor: Actor) -> None:
    if not actor.can("admin") or not actor.may("scim"):
        raise Forbidden(f"{actor.id!r} may not provision users: this needs an admin token with the 'scim' scope")


def _check_username(username: str) -> str:
    cleaned = username.strip()
    if not cleaned or len(cleaned) > 200:
        raise UserError("userName must be 1 to 200 characters")
    if cleaned == SYSTEM_ACTOR_ID:
        raise UserError(f"{cleaned!r} is reserved: the audit log names work nobody asked for so")
    return cleaned


async def _user_row(session: AsyncSession, user_id: int) -> UserRow:
    row = await session.scalar(select(UserRow).where(UserRow.id == user_id).with_for_update())
    if row is None:
        raise NotFound(f"No user {user_id}")
    return row


async def take_away(tx: Transaction[AsyncSession], row: UserRow, now: dt.datetime) -> dict[str, Any]:
    """End whatever `row`'s user could still act with (see the module's doc); what was ended, for the audit."""
    session = tx.session
    sessions = await revoke_user_sessions(session, row.username, now)
    tokens = await session.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.username == row.username, ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    links = await session.execute(
        update(EmailLinkRow)
        .where(EmailLinkRow.username == row.username, EmailLinkRow.used_at.is_(None), EmailLinkRow.expires_at > now)
        .values(expires_at=now)
    )
    open_calls = select(ToolCallRow.id).where(ToolCallRow.status.in_(OPEN_CALL_STATUSES))
    withdrawn = (
        await session.execute(
            select(DecisionRow.id, DecisionRow.call_id, ToolCallRow.run_id)
            .join(ToolCallRow, ToolCallRow.id == DecisionRow.call_id)
            .where(DecisionRow.actor == row.username, STANDING, DecisionRow.call_id.in_(open_calls))
            .order_by(DecisionRow.id)
        )
    ).all()
    if withdrawn:
        await session.execute(
            update(DecisionRow).where(DecisionRow.id.in_([w.id for w in withdrawn])).values(consumed_at=now)
        )
        for run_id in sorted({w.run_id for w in withdrawn}):
            tx.announce(PENDING_CHANNEL, run_id)
    return {
        "sessions_ended": sessions,
        "tokens_revoked": int(tokens.rowcount),  # type: ignore[attr-defined]
        "email_links_expired": int(links.rowcount),  # type: ignore[attr-defined]
        "approvals_withdrawn": sorted({w.call_id for w in withdrawn}),
    }


class ProvisioningOps(AccountOps):
    """Users and groups as SCIM sees them: by their row id, with their provider's `externalId`."""

    async def record_scim_refusal(self, actor_id: str, endpoint: str, details: Mapping[str, Any]) -> None:
        """Audit a SCIM request refused as bad or not allowed (`scim.refused`): nothing else of it was written."""
        async with self.transaction() as tx:
            tx.audit(actor_id, "scim.refused", "scim", endpoint[:200], details={**details, **SOURCE})

    async def scim_user(self, user_id: int) -> UserRow:
        async with self.db.read() as session:
            row = await session.scalar(select(UserRow).where(UserRow.id == user_id))
        if row is None:
            raise NotFound(f"No user {user_id}")
        return row

    async def scim_users(self, where: UserFilter | None, *, offset: int, limit: int) -> tuple[int, list[UserRow]]:
        """Users matching `where` (all when None), by id: how many in all, and one page of them."""
        query = select(UserRow)
        if where is not None:
            query = query.where(text(where.sql).bindparams(**where.params))
        async with self.db.read() as session:
            total = int(await session.scalar(select(func.count()).select_from(query.subquery())) or 0)
            rows = list((await session.scalars(query.order_by(UserRow.id).offset(offset).limit(limit))).all())
        return total, rows

    async def provision_user(self, wanted: ProvisionedUser, *, role: str, actor: Actor) -> UserRow:
        """A new user, without a password (they sign in through the provider); audited `user.provisioned`."""
        _check_provisioner(actor)
        if not is_role(role):
            raise UserError(f"Unknown role {role!r}")
        row = UserRow(
            username=_check_username(wanted.username),
            password_hash=None,
            role=role,
            groups=None,
            disabled=not wanted.active,
            created_at=utcnow(),
            email=check_email(wanted.email) if wanted.email else None,
            external_id=wanted.external_id,
            scim_profile=dict(wanted.profile) if wanted.profile else None,
        )
        try:
            async with self.transaction() as tx:
                tx.session.add(row)
                details = {"role": role, "external_id": wanted.external_id, "active": wanted.active, **SOURCE}
                tx.audit(actor.id, "user.provisioned", "user", row.username, details=details)
        except IntegrityError:
            raise Conflict(f"A user with userName {row.username!r}, this externalId or this e-mail exists") from None
        return row

    async def replace_user(self, user_id: int, wanted: ProvisionedUser, *, actor: Actor) -> UserRow:
        """Make a user what the provider says (PUT, or an applied PATCH); deactivate or reactivate on `active`."""
        _check_provisioner(actor)
        username = _check_username(wanted.username)
        email = check_email(wanted.email) if wanted.email else None
        self.verified_tokens.clear()
        try:
            async with self.transaction() as tx:
                row = await _user_row(tx.session, user_id)
                if username != row.username:
                    raise UserError("userName cannot change: the audit log and past decisions name the user by it")
                now = utcnow()
                changed = {
                    key: value
                    for key, value in {
                        "email": email,
                        "external_id": wanted.external_id,
                        "scim_profile": dict(wanted.profile) if wanted.profile else None,
                    }.items()
                    if getattr(row, key) != value
                }
                for key, value in changed.items():
                    setattr(row, key, value)
                if changed:
                    shown = {key: value for key, value in changed.items() if key != "scim_profile"}
                    tx.audit(actor.id, "user.reprovisioned", "user", username, details={**shown, **SOURCE})
                if wanted.active and row.disabled:
                    row.disabled = False
                    tx.audit(actor.id, "user.reactivated", "user", username, details=dict(SOURCE))
                elif not wanted.active and not row.disabled:
                    row.disabled = True
                    details = await take_away(tx, row, now)
                    tx.audit(actor.id, "user.deactivated", "user", username, details={**details, **SOURCE})
                await tx.session.flush()
        except IntegrityError:
            raise Conflict("Another user has this externalId or e-mail") from None
        finally:
            self.verified_tokens.clear()
        return row

    async def delete_provisioned_user(self, user_id: int, *, actor: Actor) -> None:
        """Take everything away from the user (as deactivating does), then remove them; audited `user.deleted`."""
        _check_provisioner(actor)
        try:
            async with self.transaction() as tx:
                row = await _user_row(tx.session, user_id)
                details = await take_away(tx, row, utcnow()) if not row.disabled else {}
                await tx.session.delete(row)
                tx.audit(actor.id, "user.deleted", "user", row.username, details={**details, **SOURCE})
        finally:
            self.verified_tokens.clear()

    # --- groups: a name in users' `groups` lists, and a row naming it ---

    async def scim_group(self, group_id: int) -> tuple[ScimGroupRow, list[UserRow]]:
        """A provisioned group and its members."""
        async with self.db.read() as session:
            group = await session.scalar(select(ScimGroupRow).where(ScimGroupRow.id == group_id))
            if group is None:
                raise NotFound(f"No group {group_id}")
            return group, await _members(session, group.name)

    async def scim_groups(
        self, *, name: str | None = None, external_id: str | None = None
    ) -> list[tuple[ScimGroupRow, list[UserRow]]]:
        """Provisioned groups (with a name or an `externalId`: just that one) with their members."""
        query = select(ScimGroupRow).order_by(ScimGroupRow.id)
        if name is not None:
            query = query.where(ScimGroupRow.name == name)
        if external_id is not None:
            query = query.where(ScimGroupRow.external_id == external_id)
        async with self.db.read() as session:
            groups = list((await session.scalars(query)).all())
            return [(group, await _members(session, group.name)) for group in groups]

    async def provision_group(
        self, name: str, *, external_id: str | None, members: Iterable[int], actor: Actor
    ) -> ScimGroupRow:
        """A new group named `name` (the name routing rules use) with `members` (user ids)."""
        _check_provisioner(actor)
        (name,) = check_groups([name]) or [""]
        if not name:
            raise UserError("displayName cannot be empty")
        row = ScimGroupRow(name=name, external_id=external_id, created_at=utcnow())
        try:
            async with self.transaction() as tx:
                tx.session.add(row)
                await tx.session.flush()
                tx.audit(actor.id, "group.provisioned", "group", name, details={"external_id": external_id, **SOURCE})
                await _set_members(tx, name, set(members), actor)
        except IntegrityError:
            raise Conflict(f"A group named {name!r} or with this externalId exists") from None
        finally:
            self.verified_tokens.clear()
        return row

    async def replace_group(
        self, group_id: int, name: str, *, external_id: str | None, members: Iterable[int], actor: Actor
    ) -> ScimGroupRow:
        """Make a group's members exactly `members`; each user whose groups change gets `user.groups_changed`."""
        _check_provisioner(actor)
        try:
            async with self.transaction() as tx:
                row = await tx.session.scalar(select(ScimGroupRow).where(ScimGroupRow.id == group_id).with_for_update())
                if row is None:
                    raise NotFound(f"No group {group_id}")
                if name != row.name:
                    raise UserError("displayName cannot change: routing rules name the group by it")
                row.external_id = external_id
                await _set_members(tx, row.name, set(members), actor)
        except IntegrityError:
            raise Conflict("Another group has this externalId") from None
        finally:
            self.verified_tokens.clear()
        return row

    async def delete_group(self, group_id: int, *, actor: Actor) -> None:
        """Remove a provisioned group and take it from every member."""
        _check_provisioner(actor)
        try:
            async with self.transaction() as tx:
                row = await tx.session.scalar(select(ScimGroupRow).where(ScimGroupRow.id == group_id).with_for_update())
                if row is None:
                    raise NotFound(f"No group {group_id}")
                await _set_members(tx, row.name, set(), actor)
                await tx.session.execute(delete(ScimGroupRow).where(ScimGroupRow.id == group_id))
                tx.audit(actor.id, "group.deleted", "group", row.name, details=dict(SOURCE))
        finally:
            self.verified_tokens.clear()


async def _members(session: AsyncSession, name: str) -> list[UserRow]:
    """Users whose `groups` list holds `name` (read in Python: the JSON list is the same on both databases)."""
    users = (await session.scalars(select(UserRow).where(UserRow.groups.is_not(None)).order_by(UserRow.id))).all()
    return [user for user in users if name in (user.groups or ())]


async def _set_members(tx: Transaction[AsyncSession], name: str, members: set[int], actor: Actor) -> None:
    """Add `name` to the groups of `members` and take it from everyone else's; one audit event per user changed."""
    users = (await tx.session.scalars(select(UserRow).order_by(UserRow.id).with_for_update())).all()
    unknown = members - {user.id for user in users}
    if unknown:
        raise UserError(f"No user {min(unknown)} to make a member of {name!r}")
    for user in users:
        previous = sorted(user.groups or ())
        wanted = sorted(set(previous) | {name}) if user.id in members else [g for g in previous if g != name]
        if wanted != previous:
            user.groups = wanted or None
            details = {"groups": wanted, "previous": previous, **SOURCE}
            tx.audit(actor.id, "user.groups_changed", "user", user.username, details=details)
