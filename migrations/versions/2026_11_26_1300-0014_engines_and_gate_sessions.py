"""Runs know their engine; a gate's session is a run; a call keeps its caller's context.

`runs.engine` names the engine a run belongs to (`native` for every run stored before,
`pydantic_ai` for those whose history is in pydantic-ai's JSON), `runs.session_id` the
gate session whose calls gather in the run, `tool_calls.context` what the caller said
about a call's circumstances.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
PYDANTIC_AI_FORMAT = 1001


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("engine", sa.String(length=40), server_default="native", nullable=False))
        runs.add_column(sa.Column("session_id", sa.String(length=200), nullable=True))
    with op.batch_alter_table("tool_calls") as calls:
        calls.add_column(sa.Column("context", JSON, nullable=True))
    op.execute(
        "UPDATE runs SET engine = 'pydantic_ai' WHERE EXISTS "
        f"(SELECT 1 FROM messages WHERE messages.run_id = runs.id AND messages.format_version = {PYDANTIC_AI_FORMAT})"
    )


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as calls:
        calls.drop_column("context")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("session_id")
        runs.drop_column("engine")
