"""Errors as RFC 9457 problem details for the API, mapped from the core's exceptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
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
from approvals.store.errors import is_transient

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


RETRY_AFTER_SECONDS = 5
"""What a 503 for a database that is down for now tells callers to wait before trying again."""


@dataclass(frozen=True)
class DatabaseFailure:
    """What a request that failed on the database answers: 503 (try again) for an outage, else 500 (our bug)."""

    transient: bool
    status: int
    title: str
    detail: str


def database_failure(exc: SQLAlchemyError) -> DatabaseFailure:
    if is_transient(exc):
        detail = "The database cannot be reached right now; nothing was changed. Try again shortly."
        return DatabaseFailure(True, 503, "Database unavailable", detail)
    return DatabaseFailure(False, 500, "Database error", "The database refused the operation; it was not done.")


def database_problem(failure: DatabaseFailure) -> JSONResponse:
    response = problem(failure.status, failure.title, failure.detail)
    if failure.transient:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


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
