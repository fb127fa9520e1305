"""Jinja2 templates with autoescaping, rendered whole or as one named block (jinja2-fragments).

Every page template extends `base.html`; a block rendered alone is the htmx fragment, so the
same markup serves the full page and the response to its own form posts.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from jinja2_fragments.fastapi import Jinja2Blocks

from .auth import csrf_token
from .pages.views import as_text, tone, verdict_label

TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).parent / "templates"))
TEMPLATES.env.autoescape = True  # every value is escaped unless a template says otherwise


def _age(value: dt.datetime | None) -> str:
    if value is None:
        return ""
    seconds = int((dt.datetime.now(dt.UTC) - value).total_seconds())
    return _span(seconds)


def _until(value: dt.datetime | None) -> str:
    if value is None:
        return "no expiry"
    seconds = int((value - dt.datetime.now(dt.UTC)).total_seconds())
    return "expired" if seconds <= 0 else _span(seconds)


def _span(seconds: int) -> str:
    seconds = max(seconds, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


TEMPLATES.env.filters.update(
    age=_age, until=_until, pretty_json=_pretty_json, tone=tone, verdict=verdict_label, as_text=as_text
)


def render(
    request: Request, name: str, context: dict[str, Any], *, block: str | None = None, status: int = 200
) -> Response:
    """Render a template (or one of its blocks) with the common context: actor and CSRF token."""
    full = {
        "request": request,
        "csrf_token": csrf_token(request),
        "actor": getattr(request.state, "actor", None),
        **context,
    }
    if block is not None:
        response = TEMPLATES.TemplateResponse(request, name, full, block_name=block, status_code=status)
    else:
        response = TEMPLATES.TemplateResponse(request, name, full, status_code=status)
    return response
