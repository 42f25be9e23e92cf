"""api tokens, batch content hash, notices

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 16:42:49.786275
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("last_used_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("secret_sha256"),
    )
    with op.batch_alter_table("billing_file", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notice", sa.Text(), nullable=True))

    with op.batch_alter_table("connector_state", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notice", sa.Text(), nullable=True))

    with op.batch_alter_table("pushed_batch", schema=None) as batch_op:
        batch_op.add_column(sa.Column("content_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pushed_batch", schema=None) as batch_op:
        batch_op.drop_column("content_sha256")

    with op.batch_alter_table("connector_state", schema=None) as batch_op:
        batch_op.drop_column("notice")

    with op.batch_alter_table("billing_file", schema=None) as batch_op:
        batch_op.drop_column("notice")

    op.drop_table("api_token")
