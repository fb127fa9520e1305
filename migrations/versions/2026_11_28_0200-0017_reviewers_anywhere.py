"""Reviewers anywhere: users' e-mail and Slack identities, messages sent about calls, e-mail links, follow-ups.

`users` gains `email` and `slack_user_id` (each unique); `channel_messages` remembers each
Slack post and mail about a call (to update them once it is decided, and to send each
once); `email_links` holds the hashes of single-use decision links; `call_follow_ups`
makes each reminder and escalation happen once across processes.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("users") as users:  # SQLite adds a unique column only by rebuilding the table
        users.add_column(sa.Column("email", sa.String(length=320), nullable=True))
        users.add_column(sa.Column("slack_user_id", sa.String(length=40), nullable=True))
        users.create_unique_constraint("uq_users_email", ["email"])
        users.create_unique_constraint("uq_users_slack_user_id", ["slack_user_id"])
    op.create_table(
        "channel_messages",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("call_id", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=20), nullable=False),
        sa.Column("destination", sa.String(length=320), nullable=False),
        sa.Column("purpose", sa.String(length=20), nullable=False),
        sa.Column("ref", sa.String(length=200), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["call_id"], ["tool_calls.id"], name=op.f("fk_channel_messages_call_id_tool_calls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channel_messages")),
        sa.UniqueConstraint("call_id", "channel", "destination", "purpose", name="uq_channel_messages_once"),
    )
    op.create_table(
        "email_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("call_id", sa.String(length=32), nullable=False),
        sa.Column("username", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("args_digest", sa.String(length=64), nullable=False),
        sa.Column("expires_at", WHEN, nullable=False),
        sa.Column("used_at", WHEN, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["call_id"], ["tool_calls.id"], name=op.f("fk_email_links_call_id_tool_calls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_email_links")),
    )
    op.create_index("ix_email_links_call_id", "email_links", ["call_id"])
    op.create_table(
        "call_follow_ups",
        sa.Column("call_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("done_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["call_id"], ["tool_calls.id"], name=op.f("fk_call_follow_ups_call_id_tool_calls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("call_id", "step", name=op.f("pk_call_follow_ups")),
    )


def downgrade() -> None:
    op.drop_table("call_follow_ups")
    op.drop_index("ix_email_links_call_id", table_name="email_links")
    op.drop_table("email_links")
    op.drop_table("channel_messages")
    with op.batch_alter_table("users") as users:
        users.drop_constraint("uq_users_slack_user_id", type_="unique")
        users.drop_constraint("uq_users_email", type_="unique")
        users.drop_column("slack_user_id")
        users.drop_column("email")
