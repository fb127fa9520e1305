"""PostgreSQL's SQL functions: the server's half of the audit chain, and the released files migrations install.

The hot path is SQLAlchemy Core statements that both databases run (`run_sql`,
`decision_sql`, `lifecycle`); PostgreSQL pipelines them. What it still does in functions
is extend the audit chain, as the last statement before COMMIT (`decision_sql.audit_and_wake`),
and refuse a worker's write whose guard did not hold (`approvals_require_v4`, version 4), so its
audit appends and COMMIT go in the pipeline of its statements:
`approvals_audit_head_v2` takes the chain's lock and reads its head, `approvals_audit_append_v2`
hashes and inserts an event, over the canonical JSON `approvals_event_content_v2` builds, which
a test holds to `audit.event_content`.

The function bodies live in `sql/hot_path_v{N}.sql`, released files that are never
edited: migration 0011 installs version 2, 0012 version 3, 0020 version 4, each refusing a file that
differs from the one it recorded. Migration 0015 dropped the functions that held a second
copy of the claim and of a worker's writes (`DROPPED_FUNCTIONS`); a downgrade past it
creates them again from these files.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from importlib import resources

__all__ = (
    "DROPPED_FUNCTIONS",
    "FUNCTIONS",
    "FUNCTION_VERSIONS",
    "HOT_PATH_VERSION",
    "function_name",
    "function_statement",
    "hot_path_sha256",
    "hot_path_statements",
    "install",
)

FUNCTION_VERSIONS = {
    "event_content": 2,
    "audit_head": 2,
    "audit_append": 2,
    "require": 4,
}
"""The functions this code calls, each at the version that last changed it."""
FUNCTIONS = ("event_content", "audit_head", "audit_append", "run_write", "stale_lease", "claim")
"""The functions of version 2 (`hot_path_v2.sql`), in the order it creates them: migration 0011
installs them, and its downgrade drops them in reverse."""
DROPPED_FUNCTIONS = {
    "approvals_claim_v3": "(jsonb)",
    "approvals_claim_v2": "(jsonb)",
    "approvals_run_write_v2": "(jsonb)",
    "approvals_stale_lease_v2": "(timestamptz, text, text[])",
}
"""The versioned functions migration 0015 dropped (name: argument types), callers first: the claim and
a worker's writes are statements both databases run now."""
HOT_PATH_VERSION = 4
"""The newest released file (migration 0020)."""


def function_name(function: str, version: int | None = None) -> str:
    """`approvals_audit_head_v2` for `audit_head`: the name a function has in the database (at `version`, or the one
    this code calls)."""
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


def function_statement(name: str) -> str:
    """The `CREATE FUNCTION` statement of the versioned function `name` (`approvals_claim_v3`), from its file."""
    version = int(name.rsplit("_v", 1)[1])
    [statement] = [s for s in hot_path_statements(version) if re.search(rf"CREATE FUNCTION {name}\(", s)]
    return statement


def install(execute: Callable[[str], object], version: int, sha256: str) -> None:
    """A migration's upgrade: create version `version`'s functions, refusing a file edited since its release."""
    if hot_path_sha256(version) != sha256:
        raise RuntimeError(f"hot_path_v{version}.sql differs from the released file: put changes in a new version")
    for statement in hot_path_statements(version):
        execute(statement)
