"""Audit checkpoints: signed statements of the chain's head, also written outside the database.

One row a checkpoint, numbered by `seq` (the primary key: two processes cannot both make checkpoint n).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_checkpoints",
        sa.Column("seq", sa.Integer(), autoincrement=False, primary_key=True),
        sa.Column("event_id", EVENT_ID, nullable=False),
        sa.Column("event_hash", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("statement", sa.Text(), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
    )
    op.create_index("ix_audit_checkpoints_event_id", "audit_checkpoints", ["event_id"])


def downgrade() -> None:
    op.drop_index("ix_audit_checkpoints_event_id", table_name="audit_checkpoints")
    op.drop_table("audit_checkpoints")
