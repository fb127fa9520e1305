"""pydantic-ai conversations in our database (`approvals.engines.pydantic_ai.SQLConversationStore`).

`conversation_records` holds each conversation's record: the newest entry of its history,
its revision, usage, the deferred tool requests it waits on, and the inbox run (`run_id`)
that holds those calls. `conversation_entries` is the log of messages, each pointing at the
one before it, shared by forks and branches.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "conversation_records",
        sa.Column("conversation_id", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=True),
        sa.Column("head_id", sa.String(length=64), nullable=True),
        sa.Column("revision", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("usage", JSON, nullable=False),
        sa.Column("deferred_tool_requests", JSON, nullable=True),
        sa.Column("forked_from", sa.String(length=200), nullable=True),
        sa.Column("forked_at", sa.String(length=64), nullable=True),
        sa.Column("branches", JSON, nullable=False),
        sa.Column("format_version", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("synced_messages", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_conversation_records_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversation_records")),
    )
    op.create_index(
        "ix_conversation_records_scope_updated_at", "conversation_records", ["scope", "updated_at"], unique=False
    )
    op.create_index("ix_conversation_records_updated_at", "conversation_records", ["updated_at"], unique=False)
    op.create_table(
        "conversation_entries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("message", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_entries")),
    )
    op.create_index("ix_conversation_entries_parent_id", "conversation_entries", ["parent_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_conversation_entries_parent_id", table_name="conversation_entries")
    op.drop_table("conversation_entries")
    op.drop_index("ix_conversation_records_updated_at", table_name="conversation_records")
    op.drop_index("ix_conversation_records_scope_updated_at", table_name="conversation_records")
    op.drop_table("conversation_records")
