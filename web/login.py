"""Logging in and out with a username and password; the session cookie carries the login."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlparse

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from .auth import SESSION_CSRF, SESSION_USER, ContextDep, csrf_token, verify_csrf
from .templating import render

router = APIRouter()


def _safe_next(target: str | None) -> str:
    """Only local paths, so the login page cannot be used to redirect elsewhere."""
    if not target:
        return "/"
    parsed = urlparse(target)
    if parsed.scheme or parsed.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


@router.get("/login")
async def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", {"next": _safe_next(next), "error": None})


@router.post("/login", dependencies=[Depends(verify_csrf)])
async def login(
    request: Request,
    context: ContextDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str | None, Form()] = None,
) -> Response:
    user = await context.store.authenticate(username, password)
    if user is None:
        return render(
            request, "login.html", {"next": _safe_next(next), "error": "Wrong username or password."}, status=401
        )
    request.session.clear()  # a fresh session (and CSRF token) for the new login
    request.session[SESSION_USER] = user.username
    csrf_token(request)
    return RedirectResponse(_safe_next(next), status_code=303)


@router.post("/logout", dependencies=[Depends(verify_csrf)])
async def logout(request: Request) -> Response:
    request.session.pop(SESSION_USER, None)
    request.session.pop(SESSION_CSRF, None)
    return RedirectResponse("/login", status_code=303)
