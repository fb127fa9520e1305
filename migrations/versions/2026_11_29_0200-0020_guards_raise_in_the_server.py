"""The hot path's version 4 (approvals/store/sql/hot_path_v4.sql): a worker's guards raise in the server.

`approvals_require_v4` raises when a guard of a worker's write does not hold (it no longer
holds the run, the rules that decided its calls changed), so PostgreSQL can send the write's
statements, its audit appends and its COMMIT in one round trip: the statements after a
failed guard, COMMIT among them, are skipped, and the client rolls back.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 02:00:00
"""

from collections.abc import Sequence

from alembic import op

from approvals.store.hot_path_sql import function_name, install

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERSION = 4
SHA256 = "5bc55d8c5942d24757e16b9d81daf781363bed553e10ebbd6ec54074b76c9e08"
"""hot_path_v4.sql as released: a different file is an edit of a released version."""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        install(op.execute, VERSION, SHA256)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {function_name('require', VERSION)}(boolean, text, text, text)")
