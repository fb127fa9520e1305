"""The hot path's PostgreSQL functions, version 2, from their one copy: approvals/store/sql/hot_path_v2.sql.

Their bodies lived in migrations 0004 and 0005, unversioned, and a change replaced them
under workers still running the previous release. Now a version's functions carry it in
their names (`approvals_claim_v2`, `approvals_run_write_v2`, ...) and come from one file,
which is never edited once released: this migration records its SHA-256 and refuses a file
that differs (a test checks it too). The unversioned functions stay for workers of the
previous release during a deploy; the next release's migration drops them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 03:00:00
"""

from collections.abc import Sequence

from alembic import op

from approvals.store.hot_path_sql import FUNCTIONS, function_name, install

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERSION = 2
SHA256 = "e2dd27ca667c91e2f76389c307d331984f7411009d46c06a8dfab80ca9d9ff0a"
"""hot_path_v2.sql as released: a different file is an edit of a released version."""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        install(op.execute, VERSION, SHA256)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for function in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION IF EXISTS {function_name(function, VERSION)} CASCADE")
