"""ledger_hour_segment format 2: text columns stored as sorted dictionaries (service/ledger/segments.py)

Format 1 stored each segment's device ids, dimensions and default metric as plain text; format 2
stores them as Arrow dictionaries of the day's distinct values in byte order, which the
device-hour answers (``usage(granularity: HOUR, groupBy: [DEVICE])`` and its export) read and
send without decoding or re-encoding the text. A format-1 segment still reads (decoded on the
fly, slower); the upgrade rebuilds every stored day in format 2 with the service's own builder, a
month of days at a time. Nothing to undo on downgrade: format-1 readers are gone with the code.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 07:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Days rebuilt per statement: a month of a large fleet fits in memory.
DAYS_PER_BUILD = 31


def upgrade() -> None:
    _rebuild_segments(op.get_bind())


def _rebuild_segments(bind: sa.Connection) -> None:
    from service.ledger import segments

    first, last = bind.execute(text("SELECT min(day_index), max(day_index) FROM ledger_hour_segment")).one()
    if first is None:
        return
    for lo in range(first, last + 1, DAYS_PER_BUILD):
        segments.rebuild(bind, lo, min(lo + DAYS_PER_BUILD - 1, last))


def downgrade() -> None:
    pass
