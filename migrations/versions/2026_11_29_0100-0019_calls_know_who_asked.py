"""Calls know who asked: `tool_calls.requested_by`.

A gate's call was asked by the token or user that sent it; a worker's run's calls by whoever
started the run. `call_options` refuses the asker's approval on every channel. Existing calls
are filled in: a gate's call from the actor of its `call.requested` audit event (who really
asked, which before this revision need not be who opened the session), any other call, and a
gate call without that event, from its run's `started_by`.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GATE_ENGINES = ("gate", "mcp", "claude_code", "codex", "gemini", "cursor")
"""The engines whose calls are asked through the gate (`approvals.engines.gate`), as of this revision:
their `call.requested` event names the asker; a worker's names the worker."""

_BACKFILL = sa.text(
    """
    UPDATE tool_calls SET requested_by = COALESCE(
        (
            SELECT audit_events.actor FROM audit_events, runs
            WHERE runs.id = tool_calls.run_id
              AND runs.engine IN :gate_engines
              AND audit_events.subject_type = 'call'
              AND audit_events.subject_id = tool_calls.id
              AND audit_events.action = 'call.requested'
            ORDER BY audit_events.id
            LIMIT 1
        ),
        (SELECT runs.started_by FROM runs WHERE runs.id = tool_calls.run_id)
    )
    """
).bindparams(sa.bindparam("gate_engines", GATE_ENGINES, expanding=True))


def upgrade() -> None:
    # a nullable column: a plain ADD COLUMN on both databases, no table rebuild
    op.add_column("tool_calls", sa.Column("requested_by", sa.String(length=200), nullable=True))
    op.execute(_BACKFILL)


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as calls:
        calls.drop_column("requested_by")
