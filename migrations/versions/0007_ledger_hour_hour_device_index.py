"""ledger_hour (hour_index, device_id) index and, on PostgreSQL, its ndistinct statistics

Keyset pages of HOUR × DEVICE answers (``usage(granularity: HOUR, groupBy: [DEVICE], first, after)``)
are ``GROUP BY hour_index, device_id ORDER BY hour_index, device_id`` after the last row's key
(service.analytics.query.keyset_after). With this index PostgreSQL streams the groups out of it
and stops after the page (a GroupAggregate under the LIMIT) wherever the page starts, instead of
aggregating every remaining hour and sorting it: page 1 and the last page of a 720k-row answer
cost the same. The planner only takes that plan when it knows how many (hour, device) groups there
are: without multivariate statistics it multiplies the columns' own distinct counts down to a
fraction of the real number and prefers hashing all groups. ``st_ledger_hour_hour_device`` gives
it the real count. It is filled by ANALYZE, which this migration runs once; autovacuum analyzes
partitions but never a partitioned parent (PostgreSQL), so after large loads run
``ANALYZE ledger_hour`` (as bench/graphql_latency.py's loader does).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 23:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATISTICS = "st_ledger_hour_hour_device"


def upgrade() -> None:
    op.create_index("ix_ledger_hour_hour_device", "ledger_hour", ["hour_index", "device_id"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        columns = "hour_index, device_id"
        op.execute(f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (ndistinct) ON {columns} FROM ledger_hour")
        op.execute("ANALYZE ledger_hour")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")
    op.drop_index("ix_ledger_hour_hour_device", table_name="ledger_hour")
