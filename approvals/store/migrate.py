"""Run the alembic migrations from code: `approvals db upgrade`, the tests and the demo use this.

The migration scripts live in the repository's `migrations/` folder; a wheel carries a copy
as `approvals/_migrations`.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from ..exceptions import UserError
from .backends.database import normalize_url

__all__ = ("alembic_config", "current_revision", "head_revision", "upgrade")

_PACKAGE = Path(__file__).resolve().parent.parent


def _script_location() -> Path:
    # An installed wheel's own copy first: next to an installed package, `migrations/` could be anyone's.
    for candidate in (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise UserError("The migration scripts are missing: reinstall agent-approvals")


def alembic_config(url: str) -> Config:
    """An alembic configuration for the database at `url`."""
    config = Config()
    config.set_main_option("script_location", str(_script_location()))
    config.set_main_option(
        "sqlalchemy.url", str(normalize_url(url, sync=True).render_as_string(hide_password=False)).replace("%", "%%")
    )
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database's tables up to `revision` (the latest by default)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Step the database's tables back to `revision` ('base' removes them all)."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite:///unused.db")).get_current_head()


def current_revision(url: str) -> str | None:
    """The revision the database is at; None for an empty database."""
    engine = create_engine(normalize_url(url, sync=True), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
