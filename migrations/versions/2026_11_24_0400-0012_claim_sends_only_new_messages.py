"""The hot path's version 3 (approvals/store/sql/hot_path_v3.sql): a claim sends only the messages a worker lacks.

`approvals_claim_v3` takes `known`, how many messages of which runs the claiming worker
already holds, and returns the claimed run's history from there on, so a resume no longer
reloads and re-parses the whole history (issue 17). The version-2 claim stays for workers
of the previous release during a deploy.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 04:00:00
"""

from collections.abc import Sequence

from alembic import op

from approvals.store.hot_path_sql import function_name, install

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERSION = 3
SHA256 = "42ac3ffe834aa9255ce85ea717b8eed1776b4d778d97d228fa1eb9e392f1cc5d"
"""hot_path_v3.sql as released: a different file is an edit of a released version."""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        install(op.execute, VERSION, SHA256)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {function_name('claim', VERSION)}(jsonb)")
