"""Run states: the one document a `SNAPSHOT` engine (LangGraph, OpenAI Agents, LlamaIndex) resumes from.

One row a run, replaced at each pause or end in the transaction that stores the turn's
messages and calls; removed with its run.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "run_states",
        sa.Column("run_id", sa.String(length=32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_states")
