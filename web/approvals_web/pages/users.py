"""The users page, for admins: each user's groups and how to reach them (the API is `approvals_web.api.users`).

A user's groups say which routed calls they may approve (`approvals.calls.options`): a rule
that asks `finance` lets only finance's members approve. Group names follow the rules' own
pattern, checked by the store, so the page, the API and the CLI refuse the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from approvals.exceptions import Conflict, UserError
from approvals.service import User

from ..auth import AdminPage, ContextDep, verify_csrf
from ..context import AppContext
from .htmx import is_htmx, render_page, see_other

__all__ = ("router",)

router = APIRouter(dependencies=[Depends(verify_csrf)], include_in_schema=False)


# --- the page ------------------------------------------------------------------------------


@dataclass
class UserLine:
    """One user as a row of the page, with their groups' form."""

    user: User
    groups_text: str
    """What the groups input holds: the stored groups, or what the admin typed."""
    error: str | None = None
    message: str | None = None
    email_text: str = ""
    """What the e-mail input holds: the stored address, or what the admin typed."""
    slack_text: str = ""
    contact_error: str | None = None
    contact_message: str | None = None


def _line(user: User, message: str | None = None, *, contact_message: str | None = None) -> UserLine:
    return UserLine(
        user=user,
        groups_text=", ".join(user.groups or ()),
        message=message,
        email_text=user.email or "",
        slack_text=user.slack_user_id or "",
        contact_message=contact_message,
    )


def _answer(request: Request, context: dict[str, Any], *, block: str | None = None, status: int = 200) -> Response:
    return render_page(request, "users.html", context, block=block, status=status)


@router.get("/users")
async def users_page(request: Request, actor: AdminPage, context: ContextDep) -> Response:
    lines = [_line(user) for user in await context.store.people.list_users()]
    return _answer(request, {"lines": lines})


@router.post("/users/{username}/groups")
async def set_groups(
    request: Request, username: str, actor: AdminPage, context: ContextDep, groups: Annotated[str, Form()] = ""
) -> Response:
    """Set a user's groups from a comma-separated list; a refused name comes back in the row as typed."""
    wanted = [group.strip() for group in groups.split(",")]
    try:
        user = await context.service.set_user_groups(username, wanted, actor=actor)
    except UserError as exc:
        line = UserLine(await context.store.people.get_user(username), groups, error=str(exc))
        return await _with_line(request, context, line, status=422)
    if not is_htmx(request):
        return see_other("/users")
    return await _with_line(request, context, _line(user, message="Saved."))


@router.post("/users/{username}/contact")
async def set_contact(
    request: Request,
    username: str,
    actor: AdminPage,
    context: ContextDep,
    email: Annotated[str, Form()] = "",
    slack_user_id: Annotated[str, Form()] = "",
) -> Response:
    """Set a user's e-mail and Slack member id (empty: none); a refused value comes back in the row as typed."""
    try:
        user = await context.service.set_user_contact(
            username, actor=actor, email=email.strip() or None, slack_user_id=slack_user_id.strip() or None
        )
    except (UserError, Conflict) as exc:
        current = await context.store.people.get_user(username)
        line = _line(current)
        line.email_text, line.slack_text, line.contact_error = email, slack_user_id, str(exc)
        return await _with_line(request, context, line, status=422 if isinstance(exc, UserError) else 409)
    if not is_htmx(request):
        return see_other("/users")
    return await _with_line(request, context, _line(user, contact_message="Saved."))


async def _with_line(request: Request, context: AppContext, line: UserLine, *, status: int = 200) -> Response:
    """The row alone for htmx; else the whole page with this row as it is."""
    if is_htmx(request):
        return _answer(request, {"line": line}, block="user_row", status=status)
    lines = [
        line if user.username == line.user.username else _line(user) for user in await context.store.people.list_users()
    ]
    return _answer(request, {"lines": lines}, status=status)
