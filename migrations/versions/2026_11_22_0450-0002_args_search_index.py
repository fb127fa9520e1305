"""Trigram index for searching call arguments on PostgreSQL.

The inbox's text search runs `CAST(args AS VARCHAR) ILIKE '%...%'`; without an index that
scans every call. pg_trgm is a trusted extension (PostgreSQL 13+), so the database owner
can create it. SQLite is left as it is. The index is not declared on the models (it is
PostgreSQL-only and expression-based); `approvals.store.models.include_in_autogenerate`
keeps alembic's comparison from proposing to drop it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:50:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_tool_calls_args_trgm "
        "ON tool_calls USING gin ((CAST(args AS VARCHAR)) gin_trgm_ops)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS ix_tool_calls_args_trgm")
