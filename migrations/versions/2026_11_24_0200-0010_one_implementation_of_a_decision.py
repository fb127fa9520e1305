"""A decision has one implementation, in Python, on both databases (issue 15).

`approvals_decide` (migration 0004) repeated in PL/pgSQL the rules and writes of
`approvals.store.decisions` (which calls are open, argument freshness, no approving one's
own run, the quorum count, the audit events), and the two copies were never compared on
one database. The store now decides through the same SQLAlchemy statements on PostgreSQL
as on SQLite, so the function goes. A downgrade puts back 0004's definition.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 02:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS approvals_decide(jsonb)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        script = op.get_context().script
        assert script is not None, "run through alembic's environment (approvals db upgrade)"
        op.execute(script.get_revision("0004").module.DECIDE)
