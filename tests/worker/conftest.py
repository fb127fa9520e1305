"""The worker's tests run on SQLite and PostgreSQL, with the store tests' databases."""

from __future__ import annotations

from ..store.conftest import db_url, postgres_url, sqlite_template, store  # noqa: F401 - fixtures shared with the store tests
