"""Audit retention: the cuts where old events were archived to a bundle and deleted.

One row a cut (`approvals audit archive`); verification of what remains starts from the newest one.
`checkpoint_seq` is unique: two archives at the same checkpoint cannot both be recorded.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_cuts",
        sa.Column("id", sa.Integer(), autoincrement=True, primary_key=True),
        sa.Column("checkpoint_seq", sa.Integer(), nullable=False),
        sa.Column("event_id", EVENT_ID, nullable=False),
        sa.Column("event_hash", sa.String(length=64), nullable=False),
        sa.Column("first_event_id", EVENT_ID, nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("statement", sa.Text(), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
        sa.Column("before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("bundle", sa.String(length=1000), nullable=False),
        sa.Column("bundle_sha256", sa.String(length=64), nullable=False),
        sa.UniqueConstraint("checkpoint_seq", name="uq_audit_cuts_checkpoint_seq"),
    )


def downgrade() -> None:
    op.drop_table("audit_cuts")
