"""Errors as RFC 9457 problem details for the API, mapped from the core's exceptions."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from approvals.exceptions import (
    ApprovalsError,
    Conflict,
    Forbidden,
    InvalidArguments,
    InvalidDeferredResults,
    InvalidEdit,
    NotFound,
    UserError,
)

PROBLEM_JSON = "application/problem+json"

_STATUS: list[tuple[type[ApprovalsError], int, str]] = [
    (NotFound, 404, "Not Found"),
    (Conflict, 409, "Conflict"),
    (Forbidden, 403, "Forbidden"),
    (InvalidEdit, 422, "Invalid edited arguments"),
    (InvalidArguments, 422, "Invalid arguments"),
    (InvalidDeferredResults, 409, "Decisions do not fit the run"),
    (UserError, 400, "Bad Request"),
]


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def status_for(exc: ApprovalsError) -> tuple[int, str]:
    for kind, status, title in _STATUS:
        if isinstance(exc, kind):
            return status, title
    return 500, "Internal Server Error"


def approvals_error_problem(exc: ApprovalsError) -> JSONResponse:
    status, title = status_for(exc)
    extra: dict[str, Any] = {}
    if isinstance(exc, InvalidArguments):
        extra["errors"] = [{"loc": loc, "msg": msg} for loc, msg in exc.errors]
    if isinstance(exc, Conflict):
        extra.update({k: v for k, v in (("status_now", exc.status), ("decided_by", exc.decided_by)) if v})
    return problem(status, title, str(exc), **extra)


async def http_exception_problem(request: Request, exc: HTTPException) -> JSONResponse:
    headers = getattr(exc, "headers", None)
    response = problem(exc.status_code, _title(exc.status_code), str(exc.detail))
    if headers:
        response.headers.update(headers)
    return response


async def validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    return problem(422, "Unprocessable Content", "The request is not valid.", errors=errors)


def _title(status: int) -> str:
    return {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 422: "Unprocessable Content"}.get(status, "Error")  # fmt: skip
