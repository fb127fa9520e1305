"""Audit search: find a tool's events newest first without walking the whole log.

"Every call a rule allowed on tool X" filters on `tool_name` and pages by `id`; with no index
on the tool PostgreSQL walks the primary key backwards through every other tool's events
(10 million events: seconds). The person, action and time filters already have indexes
(`ix_audit_events_actor_at`, `ix_audit_events_action_at`, `ix_audit_events_at`).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 07:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_audit_events_tool_name_id", "audit_events", ["tool_name", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_tool_name_id", table_name="audit_events")
