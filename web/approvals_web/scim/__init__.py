"""SCIM 2.0 provisioning (RFC 7643/7644, issue 40): an identity provider creates, changes and removes users and groups.

Resources, lists, patches and errors are scim2-models'; filters are read by scim2-filter-parser.
What a deactivation takes away, and why, is `approvals.store.people.provisioning`'s.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import discovery, groups, users

__all__ = ("router",)

router = APIRouter()
router.include_router(users.router)
router.include_router(groups.router)
router.include_router(discovery.router)
