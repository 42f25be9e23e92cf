"""ledger_hour_segment: per-day columnar segments of ledger_hour (service/ledger/segments.py)

Device-level usage answers by the hour (``usage(granularity: HOUR, groupBy: [DEVICE])`` and its
export) read these Arrow files instead of grouping and sorting every device-hour in SQL. The
upgrade builds the segment of every day ``ledger_hour`` holds, a month of days at a time, with
the service's own builder (as 0006 fills the group rollups); from then on every writer rebuilds
the days it rewrites in its transaction. A day without its segment is read in SQL, as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 03:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.support import rebuild_segments

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ledger_hour_segment",
        sa.Column("day_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("hour_rows", sa.Integer(), nullable=False),
        sa.Column("arrow", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("day_index"),
    )
    rebuild_segments(op.get_bind(), only_stored=False)


def downgrade() -> None:
    op.drop_table("ledger_hour_segment")
