"""The webhook outbox: a delivery cursor per endpoint, held by one deliverer at a time (issue 13).

The audit log already holds every event in commit order; a row here says how far one
webhook URL got through it (`last_event_id`) and which process delivers to it now
(`lease_owner` until `lease_expires_at`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 16:01:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_cursors",
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("site", sa.String(length=300), nullable=False),
        sa.Column("last_event_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", name=op.f("pk_webhook_cursors")),
    )


def downgrade() -> None:
    op.drop_table("webhook_cursors")
