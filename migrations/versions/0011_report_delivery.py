"""report_delivery: which scheduled report was claimed and sent for which period (service/reports)

One row per (schedule name, period label), written before the e-mail is sent, so a restart or a
second scheduler never sends a period twice.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 07:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "report_delivery",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("period", sa.String(length=10), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.Column("recipients", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", "period"),
    )


def downgrade() -> None:
    op.drop_table("report_delivery")
