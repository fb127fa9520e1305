"""The JSON API under /api: runs, calls, decisions, resumes and the audit log."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from .auth import verify_csrf

router = APIRouter(prefix="/api", tags=["api"], dependencies=[Depends(verify_csrf)])
