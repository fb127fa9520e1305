"""Drop ix_tool_calls_run_id: the unique (run_id, tool_call_id) constraint already serves lookups by run.

Every change of a call's status writes a new entry into each of the table's indexes, so an
index that no query needs costs every decision and every executed call a write.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 06:14:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch_op:
        batch_op.drop_index("ix_tool_calls_run_id")


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch_op:
        batch_op.create_index("ix_tool_calls_run_id", ["run_id"], unique=False)
