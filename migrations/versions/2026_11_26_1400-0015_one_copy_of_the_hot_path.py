"""One copy of the hot path: PostgreSQL runs the claim's and a worker's statements, not functions repeating them.

A claim and a worker's write to the run it holds were PL/pgSQL functions on PostgreSQL
(`approvals_claim_v3`, `approvals_run_write_v2`, with `approvals_stale_lease_v2`) that
restated what SQLite runs as SQLAlchemy statements. Both databases now run those same
statements; PostgreSQL sends them in a psycopg pipeline. This drops the functions nothing
calls any more: those, the version-2 claim that version 3 replaced, and the unversioned
functions of migrations 0004 and 0005 that 0011 kept for workers of the release before it.

What stays is the server's half of the audit chain (`approvals_audit_head_v2`,
`approvals_audit_append_v2`, `approvals_event_content_v2`): on PostgreSQL every
transaction's events are appended by it, in the same statement that precedes COMMIT.

Workers of the previous release call the dropped functions: stop them before upgrading
(their claims and writes fail until they run this release). A downgrade creates the
functions again, as migrations 0004, 0005, 0011 and 0012 left them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 14:00:00
"""

from collections.abc import Sequence
from typing import Any

from alembic import op

from approvals.store.hot_path_sql import DROPPED_FUNCTIONS, function_statement

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNVERSIONED = {
    "approvals_claim": "(jsonb)",
    "approvals_run_write": "(jsonb)",
    "approvals_stale_lease": "(timestamptz, text, text[])",
    "approvals_audit_append": "(text, timestamptz, text, text, text, text, jsonb)",
    "approvals_audit_head": "()",
    "approvals_event_content": "(text, text, text, text, text, text, text, text, text)",
}
"""The functions of migrations 0004 and 0005 (name: argument types), callers first."""


def _module(revision: str) -> Any:
    """An earlier migration's module: a downgrade creates its functions again as they are there."""
    script = op.get_context().script
    assert script is not None, "run through alembic's environment (approvals db upgrade)"
    return script.get_revision(revision).module


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, arguments in (DROPPED_FUNCTIONS | UNVERSIONED).items():
        op.execute(f"DROP FUNCTION IF EXISTS {name}{arguments}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    first, settling = _module("0004"), _module("0005")
    for statement in (first.EVENT_CONTENT, first.AUDIT_HEAD, first.AUDIT_APPEND, first.STALE_LEASE, first.CLAIM):
        op.execute(statement)
    op.execute(settling.RUN_WRITE)  # 0005's body replaced 0004's
    for name in reversed(DROPPED_FUNCTIONS):  # the helpers first
        op.execute(function_statement(name))
