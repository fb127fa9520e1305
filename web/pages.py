"""The reviewer's HTML pages: inbox, call detail, runs and the audit log."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from .auth import verify_csrf

router = APIRouter(dependencies=[Depends(verify_csrf)])
