"""Our rows as SCIM resources (scim2-models `User` and `Group`), and SCIM resources as what the store takes.

A user's SCIM `id` is their row id: it never changes, and `userName` may not either (the
audit log and past decisions name the user by it). What approvals does not use itself
(`name`, `displayName`, ...) is kept as sent in `scim_profile` and given back as it came.
"""

from __future__ import annotations

from typing import Any

from scim2_models import Context, Email, Group, GroupMember, GroupMembership, Meta, User

from approvals.service import ProvisionedGroup
from approvals.service import User as Account
from approvals.store.people.provisioning import ProvisionedUser

__all__ = ("group_resource", "provisioned", "user_resource")

_OURS = {"schemas", "id", "externalId", "meta", "userName", "active", "groups", "password"}
"""Attributes stored in columns (or never stored: `password`); the rest of a User goes to `scim_profile`."""


def _meta(kind: str, base: str, row_id: int, created: Any) -> Meta:
    return Meta(resource_type=kind, location=f"{base}/scim/v2/{kind}s/{row_id}", created=created, last_modified=created)


def user_resource(row: Account, base: str) -> User[Any]:
    """The SCIM User a row stands for, with its groups (read-only in SCIM: set through Groups)."""
    payload: dict[str, Any] = {k: v for k, v in (row.scim_profile or {}).items() if k not in _OURS}
    payload.update(
        {
            "userName": row.username,
            "active": not row.disabled,
        }
    )
    user: User[Any] = User.model_validate(payload)
    user.id = str(row.id)
    user.external_id = row.external_id
    sent = [email for email in user.emails or () if email.value]
    if not row.email:
        user.emails = None
    elif not any(str(email.value).lower() == row.email for email in sent):
        user.emails = [Email(value=row.email, primary=True)]  # set outside SCIM (`approvals users`)
    user.groups = [GroupMembership.model_validate({"display": name}) for name in row.groups or ()] or None
    user.meta = _meta("User", base, row.id, row.created_at)
    return user


def provisioned(user: User[Any]) -> ProvisionedUser:
    """What the store takes from a SCIM User: the primary (else first) e-mail, the rest kept as sent."""
    emails = user.emails or []
    primary = next((email for email in emails if email.primary), emails[0] if emails else None)
    dumped = user.model_dump(scim_ctx=Context.RESOURCE_REPLACEMENT_REQUEST)
    profile = {key: value for key, value in dumped.items() if key not in _OURS}
    return ProvisionedUser(
        username=user.user_name or "",
        external_id=user.external_id,
        active=user.active is not False,
        email=str(primary.value) if primary is not None and primary.value else None,
        profile=profile or None,
    )


def group_resource(row: ProvisionedGroup, members: list[Account], base: str) -> Group:
    group = Group(
        id=str(row.id),
        external_id=row.external_id,
        display_name=row.name,
        members=[
            GroupMember.model_validate(
                {
                    "value": str(user.id),
                    "display": user.username,
                    "type": "User",
                    "$ref": f"{base}/scim/v2/Users/{user.id}",
                }
            )
            for user in members
        ]
        or None,
    )
    group.meta = _meta("Group", base, row.id, row.created_at)
    return group
