"""Who acts, and what a token may do: the facts every rule about people is written in.

An `Actor` comes from authentication (a session, a token, the system), never from a request
body. The store, the rules in `calls.options`, the policy and the web layer all read it; it
lives here, apart from any of them, so that each can import it without the others (and the
CLI can name the token scopes without loading the store).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .states import ROLE_RANK, Role

__all__ = ("SYSTEM", "SYSTEM_ACTOR_ID", "TOKEN_SCOPES", "Actor", "ProviderIdentity")

SYSTEM_ACTOR_ID = "system"
"""Who acts when nobody asked: expiry, crash recovery, a run becoming ready."""


@dataclass(frozen=True)
class ProviderIdentity:
    """Who an OpenID provider says a person is: its issuer and their subject there, for good."""

    issuer: str
    subject: str

    def as_details(self) -> dict[str, str]:
        """How an audit event records it."""
        return {"issuer": self.issuer, "subject": self.subject}


@dataclass(frozen=True)
class Actor:
    """Who is acting: a logged-in person, an API client or the system; from authentication, never a request body."""

    id: str
    role: Role
    groups: frozenset[str] = field(default_factory=frozenset)
    scopes: frozenset[str] | None = None
    """What a token may do (`TOKEN_SCOPES`); None: whatever the role allows."""
    person: bool = True
    """False for a service token: it belongs to nobody, so its approval would count for nobody."""
    channel: str | None = None
    """Where the actor decides from (`web`, `api`, `slack`, `email`): recorded with a decision for the metrics."""
    identity: ProviderIdentity | None = None
    """The provider identity behind a person who signs in through one: recorded with their decisions."""

    def can(self, role: Role) -> bool:
        """True when the actor's role is at least `role`."""
        return ROLE_RANK[self.role] >= ROLE_RANK[role]

    def may(self, scope: str) -> bool:
        """True when the actor's token (if any) carries `scope`."""
        return self.scopes is None or scope in self.scopes


TOKEN_SCOPES = (
    "runs:read",
    "runs:write",
    "runs:admin",
    "calls:read",
    "calls:decide",
    "calls:ask",
    "audit:read",
    "rules:read",
    "rules:write",
    "metrics:read",
    "scim",
)
"""What a token can be limited to; each API route needs one of them besides its role."""

SYSTEM = Actor(id=SYSTEM_ACTOR_ID, role="admin")
"""The actor for work nobody asked for: expiry, crash recovery."""
