"""Standing rules: their versions, and which rule decided or routed each call.

`policy_rules` keeps every version of every rule (a change appends a row); `tool_calls`
gains the rule and version that decided the call or said who decides it, and the groups
whose members may approve it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "policy_rules",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("definition", JSON, nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("author_groups", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_rules")),
        sa.UniqueConstraint("name", "version", name="uq_policy_rules_name_version"),
    )
    # nullable columns: a plain ADD COLUMN on both databases, no table rebuild
    op.add_column("tool_calls", sa.Column("rule_name", sa.String(length=100), nullable=True))
    op.add_column("tool_calls", sa.Column("rule_version", sa.Integer(), nullable=True))
    op.add_column("tool_calls", sa.Column("approver_groups", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as calls:
        calls.drop_column("approver_groups")
        calls.drop_column("rule_version")
        calls.drop_column("rule_name")
    op.drop_table("policy_rules")
