"""Who may talk SCIM: a bearer token carrying the `scim` scope, and nobody else (not an admin's browser session).

A provider holds the token; a session cookie could be ridden by a forged request, and a
token without scopes was not made for provisioning, so neither is enough.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Request
from scim2_models import ForbiddenException, InvalidSyntaxException, UnauthorizedException

from approvals.calls.actors import Actor

from ..auth import current_actor

__all__ = ("ScimActor", "read_json")

SCOPE = "scim"


async def scim_actor(request: Request) -> Actor:
    actor = await current_actor(request)  # an unknown or revoked token: a 401, answered by ScimRoute
    if actor is None or request.headers.get("authorization", "")[:7].lower() != "bearer ":
        raise UnauthorizedException(detail="SCIM needs a bearer token with the 'scim' scope")
    if actor.scopes is None or SCOPE not in actor.scopes or not actor.can("admin"):
        detail = f"{actor.id!r} may not provision: this needs an admin token with the 'scim' scope"
        raise ForbiddenException(detail=detail)
    return actor


ScimActor = Annotated[Actor, Depends(scim_actor)]


async def read_json(request: Request) -> Any:
    """The request's JSON body (its size is bounded by the hardening middleware)."""
    try:
        return json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise InvalidSyntaxException(detail="The body is not JSON") from None
