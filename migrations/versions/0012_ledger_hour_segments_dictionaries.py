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

from alembic import op

from migrations.support import rebuild_segments

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    rebuild_segments(op.get_bind(), only_stored=True)


def downgrade() -> None:
    pass
