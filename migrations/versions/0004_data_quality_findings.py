"""data-quality findings of billing imports (data_quality_finding), and each run's count of them

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 19:35:21.058555
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "data_quality_finding",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("connector", sa.String(length=100), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("source_file", sa.String(length=1000), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=True),
        sa.Column("rule", sa.String(length=60), nullable=False),
        sa.Column("column_name", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("examples", sa.Text(), nullable=False),
        sa.Column("period_start", UTCDateTime(), nullable=True),
        sa.Column("period_end", UTCDateTime(), nullable=True),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("data_quality_finding", schema=None) as batch_op:
        batch_op.create_index("ix_data_quality_finding_file", ["connector", "source_file"], unique=False)
        batch_op.create_index("ix_data_quality_finding_period", ["period_start"], unique=False)
        batch_op.create_index(batch_op.f("ix_data_quality_finding_run_id"), ["run_id"], unique=False)

    # Runs recorded before this revision found nothing they counted: 0.
    with op.batch_alter_table("connector_run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("findings", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("connector_run", schema=None) as batch_op:
        batch_op.drop_column("findings")

    with op.batch_alter_table("data_quality_finding", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_data_quality_finding_run_id"))
        batch_op.drop_index("ix_data_quality_finding_period")
        batch_op.drop_index("ix_data_quality_finding_file")

    op.drop_table("data_quality_finding")
