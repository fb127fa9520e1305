"""Logging in through the web: throttled password checks and revocable sessions (issue 14).

A failed login counts against the account and against the client address; too many within
`LoginLimits.window` lock that key for a while, longer with each lockout, and the lockout
and its end are audited. The state lives in the database, so every web process sees it.

A session is a row: the cookie carries a random id, the table its SHA-256. Logout revokes
the one session; changing a user's password, role or enabled state revokes all of theirs
(`revoke_user_sessions`, called in the same transaction as the change).
"""

from __future__ import annotations

import datetime as dt
import math
import secrets
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from ..calls.actors import SYSTEM_ACTOR_ID
from ..security import hash_token, verify_password_async
from ._base import StoreBase
from .backend import Transaction
from .models import LoginThrottleRow, UserRow, WebSessionRow
from .run_plan import utcnow

__all__ = ("LoginAttempt", "LoginLimits", "LoginOps", "revoke_user_sessions")


@dataclass(frozen=True)
class LoginLimits:
    """How many failed logins are allowed, and for how long a key is locked after them."""

    account_failures: int = 5
    """Failures for one username within `window` before it is locked."""
    address_failures: int = 20
    """Failures from one client address within `window` (any usernames) before it is locked."""
    window: dt.timedelta = dt.timedelta(minutes=15)
    first_lockout: dt.timedelta = dt.timedelta(minutes=1)
    """The first lockout; each further one (without a success in between) doubles it..."""
    longest_lockout: dt.timedelta = dt.timedelta(hours=1)
    """...up to this."""
    forget_after: dt.timedelta = dt.timedelta(days=1)
    """A key quiet this long starts over from the first lockout."""

    def lockout(self, lockouts: int) -> dt.timedelta:
        grown: dt.timedelta = self.first_lockout * 2 ** min(lockouts - 1, 20)
        return min(grown, self.longest_lockout)


@dataclass(frozen=True)
class LoginAttempt:
    """What a login attempt came to: the user, or nothing, and when locked, how long to wait."""

    user: UserRow | None
    retry_after: int | None = None
    """Seconds until the account or address may try again; set only when it is locked."""

    @property
    def locked(self) -> bool:
        return self.retry_after is not None


def _keys(username: str, address: str) -> dict[str, tuple[str, str]]:
    """Throttle key -> (audit subject type, subject id)."""
    return {
        f"account:{username[:200]}": ("account", username[:200]),
        f"address:{address[:200]}": ("address", address[:200]),
    }


async def revoke_user_sessions(session: AsyncSession, username: str, now: dt.datetime) -> int:
    """End every live session of `username`; the number ended."""
    result = await session.execute(
        update(WebSessionRow)
        .where(WebSessionRow.username == username, WebSessionRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


class LoginOps(StoreBase):
    """Password logins with throttling, and the sessions they open."""

    login_limits = LoginLimits()

    async def attempt_login(self, username: str, password: str, *, address: str) -> LoginAttempt:
        """Check a password unless the account or address is locked; count a failure, audit a lockout."""
        keys = _keys(username, address)
        now = utcnow()
        async with self.db.read() as session:
            rows = list((await session.scalars(select(LoginThrottleRow).where(LoginThrottleRow.key.in_(keys)))).all())
            user = await session.scalar(select(UserRow).where(UserRow.username == username))
        locked = [row.locked_until for row in rows if row.locked_until is not None and row.locked_until > now]
        if locked:
            return LoginAttempt(None, retry_after=max(1, math.ceil((max(locked) - now).total_seconds())))
        ok = await verify_password_async(user.password_hash if user else None, password)
        if ok and user is not None and not user.disabled:
            if rows:  # a success resets the account's count; the address keeps its own
                await self._record(keys, success=True)
            return LoginAttempt(user)
        retry_after = await self._record(keys, success=False)
        return LoginAttempt(None, retry_after=retry_after)

    async def _record(self, keys: dict[str, tuple[str, str]], *, success: bool) -> int | None:
        """Count the attempt on each key; the seconds to wait when this failure locked one."""
        limits = self.login_limits
        retry_after: int | None = None
        async with self.transaction() as tx:
            now = utcnow()
            for key, (subject_type, subject_id) in keys.items():
                row = await self._throttle_row(tx, key, now)
                if row.locked_until is not None and row.locked_until <= now:
                    row.locked_until = None
                    tx.audit(SYSTEM_ACTOR_ID, "login.unlocked", subject_type, subject_id)
                if success:
                    if subject_type == "account":
                        await tx.session.delete(row)
                    continue
                if row.locked_until is not None:
                    continue  # locked since this attempt began: it does not count twice
                if row.window_start <= now - limits.window:
                    if row.window_start <= now - limits.forget_after:
                        row.lockouts = 0
                    row.failures, row.window_start = 0, now
                row.failures += 1
                limit = limits.account_failures if subject_type == "account" else limits.address_failures
                if row.failures >= limit:
                    row.lockouts += 1
                    period = limits.lockout(row.lockouts)
                    row.failures, row.locked_until, row.window_start = 0, now + period, now + period
                    seconds = math.ceil(period.total_seconds())
                    retry_after = max(retry_after or 0, seconds)
                    tx.audit(
                        SYSTEM_ACTOR_ID,
                        "login.locked",
                        subject_type,
                        subject_id,
                        details={"failures": limit, "seconds": seconds, "until": row.locked_until.isoformat()},
                    )
        return retry_after

    async def _throttle_row(self, tx: Transaction[AsyncSession], key: str, now: dt.datetime) -> LoginThrottleRow:
        """The key's row, created if missing, locked for this transaction."""
        values = {"key": key, "failures": 0, "window_start": now, "lockouts": 0}
        await tx.session.execute(self.backend.insert(LoginThrottleRow).values(**values).on_conflict_do_nothing())
        row = await tx.session.scalar(
            select(LoginThrottleRow)
            .where(LoginThrottleRow.key == key)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        assert row is not None
        return row

    async def clear_login_throttle(self) -> None:
        """Forget every count and lockout (tests, or an operator after an attack)."""
        async with self.db.write() as session:
            await session.execute(delete(LoginThrottleRow))

    async def open_session(self, username: str, *, max_age: int) -> str:
        """A new session for `username`; returns the id for the cookie (only its hash is stored)."""
        session_id = secrets.token_urlsafe(32)
        now = utcnow()
        async with self.db.write() as session:
            # expired sessions of the same user go now, so the table does not grow without end
            await session.execute(
                delete(WebSessionRow).where(WebSessionRow.username == username, WebSessionRow.expires_at <= now)
            )
            session.add(
                WebSessionRow(
                    id_hash=hash_token(session_id),
                    username=username,
                    created_at=now,
                    expires_at=now + dt.timedelta(seconds=max_age),
                )
            )
        return session_id

    async def session_user(self, session_id: str) -> UserRow | None:
        """The enabled user of a live session, or None for an unknown, revoked or expired one."""
        async with self.db.read() as session:
            return await session.scalar(
                select(UserRow)
                .join(WebSessionRow, WebSessionRow.username == UserRow.username)
                .where(
                    WebSessionRow.id_hash == hash_token(session_id),
                    WebSessionRow.revoked_at.is_(None),
                    WebSessionRow.expires_at > utcnow(),
                    UserRow.disabled.is_(False),
                )
            )

    async def close_session(self, session_id: str) -> None:
        """Revoke one session (logout)."""
        async with self.db.write() as session:
            await session.execute(
                update(WebSessionRow)
                .where(WebSessionRow.id_hash == hash_token(session_id), WebSessionRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
