"""Logging in and out with a username and password.

The cookie carries a session id; the session is a row in the store, which logout revokes.
Failed logins are throttled per account and per client address: while either is locked
the answer is 429 with Retry-After, and the password is not even checked.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from ..auth import SESSION_CSRF, SESSION_ID, SESSION_SSO, SESSION_USER, ContextDep, app_context, csrf_token, verify_csrf
from ..local_redirect import safe_next
from ..sso.routes import provider_logout
from ..templating import render

router = APIRouter(include_in_schema=False)  # pages, not the API


def _wait_text(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{round(seconds / 60)} minutes"


@router.get("/login")
async def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", _page(request, next, None))


def _page(request: Request, next: str | None, error: str | None) -> dict[str, object]:
    """The login page's context: the password form (when allowed) and a button per SSO provider."""
    settings = app_context(request).settings
    local = settings.password_login_allowed() or request.query_params.get("local") == "1"
    return {"next": safe_next(next), "error": error, "providers": settings.oidc_providers, "passwords": local}


@router.post("/login", dependencies=[Depends(verify_csrf)])
async def login(
    request: Request,
    context: ContextDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str | None, Form()] = None,
) -> Response:
    if not context.settings.password_login_allowed(username):
        error = "Password logins are off: sign in with your identity provider."
        return render(request, "login.html", _page(request, next, error), status=403)
    address = request.client.host if request.client else "unknown"
    previous = request.session.get(SESSION_ID)
    login = await context.service.log_in(
        username,
        password,
        address=address,
        max_age=context.settings.session_max_age,
        previous=str(previous) if previous else None,
    )
    if login.retry_after is not None:
        wait = _wait_text(login.retry_after)
        error = f"Too many failed logins: logging in is locked for now. Try again in {wait}."
        response = render(request, "login.html", _page(request, next, error), status=429)
        response.headers["Retry-After"] = str(login.retry_after)
        return response
    if login.session_id is None:
        return render(request, "login.html", _page(request, next, "Wrong username or password."), status=401)
    request.session.clear()  # a fresh session (and CSRF token) for the new login
    request.session[SESSION_ID] = login.session_id
    csrf_token(request)
    return RedirectResponse(safe_next(next), status_code=303)


@router.post("/logout", dependencies=[Depends(verify_csrf)])
async def logout(request: Request, context: ContextDep) -> Response:
    session_id = request.session.pop(SESSION_ID, None)
    sso = request.session.pop(SESSION_SSO, None)
    if session_id:
        await context.service.log_out(str(session_id))  # a copy of the cookie is logged out too
    request.session.pop(SESSION_USER, None)
    request.session.pop(SESSION_CSRF, None)
    return await provider_logout(request, sso) or RedirectResponse("/login", status_code=303)
