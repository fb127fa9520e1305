"""The audit tests run on SQLite and PostgreSQL, with the store tests' databases."""

from __future__ import annotations

from ..store.conftest import anyio_backend, db_url, postgres_url, sqlite_template, store  # noqa: F401 - shared fixtures
