"""`Store`: one object over one database, composed of the store's aggregates.

The run and call operations (`RunLifecycle`, `CallOps`, `RuleOps`, `ConversationOps`,
`PausedRunOps`) are still its parents, as they share the policy evaluation and the run's
statements. The aggregates with nothing in common with them are parts: `store.people`
(accounts, tokens, sign-in, reviewers' identities) and `store.outbound` (channel messages,
e-mail links, follow-ups). Their methods are passed on below under the names callers know,
until the callers move to `store.people.…` and `store.outbound.…`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence

from ..calls.actors import Actor
from ..policy.follow_ups import Step
from ..policy.rules import RuleSpec
from .backends.database import Database
from .backends.notify import Notifier
from .calls import CallOps
from .conversations import ConversationOps
from .email_links import EmailLinkTokens, LinkProblem
from .follow_ups import OpenCall
from .lifecycle import RunLifecycle
from .logins import LoginAttempt, LoginLimits
from .models import ApiTokenRow, AuditEventRow, CallFollowUpRow, ChannelMessageRow, EmailLinkRow, UserRow
from .outbound import Outbound
from .paused_runs import PausedRunOps
from .people import People
from .policy_rules import RuleOps
from .reviewer_identity import _UNSET
from .token_cache import TokenCache

__all__ = ("Store",)


class Store(RunLifecycle, CallOps, RuleOps, ConversationOps, PausedRunOps):
    """All store operations over one database."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        super().__init__(db, notifier)
        self.people = People(db, self.notifier)
        self.outbound = Outbound(db, self.notifier)

    # -- People (`store.people`)
    @property
    def verified_tokens(self) -> TokenCache:
        return self.people.verified_tokens

    async def create_user(
        self, username: str, password: str | None, *, role: str, actor: Actor, groups: list[str] | None = None
    ) -> UserRow:
        return await self.people.create_user(username, password, role=role, actor=actor, groups=groups)

    async def get_user(self, username: str) -> UserRow:
        return await self.people.get_user(username)

    async def list_users(self) -> list[UserRow]:
        return await self.people.list_users()

    async def authenticate(self, username: str, password: str) -> UserRow | None:
        return await self.people.authenticate(username, password)

    async def update_user(
        self,
        username: str,
        *,
        actor: Actor,
        role: str | None = None,
        password: str | None = None,
        disabled: bool | None = None,
    ) -> None:
        return await self.people.update_user(username, actor=actor, role=role, password=password, disabled=disabled)

    async def set_user_groups(self, username: str, groups: Iterable[str], *, actor: Actor) -> UserRow:
        return await self.people.set_user_groups(username, groups, actor=actor)

    async def create_token(
        self, name: str, *, role: str, actor: Actor, scopes: list[str] | None = None, user: str | None = None
    ) -> str:
        return await self.people.create_token(name, role=role, actor=actor, scopes=scopes, user=user)

    async def token_actor(self, token: str) -> Actor | None:
        return await self.people.token_actor(token)

    async def list_tokens(self) -> list[ApiTokenRow]:
        return await self.people.list_tokens()

    async def revoke_token(self, token_id: int, *, actor: Actor) -> None:
        return await self.people.revoke_token(token_id, actor=actor)

    async def set_user_contact(
        self,
        username: str,
        *,
        actor: Actor,
        email: str | object | None = _UNSET,
        slack_user_id: str | object | None = _UNSET,
    ) -> UserRow:
        return await self.people.set_user_contact(username, actor=actor, email=email, slack_user_id=slack_user_id)

    async def user_by_email(self, email: str) -> UserRow | None:
        return await self.people.user_by_email(email)

    async def user_by_slack_id(self, slack_user_id: str) -> UserRow | None:
        return await self.people.user_by_slack_id(slack_user_id)

    async def reviewers_in(self, groups: Iterable[str] | None) -> list[UserRow]:
        return await self.people.reviewers_in(groups)

    @property
    def login_limits(self) -> LoginLimits:
        return self.people.login_limits

    async def attempt_login(self, username: str, password: str, *, address: str) -> LoginAttempt:
        return await self.people.attempt_login(username, password, address=address)

    async def clear_login_throttle(self) -> None:
        return await self.people.clear_login_throttle()

    async def open_session(self, username: str, *, max_age: int) -> str:
        return await self.people.open_session(username, max_age=max_age)

    async def session_user(self, session_id: str) -> UserRow | None:
        return await self.people.session_user(session_id)

    async def close_session(self, session_id: str) -> None:
        return await self.people.close_session(session_id)

    # -- Outbound (`store.outbound`)
    async def record_message(self, call_id: str, channel: str, destination: str, purpose: str, ref: str | None) -> None:
        return await self.outbound.record_message(call_id, channel, destination, purpose, ref)

    async def sent_messages(self, call_id: str, channel: str, *, purpose: str | None = None) -> list[ChannelMessageRow]:
        return await self.outbound.sent_messages(call_id, channel, purpose=purpose)

    async def create_email_links(
        self, call_id: str, username: str, args_digest: str, *, expires_at: dt.datetime
    ) -> EmailLinkTokens:
        return await self.outbound.create_email_links(call_id, username, args_digest, expires_at=expires_at)

    async def email_link(self, token: str) -> EmailLinkRow | None:
        return await self.outbound.email_link(token)

    async def claim_email_link(self, token: str) -> EmailLinkRow | LinkProblem:
        return await self.outbound.claim_email_link(token)

    async def email_links_of(self, call_id: str) -> list[EmailLinkRow]:
        return await self.outbound.email_links_of(call_id)

    async def follow_up_rules(self) -> Mapping[tuple[str, int], RuleSpec | None]:
        return await self.outbound.follow_up_rules()

    async def due_reminders(
        self, *, now: dt.datetime, horizon: float, rules: Collection[str] | None = None
    ) -> list[OpenCall]:
        return await self.outbound.due_reminders(now=now, horizon=horizon, rules=rules)

    async def due_escalations(
        self, *, now: dt.datetime, after: float, rules: Collection[str] | None = None
    ) -> list[OpenCall]:
        return await self.outbound.due_escalations(now=now, after=after, rules=rules)

    async def follow_up(self, call_id: str, step: Step, *, due_at: dt.datetime, groups: Sequence[str] = ()) -> bool:
        return await self.outbound.follow_up(call_id, step, due_at=due_at, groups=groups)

    async def follow_up_events(self, run_id: str) -> list[AuditEventRow]:
        return await self.outbound.follow_up_events(run_id)

    async def follow_ups_of(self, call_ids: Collection[str]) -> list[CallFollowUpRow]:
        return await self.outbound.follow_ups_of(call_ids)
