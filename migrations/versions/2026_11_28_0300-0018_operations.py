"""Operations: where each decision was made, and the trace a run belongs to.

`decisions.channel` says where a reviewer decided (web, api, slack, email), for the metrics;
`runs.trace_context` keeps the W3C trace context a run started in, so a resume hours later,
in any process, continues the same trace.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # nullable columns: a plain ADD COLUMN on both databases, no table rebuild
    op.add_column("decisions", sa.Column("channel", sa.String(length=20), nullable=True))
    op.add_column("runs", sa.Column("trace_context", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("trace_context")
    with op.batch_alter_table("decisions") as decisions:
        decisions.drop_column("channel")
