"""Alembic environment: migrate the database named by `-x url=...` or APPROVALS_DATABASE_URL."""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import JSON, Connection, create_engine, pool

from approvals.store import normalize_url
from approvals.store.models import Base, UTCDateTime, include_in_autogenerate

config = context.config
url = (
    context.get_x_argument(as_dictionary=True).get("url")
    or config.get_main_option("sqlalchemy.url")
    or os.environ.get("APPROVALS_DATABASE_URL", "sqlite:///approvals.db")
)
sync_url = normalize_url(url, sync=True)
target_metadata = Base.metadata


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Write our column types as plain SQLAlchemy types, so revisions do not import app code."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, JSON):
        autogen_context.imports.add("from sqlalchemy.dialects import postgresql")
        return 'sa.JSON().with_variant(postgresql.JSONB(), "postgresql")'
    return False


def use_wal(connection: Connection) -> None:
    """Leave a SQLite file in WAL mode, which it keeps: the app's first connections then find it so.

    Otherwise each of them switches the file to WAL as it opens, and when several open at once
    (web requests, the worker, the webhook sender) one of them fails with "database is locked".
    """
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA journal_mode=WAL")
        connection.commit()


def run_migrations() -> None:
    options = {
        "target_metadata": target_metadata,
        "render_as_batch": sync_url.get_backend_name() == "sqlite",
        "compare_type": True,
        "render_item": render_item,
        "include_object": include_in_autogenerate,
    }
    connection = config.attributes.get("connection")
    if connection is not None:  # a caller (tests, the CLI) passed an open connection
        use_wal(connection)
        context.configure(connection=connection, **options)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(sync_url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        use_wal(connection)
        context.configure(connection=connection, **options)
        with context.begin_transaction():
            context.run_migrations()


run_migrations()
