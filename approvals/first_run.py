"""What a fresh installation needs: a database that does not depend on the current folder, and a first admin.

With no `--database-url`, `APPROVALS_DATABASE_URL` or config file saying otherwise, every
`approvals` command uses one SQLite file per user: `$XDG_DATA_HOME/approvals/approvals.db`
(`~/.local/share/approvals/approvals.db` by default), so `approvals serve` in one folder and
`approvals tokens create` in another share it. `serve`, `worker`, `db upgrade` and `demo` create
and migrate it (its folder too); every other command refuses a SQLite file that is missing or
has no tables, in one line saying what to run, and leaves no empty file behind.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .store.backends.database import sqlite_file

__all__ = (
    "DATABASE_FILE",
    "data_dir",
    "default_database_url",
    "first_admin_command",
    "missing_database",
    "prepare_database",
    "schema_hint",
    "shown_url",
    "sqlite_file",
)

DATABASE_FILE = "approvals.db"
_CREATE_IT = "start `approvals serve` (it creates and migrates it) or run `approvals db upgrade`"


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME/approvals`, else `~/.local/share/approvals` (a relative XDG_DATA_HOME is ignored)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME", "")
    if not base or not os.path.isabs(base):
        home = environ.get("HOME") or str(Path.home())
        base = os.path.join(home, ".local", "share")
    return Path(base) / "approvals"


def default_database_url() -> str:
    """The per-user SQLite database: `sqlite:////home/me/.local/share/approvals/approvals.db`."""
    return f"sqlite:///{data_dir() / DATABASE_FILE}"


def prepare_database(url: str) -> None:
    """Create the folder of a SQLite file about to be created (the per-user data directory on first use)."""
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def missing_database(url: str, *, tables: bool = True) -> str | None:
    """Why a command that must not create the database cannot use it: a SQLite file that is missing, or has no
    tables (with `tables`).

    None when it is there (with its tables), and for PostgreSQL (`schema_hint` helps with its errors).
    Nothing is created: the file is opened only if it exists, and only read.
    """
    path = sqlite_file(url)
    if path is None:
        return None
    if not path.is_file():
        return f"No database at {path}: {_CREATE_IT}"
    if not tables:
        return None
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=10)
    except sqlite3.Error as exc:
        return f"Cannot open the database at {path}: {exc}"
    try:
        migrated = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        ).fetchone()
        if migrated is not None:
            migrated = connection.execute("SELECT 1 FROM alembic_version").fetchone()
    except sqlite3.Error as exc:
        return f"Cannot read the database at {path}: {exc}"
    finally:
        connection.close()
    if migrated is None:
        return f"The database at {path} has no tables yet: run `approvals db upgrade` (or start `approvals serve`)"
    return None


def schema_hint(problem: str) -> str:
    """What to add to a database error that says a table is missing (a database nobody migrated)."""
    lowered = problem.lower()
    if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
        return " (run `approvals db upgrade`)"
    return ""


def shown_url(url: str) -> str:
    """The database URL as written, with any password hidden: for the console."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid>"


def first_admin_command(database_url: str | None = None, config: Path | None = None) -> str:
    """The command that adds the first admin, with the same `--database-url` or `--config` serve was given."""
    command = "approvals users add <you> --role admin"
    if config is not None:
        command += f" --config {config}"
    if database_url:
        command += f" --database-url '{shown_url(database_url)}'"  # no password on the console
    return command
