"""Server-side web sessions and login throttling (issue 14).

`web_sessions` makes a session revocable: the cookie carries a random id, the table its
hash, and logout or a password, role or enabled-state change revokes it. `login_throttle`
counts failed logins per account and per client address and holds their lockouts, so
every web process sees the same state.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_web_sessions")),
    )
    op.create_index("ix_web_sessions_username", "web_sessions", ["username"], unique=False)
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(length=220), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lockouts", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_login_throttle")),
    )


def downgrade() -> None:
    op.drop_table("login_throttle")
    op.drop_index("ix_web_sessions_username", table_name="web_sessions")
    op.drop_table("web_sessions")
