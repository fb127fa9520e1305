"""The alembic revisions build exactly the tables the models describe, and tear them down again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, pool

from approvals.store.db import normalize_url
from approvals.store.migrate import current_revision, downgrade, head_revision, upgrade
from approvals.store.models import Base, include_in_autogenerate

from .conftest import BACKENDS, PG_SERVER


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"approvals_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def differences(url: str) -> list[object]:
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "include_object": include_in_autogenerate}
            )
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_head_matches_the_models(empty_db_url: str) -> None:
    assert current_revision(empty_db_url) is None
    upgrade(empty_db_url)
    assert current_revision(empty_db_url) == head_revision()
    assert table_names(empty_db_url) == set(Base.metadata.tables)
    assert differences(empty_db_url) == []


def test_downgrade_base_removes_everything(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    downgrade(empty_db_url, "base")
    assert table_names(empty_db_url) == set()
    assert current_revision(empty_db_url) is None
    upgrade(empty_db_url)  # and back up again
    assert differences(empty_db_url) == []


def test_argument_search_index_exists_on_postgresql(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    engine = create_engine(normalize_url(empty_db_url, sync=True), poolclass=pool.NullPool)
    try:
        names = {index["name"] for index in inspect(engine).get_indexes("tool_calls")}
    finally:
        engine.dispose()
    assert ("ix_tool_calls_args_trgm" in names) == empty_db_url.startswith("postgresql")
