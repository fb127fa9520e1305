"""`/api/users`: users, their groups and how to reach them, for admins (the page is `approvals_web.pages.users`).

Managing users through the API takes an admin's token without scope limits: groups widen
what a person may approve, so a token limited to reading runs must not change them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Path

from approvals.calls.actors import Actor

from ..auth import AdminAPI, ContextDep, verify_csrf
from .routes import EVERY_ROUTE, authenticate_writes, errors
from .schemas import Name, UserContact, UserGroups, UserList, UserOut

__all__ = ("router",)


async def user_admin(actor: AdminAPI) -> Actor:
    """An admin whose token (if any) carries no scope limits."""
    if actor.scopes is not None:
        raise HTTPException(403, f"Managing users takes an admin token without scope limits; {actor.id}'s has limits")
    return actor


UserAdminAPI = Annotated[Actor, Depends(user_admin)]
Username = Annotated[Name, Path(description="The user's name.")]

router = APIRouter(
    prefix="/api",
    tags=["users"],
    dependencies=[Depends(authenticate_writes), Depends(verify_csrf)],
    responses=errors(*EVERY_ROUTE),
)


@router.get("/users", summary="Users, their roles and groups (admin)", responses=errors(401, 403))
async def list_users(actor: UserAdminAPI, context: ContextDep) -> UserList:
    return UserList(items=[UserOut.model_validate(user) for user in await context.store.people.list_users()])


@router.put(
    "/users/{username}/groups",
    summary="Set a user's groups (admin)",
    description=(
        "The user's groups become exactly these (an empty list: none). Groups say which routed calls the user may "
        "approve; the change applies to their sessions and tokens at once, and is audited (`user.groups_changed`)."
    ),
    responses=errors(401, 403, 404, 422),
)
async def put_groups(
    username: Username, body: Annotated[UserGroups, Body()], actor: UserAdminAPI, context: ContextDep
) -> UserOut:
    return UserOut.model_validate(await context.service.set_user_groups(username, body.groups, actor=actor))


@router.put(
    "/users/{username}/contact",
    summary="Set a user's e-mail and Slack member id (admin)",
    description=(
        "Calls routed to the user are mailed to `email` (with e-mail turned on); clicks in Slack by `slack_user_id` "
        "decide as the user. A field left out stays as it is; null removes it. Each is unique to one user (409), and "
        "the change is audited (`user.contact_changed`)."
    ),
    responses=errors(401, 403, 404, 409, 422),
)
async def put_contact(
    username: Username, body: Annotated[UserContact, Body()], actor: UserAdminAPI, context: ContextDep
) -> UserOut:
    changes = body.model_dump(exclude_unset=True)
    return UserOut.model_validate(await context.service.set_user_contact(username, actor=actor, **changes))
