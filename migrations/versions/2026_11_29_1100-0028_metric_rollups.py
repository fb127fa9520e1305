"""Metrics that stay cheap (issue 41): deltas written by triggers, rollups a scrape folds them into.

`metric_deltas` gets a row for every change to a figure `/metrics` reports, from triggers on
tool_calls, decisions, runs and audit_events (approvals/store/metric_schema.py, version 1);
`metric_rollups` holds the running sums a scrape reads; `metric_open_resumes` the resumes not
settled yet; `metric_folds` the one row a fold locks. The upgrade installs the triggers, then
backfills the rollups from the rows and events already there, in the same transaction, so an
upgraded database reports the figures it reported before (at 1 000 000 runs, seconds).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from approvals.store.metric_schema import drop_triggers, install

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "metric_deltas",
        sa.Column("id", ROW_ID, autoincrement=True, primary_key=True),
        sa.Column("metric", sa.String(length=20), nullable=False),
        sa.Column("key1", sa.String(length=200), nullable=True),
        sa.Column("key2", sa.String(length=200), nullable=True),
        sa.Column("key3", sa.String(length=200), nullable=True),
        sa.Column("amount", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "metric_rollups",
        sa.Column("metric", sa.String(length=20), nullable=False),
        sa.Column("key1", sa.String(length=200), nullable=False),
        sa.Column("key2", sa.String(length=200), nullable=False),
        sa.Column("key3", sa.String(length=200), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "key1", "key2", "key3", "bucket", name="pk_metric_rollups"),
    )
    op.create_table(
        "metric_open_resumes",
        sa.Column("run_id", sa.String(length=32), primary_key=True),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=False),
    )
    folds = op.create_table(
        "metric_folds",
        sa.Column("id", sa.Integer(), autoincrement=False, primary_key=True),
        sa.Column("deltas", sa.BigInteger(), nullable=False),
        sa.Column("folded_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.bulk_insert(folds, [{"id": 1, "deltas": 0, "folded_at": None}])
    bind = op.get_bind()
    install(bind, bind.dialect.name)


def downgrade() -> None:
    drop_triggers(op.execute, op.get_bind().dialect.name)
    op.drop_table("metric_folds")
    op.drop_table("metric_open_resumes")
    op.drop_table("metric_rollups")
    op.drop_table("metric_deltas")
