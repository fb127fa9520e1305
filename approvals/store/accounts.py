"""Reviewers and API clients: users with roles, and bearer tokens stored only as hashes."""

from __future__ import annotations

from ._base import StoreBase


class AccountOps(StoreBase):
    """User and token operations; every change is audited."""
