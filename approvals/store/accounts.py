"""Reviewers and API clients: users with roles, and bearer tokens stored only as hashes.

Every change is audited. The plaintext of a token exists only in the return value of
`create_token`; passwords are hashed with argon2 before they reach the store. A user's
groups say which routed calls they may approve (`approvals.calls.options`); group names
follow the rules' own pattern (`policy.rules.GROUP_NAME`), so a rule can name any group.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from ..calls.actors import SYSTEM_ACTOR_ID, TOKEN_SCOPES, Actor
from ..calls.states import ROLE_RANK, Role, is_role
from ..exceptions import Conflict, Forbidden, NotFound, UserError
from ..policy.rules import GROUP_NAME
from ..security import hash_password_async, hash_token, new_token, verify_password_async
from ._base import StoreBase
from .linked_identity import latest_identity
from .logins import revoke_user_sessions
from .models import ApiTokenRow, UserRow
from .run_plan import utcnow
from .token_cache import TokenCache

_LAST_USED_GRANULARITY = dt.timedelta(minutes=1)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _check_role(role: str) -> Role:
    if not is_role(role):
        raise UserError(f"Unknown role {role!r}: use viewer, reviewer or admin")
    return role


def check_groups(groups: Iterable[str]) -> list[str]:
    """Group names as stored: checked against the rules' pattern, without repeats, sorted."""
    cleaned = sorted({group.strip() for group in groups if group.strip()})
    bad = [group for group in cleaned if not GROUP_NAME.fullmatch(group)]
    if bad:
        raise UserError(
            f"{bad[0]!r} is not a group name: use 1 to 100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return cleaned


def _forgets_verified_tokens(
    method: Callable[Concatenate[AccountOps, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[AccountOps, _P], Coroutine[Any, Any, _R]]:
    """After `method` changed users or tokens, every token is looked up again (`token_cache`'s rule)."""

    @functools.wraps(method)
    async def forgetting(self: AccountOps, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.verified_tokens.clear()

    return forgetting


class AccountOps(StoreBase):
    """User and token operations."""

    @functools.cached_property
    def verified_tokens(self) -> TokenCache:
        """Tokens `token_actor` verified a moment ago; see `token_cache` for how stale they may be."""
        return TokenCache()

    async def create_user(
        self, username: str, password: str | None, *, role: str, actor: Actor, groups: list[str] | None = None
    ) -> UserRow:
        """Add a user; `password=None` for users who only sign in through an SSO proxy."""
        _check_role(role)
        if not username.strip():
            raise UserError("A username cannot be empty")
        if username == SYSTEM_ACTOR_ID:
            raise UserError(f"{username!r} is reserved: the audit log names work nobody asked for so")
        if not actor.can("admin"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not add users")
        if groups is not None:
            groups = check_groups(groups)
        row = UserRow(
            username=username,
            password_hash=await hash_password_async(password) if password else None,
            role=role,
            groups=groups,
            disabled=False,
            created_at=utcnow(),
        )
        try:
            async with self.transaction() as tx:
                tx.session.add(row)
                tx.audit(actor.id, "user.created", "user", username, details={"role": role, "groups": groups})
        except IntegrityError:
            raise Conflict(f"A user named {username!r} already exists") from None
        return row

    async def get_user(self, username: str) -> UserRow:
        async with self.db.read() as session:
            row = await session.scalar(select(UserRow).where(UserRow.username == username))
        if row is None:
            raise NotFound(f"No user {username!r}")
        return row

    async def list_users(self) -> list[UserRow]:
        async with self.db.read() as session:
            return list((await session.scalars(select(UserRow).order_by(UserRow.username))).all())

    async def group_names(self) -> set[str]:
        """Every group some enabled user belongs to."""
        async with self.db.read() as session:
            rows = (await session.scalars(select(UserRow.groups).where(UserRow.disabled.is_(False)))).all()
        return {group for groups in rows for group in (groups or ())}

    async def authenticate(self, username: str, password: str) -> UserRow | None:
        """The enabled user with this password, or None (no hint which part was wrong)."""
        async with self.db.read() as session:
            row = await session.scalar(select(UserRow).where(UserRow.username == username))
        ok = await verify_password_async(row.password_hash if row else None, password)
        return row if ok and row is not None and not row.disabled else None

    @_forgets_verified_tokens
    async def update_user(
        self,
        username: str,
        *,
        actor: Actor,
        role: str | None = None,
        password: str | None = None,
        disabled: bool | None = None,
    ) -> None:
        """Change a user's role, password or enabled state; any such change ends the user's sessions."""
        if not actor.can("admin"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not change users")
        values: dict[str, Any] = {}
        details: dict[str, Any] = {}
        if role is not None:
            _check_role(role)
            values["role"] = details["role"] = role
        if password is not None:
            values["password_hash"] = await hash_password_async(password)
            details["password_changed"] = True
        if disabled is not None:
            values["disabled"] = details["disabled"] = disabled
        if not values:
            return
        async with self.transaction() as tx:
            result = await tx.session.execute(update(UserRow).where(UserRow.username == username).values(**values))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise NotFound(f"No user {username!r}")
            details["sessions_ended"] = await revoke_user_sessions(tx.session, username, utcnow())
            action = "user.disabled" if disabled else "user.updated"
            tx.audit(actor.id, action, "user", username, details=details)

    @_forgets_verified_tokens
    async def set_user_groups(self, username: str, groups: Iterable[str], *, actor: Actor) -> UserRow:
        """Make a user's groups exactly `groups` (admins only); returns the user as now stored.

        Their sessions stay open: a session reads the user's groups on every request, so it
        sees the change at once. Their tokens' cached actors are forgotten for the same reason.
        """
        if not actor.can("admin"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not change users' groups")
        wanted = check_groups(groups)
        async with self.transaction() as tx:
            row = await tx.session.scalar(select(UserRow).where(UserRow.username == username).with_for_update())
            if row is None:
                raise NotFound(f"No user {username!r}")
            previous = sorted(row.groups or ())
            if previous == wanted:
                return row
            row.groups = wanted or None
            details = {"groups": wanted, "previous": previous}
            tx.audit(actor.id, "user.groups_changed", "user", username, details=details)
        return row

    async def create_token(
        self,
        name: str,
        *,
        role: str,
        actor: Actor,
        scopes: list[str] | None = None,
        user: str | None = None,
    ) -> str:
        """A new API token; the plaintext is returned once and never stored.

        With `user`, the token acts as that person (at most their role), so whatever it does
        counts as theirs: a quorum cannot count them twice, and they cannot approve a run
        they started with it. Without, it is a service identity, which may not approve.
        `scopes` limits it further (`TOKEN_SCOPES`); None allows whatever the role allows.
        """
        _check_role(role)
        if not actor.can("admin"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not create tokens")
        if scopes is not None:
            unknown = sorted(set(scopes) - set(TOKEN_SCOPES))
            if unknown:
                raise UserError(f"Unknown token scopes {unknown}: use {', '.join(TOKEN_SCOPES)}")
        if user is not None:
            await self.get_user(user)  # NotFound for someone who does not exist
        token = new_token()
        async with self.transaction() as tx:
            row = ApiTokenRow(
                name=name,
                token_hash=hash_token(token),
                role=role,
                scopes=scopes,
                username=user,
                created_by=actor.id,
                created_at=utcnow(),
            )
            tx.session.add(row)
            await tx.session.flush()
            details = {"name": name, "role": role, "scopes": scopes, "user": user}
            tx.audit(actor.id, "token.created", "token", str(row.id), details=details)
        return token

    async def token_actor(self, token: str) -> Actor | None:
        """The actor a bearer token stands for, or None for an unknown or revoked one, or one whose user
        is gone or disabled; a token verified within `TOKEN_CACHE_SECONDS` is not looked up again."""
        token_hash = hash_token(token)
        actor = self.verified_tokens.get(token_hash)
        if actor is None:
            generation = self.verified_tokens.generation
            actor = await self._look_up_token(token_hash)
            if actor is not None:
                self.verified_tokens.put(token_hash, actor, generation=generation)
        return actor

    async def _look_up_token(self, token_hash: str) -> Actor | None:
        async with self.db.read() as session:
            found = (
                await session.execute(
                    select(ApiTokenRow, UserRow)
                    .outerjoin(UserRow, UserRow.username == ApiTokenRow.username)
                    .where(ApiTokenRow.token_hash == token_hash, ApiTokenRow.revoked_at.is_(None))
                )
            ).one_or_none()
            if found is None:
                return None
            row, user = found
            identity = await latest_identity(session, user.id) if user is not None and not user.disabled else None
        now = utcnow()
        if row.last_used_at is None or now - row.last_used_at > _LAST_USED_GRANULARITY:
            # coarse on purpose: a write per request would cost every API call a write lock
            async with self.db.sessions() as session, session.begin():
                await session.execute(update(ApiTokenRow).where(ApiTokenRow.id == row.id).values(last_used_at=now))
        role: Role = row.role if is_role(row.role) else "viewer"  # a row edited by hand reads as the least
        scopes = frozenset(row.scopes) if row.scopes is not None else None
        if row.username is None:
            return Actor(id=f"token:{row.name}", role=role, scopes=scopes, person=False)
        if user is None or user.disabled:
            return None
        lower = min(role, user.role, key=lambda r: ROLE_RANK.get(r, 0))
        groups = frozenset(user.groups or ())
        return Actor(id=user.username, role=lower, groups=groups, scopes=scopes, identity=identity)

    async def list_tokens(self) -> list[ApiTokenRow]:
        async with self.db.read() as session:
            return list((await session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.id))).all())

    @_forgets_verified_tokens
    async def revoke_token(self, token_id: int, *, actor: Actor) -> None:
        if not actor.can("admin"):
            raise Forbidden(f"{actor.id!r} ({actor.role}) may not revoke tokens")
        async with self.transaction() as tx:
            result = await tx.session.execute(
                update(ApiTokenRow)
                .where(ApiTokenRow.id == token_id, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise NotFound(f"No active token {token_id}")
            tx.audit(actor.id, "token.revoked", "token", str(token_id))
