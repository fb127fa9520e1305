"""Open calls' digests in the canonical form whose numbers survive PostgreSQL (issue 14).

Canonical JSON now writes a float of 1e16 or more as its integer digits and negative
zero as `0.0`, as PostgreSQL's JSONB gives them back. A call still waiting for a
decision or a worker keeps the digest of the old form, which the reviewer's page and the
worker recompute in the new one: they would refuse it as "changed since you loaded them"
or "digest mismatch". This recomputes the digests of calls that are not yet settled, and
of the standing approvals bound to them, where the new form differs; calls already
settled keep theirs, as the audit events that name them do.

It uses the library's `digest` on purpose: the point is to bring stored digests to the
form the code of this release computes. Where nothing holds such numbers, nothing changes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from approvals.calls.canonical import digest

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNSETTLED = ("pending", "approved", "executing", "outcome_unknown")
_calls = sa.table(
    "tool_calls",
    sa.column("id", sa.String),
    sa.column("status", sa.String),
    sa.column("args", sa.JSON),
    sa.column("args_digest", sa.String),
    sa.column("override_args", sa.JSON),
    sa.column("override_digest", sa.String),
)
_decisions = sa.table("decisions", sa.column("call_id", sa.String), sa.column("args_digest", sa.String))


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(_calls.c.id, _calls.c.args, _calls.c.args_digest, _calls.c.override_args, _calls.c.override_digest)
        .where(_calls.c.status.in_(UNSETTLED))
        .execution_options(yield_per=2_000)
    )
    changes = []
    for call_id, args, args_digest, override_args, override_digest in rows:
        new_args_digest = digest(args)
        new_override_digest = None if override_args is None else digest(override_args)
        if new_args_digest != args_digest or new_override_digest != override_digest:
            changes.append((call_id, args_digest, new_args_digest, override_digest, new_override_digest))
    for call_id, old, new, old_override, new_override in changes:
        bind.execute(_calls.update().where(_calls.c.id == call_id).values(args_digest=new, override_digest=new_override))
        for was, now in ((old, new), (old_override, new_override)):
            if was is not None and was != now:
                bind.execute(
                    _decisions.update()
                    .where(_decisions.c.call_id == call_id, _decisions.c.args_digest == was)
                    .values(args_digest=now)
                )


def downgrade() -> None:
    """Nothing to undo: the old code recomputes digests in its own form, as it always did."""
