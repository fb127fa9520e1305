"""The versioned SQL of PostgreSQL's hot path: which file, which function names, its statements.

The function bodies live in `sql/hot_path_v{N}.sql`, the one copy of each version. A
version's file holds the functions that version changed; each function is called by the
name of the version that last changed it (`FUNCTION_VERSIONS`). Migrations install each
version, and older versions' functions stay for workers of a previous release until a
later migration drops them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources

__all__ = (
    "FUNCTIONS",
    "install",
    "FUNCTION_VERSIONS",
    "HOT_PATH_VERSION",
    "function_name",
    "hot_path_sha256",
    "hot_path_statements",
)

FUNCTION_VERSIONS = {
    "event_content": 2,
    "audit_head": 2,
    "audit_append": 2,
    "run_write": 2,
    "stale_lease": 2,
    "claim": 3,
}
"""The version of each function this code calls."""
FUNCTIONS = tuple(FUNCTION_VERSIONS)
HOT_PATH_VERSION = max(FUNCTION_VERSIONS.values())
"""The newest version; its migration must have run before this code starts."""


def function_name(function: str, version: int | None = None) -> str:
    """`approvals_claim_v3` for `claim`: the name a function has in the database (at `version`, or the current)."""
    return f"approvals_{function}_v{version or FUNCTION_VERSIONS[function]}"


def _text(version: int) -> str:
    return (resources.files("approvals.store") / "sql" / f"hot_path_v{version}.sql").read_text(encoding="utf-8")


def hot_path_sha256(version: int = HOT_PATH_VERSION) -> str:
    """The file's digest, which its migration records so a released version is never edited in place."""
    return hashlib.sha256(_text(version).encode()).hexdigest()


def hot_path_statements(version: int = HOT_PATH_VERSION) -> list[str]:
    """The file's `CREATE FUNCTION` statements, one each (they are separated by lines holding only `;`)."""
    chunks = _text(version).split("\n;\n")
    return [chunk.strip() for chunk in chunks if "CREATE FUNCTION" in chunk]


def install(execute: Callable[[str], object], version: int, sha256: str) -> None:
    """A migration's upgrade: create version `version`'s functions, refusing a file edited since its release."""
    if hot_path_sha256(version) != sha256:
        raise RuntimeError(f"hot_path_v{version}.sql differs from the released file: put changes in a new version")
    for statement in hot_path_statements(version):
        execute(statement)
