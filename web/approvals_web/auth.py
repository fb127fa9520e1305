"""Who is asking: a session cookie (reviewers), a bearer token (services) or an SSO header.

The session cookie carries a random session id; the session itself is a row in the store, so
logout and changes to the user (password, role, disabled) end it at once (issue 14).

The actor always comes from here, never from a request body. Cookie-based requests that
change state must carry the session's CSRF token (header `x-csrftoken` or form field
`csrf_token`); bearer-token requests cannot be forged by a browser and need none.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from approvals.calls.actors import Actor, ProviderIdentity
from approvals.calls.states import Role
from approvals.exceptions import NotFound

from .context import AppContext

SESSION_USER = "user"
"""Where cookies signed before issue 14 named the user; such a cookie no longer logs anyone in."""
SESSION_ID = "sid"
SESSION_CSRF = "csrf"
SESSION_SSO = "sso"
"""An SSO session's provider, ID token (for the provider's logout) and identity (issuer, subject)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def app_context(request: Request) -> AppContext:
    context: AppContext = request.app.state.context
    return context


async def context_dependency(request: Request) -> AppContext:
    """`app_context` for `Depends`: FastAPI runs a plain `def` dependency in a worker thread, a hop per request."""
    return app_context(request)


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use."""
    token = request.session.get(SESSION_CSRF)
    if not token:
        token = secrets.token_urlsafe(32)
        request.session[SESSION_CSRF] = token
    return str(token)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def current_actor(request: Request) -> Actor | None:
    """The authenticated actor, or None; an invalid bearer token is a 401, not anonymous."""
    if hasattr(request.state, "actor"):
        cached: Actor | None = request.state.actor
        return cached
    context = app_context(request)
    actor: Actor | None = None
    token = _bearer(request)
    if token is not None:
        actor = await context.store.people.token_actor(token)
        if actor is None:
            raise HTTPException(401, "Invalid or revoked API token", headers={"WWW-Authenticate": "Bearer"})
        actor = dataclasses.replace(actor, channel="api")
    else:
        user = None
        header = context.settings.trusted_identity_header
        if header and request.headers.get(header):
            try:
                user = await context.store.people.get_user(request.headers[header])
            except NotFound:
                user = None
        elif request.session.get(SESSION_ID):
            user = await context.store.people.session_user(str(request.session[SESSION_ID]))
            if user is None:
                request.session.pop(SESSION_ID)  # logged out, revoked, expired or the user disabled
        request.session.pop(SESSION_USER, None)
        if user is not None and not user.disabled:
            actor = Actor(
                id=user.username,
                role=user.role,
                groups=frozenset(user.groups or ()),
                channel="web",
                identity=_session_identity(request),
            )
    request.state.actor = actor
    return actor


def _session_identity(request: Request) -> ProviderIdentity | None:
    """The provider identity the session was opened with (the cookie is signed: the app wrote it)."""
    sso = request.session.get(SESSION_SSO)
    if isinstance(sso, dict) and isinstance(sso.get("issuer"), str) and isinstance(sso.get("subject"), str):
        return ProviderIdentity(issuer=sso["issuer"], subject=sso["subject"])
    return None


async def verify_csrf(request: Request) -> None:
    """Refuse a state-changing, cookie-authenticated request without the session's CSRF token."""
    if request.method in SAFE_METHODS or _bearer(request) is not None:
        return
    expected = request.session.get(SESSION_CSRF)
    sent = request.headers.get("x-csrftoken")
    if sent is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        sent = str((await request.form()).get("csrf_token") or "")
    if not expected or not sent or not secrets.compare_digest(str(expected), sent):
        raise HTTPException(403, "Missing or invalid CSRF token; reload the page and try again")


class LoginRequired(Exception):
    """Raised on pages when nobody is logged in; answered with a redirect to the login page."""


def require(role: Role, *, html: bool = False, scope: str | None = None) -> object:
    """A dependency giving the actor, who must have at least `role` and, with a limited token, `scope`."""

    async def dependency(request: Request) -> Actor:
        actor = await current_actor(request)
        if actor is None:
            if html:
                raise LoginRequired()
            raise HTTPException(401, "Authentication required", headers={"WWW-Authenticate": "Bearer"})
        if not actor.can(role):
            raise HTTPException(403, f"This needs the {role} role; {actor.id} is {actor.role}")
        if scope is not None and not actor.may(scope):
            raise HTTPException(403, f"This needs a token with the {scope!r} scope; {actor.id}'s token lacks it")
        return actor

    return Depends(dependency)


ViewerAPI = Annotated[Actor, require("viewer")]
ReviewerAPI = Annotated[Actor, require("reviewer")]
AdminAPI = Annotated[Actor, require("admin")]
RunsReadAPI = Annotated[Actor, require("viewer", scope="runs:read")]
RunsWriteAPI = Annotated[Actor, require("reviewer", scope="runs:write")]
RunsAdminAPI = Annotated[Actor, require("admin", scope="runs:admin")]
CallsReadAPI = Annotated[Actor, require("viewer", scope="calls:read")]
CallsDecideAPI = Annotated[Actor, require("reviewer", scope="calls:decide")]
AuditReadAPI = Annotated[Actor, require("viewer", scope="audit:read")]
ViewerPage = Annotated[Actor, require("viewer", html=True)]
ReviewerPage = Annotated[Actor, require("reviewer", html=True)]
AdminPage = Annotated[Actor, require("admin", html=True)]
ContextDep = Annotated[AppContext, Depends(context_dependency)]
