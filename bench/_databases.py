"""Throwaway PostgreSQL databases for the benchmarks: each run creates its own, migrated, and drops it."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from approvals.store.migrate import upgrade

PG_SERVER = os.environ.get("APPROVALS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
"""The server to create databases on (APPROVALS_BENCH_PG_URL)."""


def create_pg_database() -> str:
    """A new database at head revision; returns its URL."""
    name = f"approvals_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    return url


def drop_pg_database(url: str) -> None:
    """Drop a database made by `create_pg_database`, even with connections still open."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def migrated_database(kind: str) -> Iterator[str]:
    """The URL of a new migrated database, "sqlite" (a file) or "postgresql", gone when the block ends."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/approvals.db"
            upgrade(url)
            yield url
        return
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)
