"""Audit sinks: how far each sink outside the database (syslog, a webhook) got through the signed checkpoints.

One row a sink, keyed by its configured name. The sinks' cursors through the events are rows
of `webhook_cursors`, which serves every channel of the durable deliverer; checkpoints are not
events, so a sink that cannot be asked what it holds keeps its last checkpoint here.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_sink_checkpoints",
        sa.Column("sink", sa.String(length=64), primary_key=True),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit_sink_checkpoints")
