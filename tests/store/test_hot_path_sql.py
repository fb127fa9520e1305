"""PostgreSQL's functions have one copy, a versioned file: what migrations install is that file, unedited.

Only the server's half of the audit chain is still a function; migration 0015 dropped the
rest, which repeated statements both databases run.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import psycopg
import pytest

from approvals.calls.states import CallStatus, RunStatus
from approvals.store.audit import AUDIT_LOCK_KEY
from approvals.store.hot_path_sql import (
    DROPPED_FUNCTIONS,
    FUNCTION_VERSIONS,
    HOT_PATH_VERSION,
    function_name,
    function_statement,
    hot_path_sha256,
    hot_path_statements,
)
from approvals.store.migrate import downgrade, upgrade

from .conftest import BACKENDS
from .test_migrations import empty_database

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
needs_postgres = pytest.mark.skipif("postgresql" not in BACKENDS, reason="the functions exist on PostgreSQL only")


def migration_installing(version: int) -> object:
    """The migration module whose VERSION is `version`."""
    for path in sorted(MIGRATIONS.glob("*.py")):
        if f"hot_path_v{version}.sql" in path.read_text():
            spec = importlib.util.spec_from_file_location(path.stem, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if getattr(module, "VERSION", None) == version:
                return module
    raise AssertionError(f"no migration installs hot_path_v{version}.sql")


VERSIONS = range(2, HOT_PATH_VERSION + 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_released_file_is_the_one_its_migration_recorded(version: int) -> None:
    """Edit a released version and this fails: a change belongs in a new file with new names."""
    migration = migration_installing(version)
    assert hot_path_sha256(version) == migration.SHA256  # type: ignore[attr-defined]


def defined(version: int) -> list[str]:
    return [re.search(r"CREATE FUNCTION (\w+)\(", s).group(1) for s in hot_path_statements(version)]  # type: ignore[union-attr]


def test_the_files_name_only_statuses_the_store_knows_and_its_audit_lock() -> None:
    text = "\n".join(statement for version in VERSIONS for statement in hot_path_statements(version))
    known = {*RunStatus, *CallStatus}
    named = set(re.findall(r"status\s*(?:=|<>)\s*'([a-z_]+)'", text))
    for listed in re.findall(r"status\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", text):
        named |= set(re.findall(r"'([a-z_]+)'", listed))
    assert named, "the pattern found no status: it no longer matches the file"
    assert named <= known, f"statuses the store does not know: {named - known}"
    assert re.findall(r"pg_advisory_xact_lock\((\d+)\)", text) == [str(AUDIT_LOCK_KEY)]


def test_each_function_this_code_calls_is_defined_once_in_its_version() -> None:
    every = [name for version in VERSIONS for name in defined(version)]
    assert len(every) == len(set(every)), "a name is defined twice"
    current = {function_name(f) for f in FUNCTION_VERSIONS}
    assert current <= set(every)
    assert not current & set(DROPPED_FUNCTIONS)
    assert set(DROPPED_FUNCTIONS) <= set(every)
    for version in VERSIONS:  # a version calls only functions that exist by then
        calls = set(re.findall(r"\b(approvals_\w+_v\d+)\(", "\n".join(hot_path_statements(version))))
        known = {name for older in range(2, version + 1) for name in defined(older)}
        assert calls <= known, f"version {version} calls {calls - known}"


def function_definitions(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT proname, pg_get_functiondef(oid) FROM pg_proc WHERE proname ~ %s", (r"^approvals_\w+_v\d+$",)
        ).fetchall()
    return dict(rows)


@needs_postgres
def test_migrations_install_exactly_the_file(tmp_path: Path) -> None:
    """A database built by the migrations holds the same function definitions as the file applied by itself:
    the functions this code calls at head; every released one before migration 0015 and after its downgrade."""
    with empty_database("postgresql", tmp_path) as migrated, empty_database("postgresql", tmp_path) as from_file:
        upgrade(migrated)
        upgrade(from_file, "0010")  # the tables, and no versioned function yet
        with psycopg.connect(from_file, autocommit=True) as conn:
            for version in VERSIONS:
                for statement in hot_path_statements(version):
                    conn.execute(statement.encode())
        released = function_definitions(from_file)
        assert set(released) == {name for version in VERSIONS for name in defined(version)}
        called = {function_name(f) for f in FUNCTION_VERSIONS}
        assert function_definitions(migrated) == {name: text for name, text in released.items() if name in called}
        downgrade(migrated, "0014")
        by_0014 = {name for version in range(2, 4) for name in defined(version)}  # version 4 is migration 0020's
        assert function_definitions(migrated) == {name: text for name, text in released.items() if name in by_0014}


def test_a_dropped_function_is_created_again_from_its_file() -> None:
    for name in DROPPED_FUNCTIONS:
        assert re.findall(r"CREATE FUNCTION (\w+)\(", function_statement(name)) == [name]
