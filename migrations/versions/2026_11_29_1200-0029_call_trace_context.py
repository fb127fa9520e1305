"""A call's own trace context: `tool_calls.trace_context`.

The W3C context (`traceparent`, `tracestate`) of the span that requested the call, stored by
the same INSERT that stores the call, so the call's decision (on any channel, in any
process), its hand-out and its outcome become spans of the call's trace. NULL when the
process that stored the call was not tracing, and for calls stored before this revision.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from approvals.store.metric_schema import create_triggers

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("tool_calls", sa.Column("trace_context", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as calls:
        calls.drop_column("trace_context")
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":  # the batch rebuilt the table, and its metric triggers (0028) went with the old one
        create_triggers(op.execute, dialect, tables=["tool_calls"])
