"""What every SCIM list and lookup reads from a request: the page asked for, the base URL, a resource id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from scim2_models import InvalidValueException, NotFoundException, Resource, ResponseParameters

__all__ = ("MAX_PAGE", "base_url", "page", "returned", "row_id")

MAX_PAGE = 200
"""The most resources one list answer holds (`ServiceProviderConfig.filter.maxResults`)."""


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def page(query: Mapping[str, str]) -> tuple[int, int]:
    """`startIndex` (1-based, at least 1) and `count` (0 to `MAX_PAGE`), as RFC 7644 §3.4.2.4 reads them."""
    try:
        start = max(1, int(query.get("startIndex", "1")))
        count = min(MAX_PAGE, max(0, int(query.get("count", str(MAX_PAGE)))))
    except ValueError:
        raise InvalidValueException(detail="startIndex and count must be integers") from None
    return start, count


def row_id(text: str, kind: str) -> int:
    """The row id a SCIM id names; an id that is not one of ours is simply not found."""
    if not text.isdigit() or len(text) > 18:
        raise NotFoundException(detail=f"No {kind} {text!r}")
    return int(text)


def returned(request: Request, model: type[Resource[Any]]) -> ResponseParameters[Any] | None:
    """`attributes` / `excludedAttributes` of the query (RFC 7644 §3.4.2.5), checked against `model` by scim2-models."""
    query = request.query_params
    asked = {key: query[key] for key in ("attributes", "excludedAttributes") if key in query}
    return ResponseParameters[model].model_validate(asked) if asked else None  # type: ignore[valid-type]
