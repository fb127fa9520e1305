"""Single-use decision links in e-mails: one call, one way, one recipient, the arguments the mail showed.

A link's token is in the mail only; the table keeps its SHA-256, so a copy of the database
decides nothing. A link works until `expires_at` (never past the call's own expiry) and
once: `claim_email_link` marks it used with one conditional UPDATE … RETURNING, so of two
clicks racing (a reviewer's double submit, two devices) exactly one gets the link, on
SQLite and PostgreSQL alike. Looking a link up (`email_link`) changes nothing: mail
scanners open every link they see.
"""

from __future__ import annotations

import datetime as dt
import enum
import secrets
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select, update

from ..security import hash_token
from ._base import StoreBase
from .models import EmailLinkRow
from .run_plan import utcnow

__all__ = ("EmailLinkOps", "EmailLinkTokens", "LinkProblem", "LinkAction", "link_problem")

LinkAction = Literal["approve", "deny"]


class LinkProblem(enum.Enum):
    """Why a link decides nothing."""

    UNKNOWN = "unknown"
    """No link has this token (mistyped, cut short, or the call is gone)."""
    USED = "used"
    EXPIRED = "expired"


@dataclass(frozen=True)
class EmailLinkTokens:
    """The tokens of one recipient's links for one call: they go into the mail, and nowhere else."""

    approve: str
    deny: str


def link_problem(link: EmailLinkRow | None, now: dt.datetime) -> LinkProblem | None:
    """Why `link` (as looked up) would not decide anything now; None when it would."""
    if link is None:
        return LinkProblem.UNKNOWN
    if link.used_at is not None:
        return LinkProblem.USED
    if link.expires_at <= now:
        return LinkProblem.EXPIRED
    return None


class EmailLinkOps(StoreBase):
    """The `email_links` table."""

    async def create_email_links(
        self, call_id: str, username: str, args_digest: str, *, expires_at: dt.datetime
    ) -> EmailLinkTokens:
        """An approve and a deny link for `username` on `call_id`, bound to `args_digest`; their tokens."""
        tokens = EmailLinkTokens(approve=secrets.token_urlsafe(32), deny=secrets.token_urlsafe(32))
        now = utcnow()
        rows = [
            EmailLinkRow(
                token_hash=hash_token(token),
                call_id=call_id,
                username=username,
                action=action,
                args_digest=args_digest,
                expires_at=expires_at,
                used_at=None,
                created_at=now,
            )
            for action, token in (("approve", tokens.approve), ("deny", tokens.deny))
        ]
        async with self.db.write() as session:
            session.add_all(rows)
        return tokens

    async def email_link(self, token: str) -> EmailLinkRow | None:
        """The link with this token, used or not; changes nothing."""
        async with self.db.read() as session:
            return await session.scalar(select(EmailLinkRow).where(EmailLinkRow.token_hash == hash_token(token)))

    async def claim_email_link(self, token: str) -> EmailLinkRow | LinkProblem:
        """Mark the link used, if it is unused and unexpired, in one statement; the link, or why not.

        Exactly one of any number of concurrent claims of a link gets it.
        """
        now = utcnow()
        key = hash_token(token)
        claim = (
            update(EmailLinkRow)
            .where(EmailLinkRow.token_hash == key, EmailLinkRow.used_at.is_(None), EmailLinkRow.expires_at > now)
            .values(used_at=now)
            .returning(EmailLinkRow)
        )
        async with self.db.write() as session:
            claimed = (await session.scalars(claim)).one_or_none()
        if claimed is not None:
            return claimed
        return link_problem(await self.email_link(token), now) or LinkProblem.USED  # used in between

    async def email_links_of(self, call_id: str) -> list[EmailLinkRow]:
        """Every link made for a call, oldest first (for tests and support)."""
        query = select(EmailLinkRow).where(EmailLinkRow.call_id == call_id).order_by(EmailLinkRow.created_at)
        async with self.db.read() as session:
            return list((await session.scalars(query)).all())
