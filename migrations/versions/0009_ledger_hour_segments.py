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
from sqlalchemy import text

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Days built per statement: a month of a large fleet fits in memory.
DAYS_PER_BUILD = 31


def upgrade() -> None:
    op.create_table(
        "ledger_hour_segment",
        sa.Column("day_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("hour_rows", sa.Integer(), nullable=False),
        sa.Column("arrow", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("day_index"),
    )
    _fill_segments(op.get_bind())


def _fill_segments(bind: sa.Connection) -> None:
    from service.ledger import segments

    first, last = bind.execute(text("SELECT min(day_index), max(day_index) FROM ledger_hour")).one()
    if first is None:
        return
    for lo in range(first, last + 1, DAYS_PER_BUILD):
        segments.rebuild(bind, lo, min(lo + DAYS_PER_BUILD - 1, last))


def downgrade() -> None:
    op.drop_table("ledger_hour_segment")
