"""How every page answers htmx and plain forms alike: a fragment for htmx, the whole page or a 303 otherwise.

A request from htmx (`HX-Request`) gets the named block of the widget it changed; any other
gets the whole page, or a redirect after a form post (post-redirect-get), so every action
works without JavaScript. The answer depends on `HX-Request`, so it says so (`Vary`).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from ..templating import render

__all__ = ("is_htmx", "render_page", "see_other")


def is_htmx(request: Request) -> bool:
    """An htmx request for a fragment (a history restore wants the whole page)."""
    return bool(request.headers.get("hx-request")) and not request.headers.get("hx-history-restore-request")


def render_page(
    request: Request, template: str, context: dict[str, Any], *, block: str | None = None, status: int = 200
) -> Response:
    """The whole page, or `block` alone for htmx; the answer depends on HX-Request, so say so."""
    response = render(request, template, context, block=block if is_htmx(request) else None, status=status)
    response.headers["Vary"] = "HX-Request"
    return response


def see_other(url: str) -> Response:
    """Back to a page after a form post without htmx (post-redirect-get)."""
    return RedirectResponse(url, status_code=303, headers={"Vary": "HX-Request"})
