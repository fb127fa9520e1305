"""API tokens may belong to a user: such a token acts as that person, never as someone else.

A token without a user is a service identity: it may start runs and read, but its
approvals would be nobody's, so it may not approve (the store refuses).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("username", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("username")
