"""One OpenID provider's settings, and how its claims become a user of approvals.

Groups come from the provider: `group_map` turns provider groups into approvals groups (routing),
`role_map` into roles; the highest role any of the user's groups maps to wins. A user none of
whose groups maps to a role is refused (`ProviderLogin.role` is None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, field_validator

from approvals.calls.states import ROLE_RANK, Role, is_role
from approvals.store.people.identities import ProviderLogin

__all__ = ("OidcProvider", "provider_login")


class OidcProvider(BaseModel):
    """A provider people sign in with; `name` appears in URLs (`/sso/<name>/login`)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    issuer: str
    """The issuer URL; its `/.well-known/openid-configuration` is read, and must name the same issuer."""
    client_id: str
    client_secret: str = Field(default="", repr=False)
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"])
    username_claim: str = "preferred_username"
    """The claim that names the user; one the provider controls (e-mail, UPN), since it links existing users."""
    groups_claim: str = "groups"
    group_map: dict[str, list[str]] = Field(default_factory=dict)
    """Provider group → approvals groups; `"*"` maps every group to itself (when the names are valid)."""
    role_map: dict[str, Role] = Field(default_factory=dict)
    """Provider group → role (viewer, reviewer, admin); `"*"` gives a role to everyone the provider signs in."""
    display_name: str | None = None

    @field_validator("role_map")
    @classmethod
    def _roles(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [role for role in value.values() if not is_role(role)]
        if bad:
            raise ValueError(f"unknown role {bad[0]!r} in role_map: use viewer, reviewer or admin")
        return value

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def _groups(claims: Mapping[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(item) for item in value if isinstance(item, str | int)]
    return []


def provider_login(provider: OidcProvider, issuer: str, claims: Mapping[str, Any]) -> ProviderLogin:
    """What the validated claims mean here; `UserError`-free: an unusable claim is a refusal later."""
    provider_groups = _groups(claims, provider.groups_claim)
    groups: set[str] = set()
    roles: list[Role] = []
    for group in provider_groups:
        groups.update(provider.group_map.get(group, ()))
        if "*" in provider.group_map:
            groups.add(group)
        if group in provider.role_map:
            roles.append(provider.role_map[group])
    if "*" in provider.role_map:
        roles.append(provider.role_map["*"])
    ranked = sorted(roles, key=lambda r: ROLE_RANK[r])
    role: Role | None = ranked[-1] if ranked else None
    username = str(claims.get(provider.username_claim) or "").strip()
    email = claims.get("email")
    return ProviderLogin(
        issuer=issuer,
        subject=str(claims["sub"]),
        provider=provider.name,
        username=username,
        role=role,
        groups=tuple(sorted(groups)),
        email=str(email).lower() if isinstance(email, str) and claims.get("email_verified") else None,
    )
