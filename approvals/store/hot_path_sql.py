"""The versioned SQL of PostgreSQL's hot path: which file, which function names, its statements.

The function bodies live in `sql/hot_path_v{N}.sql`, the one copy; a migration installs
each version and `_pg` calls the current one's functions by name.
"""

from __future__ import annotations

import hashlib
from importlib import resources

__all__ = ("HOT_PATH_VERSION", "function_name", "hot_path_sha256", "hot_path_statements")

HOT_PATH_VERSION = 2
"""The version this code calls; a database may also hold older ones for workers not yet upgraded."""
FUNCTIONS = ("event_content", "audit_head", "audit_append", "run_write", "stale_lease", "claim")


def function_name(function: str, version: int = HOT_PATH_VERSION) -> str:
    """`approvals_claim_v2` for `claim`: the name a version's function has in the database."""
    return f"approvals_{function}_v{version}"


def _text(version: int) -> str:
    return (resources.files("approvals.store") / "sql" / f"hot_path_v{version}.sql").read_text(encoding="utf-8")


def hot_path_sha256(version: int = HOT_PATH_VERSION) -> str:
    """The file's digest, which its migration records so a released version is never edited in place."""
    return hashlib.sha256(_text(version).encode()).hexdigest()


def hot_path_statements(version: int = HOT_PATH_VERSION) -> list[str]:
    """The file's `CREATE FUNCTION` statements, one each (they are separated by lines holding only `;`)."""
    chunks = _text(version).split("\n;\n")
    return [chunk.strip() for chunk in chunks if "CREATE FUNCTION" in chunk]
