"""SCIM provisioning: the identity provider's id for a user, what it sent that we keep, and SCIM groups.

`users.external_id` is the provider's own id (SCIM `externalId`), unique so a provider cannot
provision one person twice; `users.scim_profile` keeps the SCIM attributes approvals does not
use itself (name, displayName, ...) so a provider reads back what it wrote. A user's groups
stay the JSON list on `users` (what routing reads); `scim_groups` only names the groups a
provider created, so an empty group exists and has a stable id and `externalId`.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("external_id", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("scim_profile", JSON, nullable=True))
        batch.create_unique_constraint("uq_users_external_id", ["external_id"])
    op.create_table(
        "scim_groups",
        sa.Column("id", ROW_ID, autoincrement=True, primary_key=True),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("name", name="uq_scim_groups_name"),
        sa.UniqueConstraint("external_id", name="uq_scim_groups_external_id"),
    )


def downgrade() -> None:
    op.drop_table("scim_groups")
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("uq_users_external_id", type_="unique")
        batch.drop_column("scim_profile")
        batch.drop_column("external_id")
