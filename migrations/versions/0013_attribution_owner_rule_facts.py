"""attribution (issue 16): owner_rule on the ledger and its rollups, device tags, workload facts

``owner_rule`` records which ``[[attribution]]`` rule named a ledger row's owner ('source': the
connector itself). Rows written before rules existed were named by their connector wherever they
have an owner, so they get 'source' there; the segments, which carry every dimension, are rebuilt.
``device.tags``, ``pushed_device.tags``, ``pushed_workload.facts`` and the ``workload_fact``
table keep the attribution facts sources report, which ``gpu-ledger reattribute`` re-reads.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 11:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

from migrations.support import rebuild_segments
from service.dbtypes import UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEDGER_TABLES = ("ledger_hour", "ledger_day", "ledger_group_hour", "ledger_group_day")
_NAMED = "(project <> '' OR team <> '' OR user_name <> '')"


def upgrade() -> None:
    for table in LEDGER_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("owner_rule", sa.String(length=100), nullable=True))
    for table, column in (("device", "tags"), ("pushed_device", "tags"), ("pushed_workload", "facts")):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column(column, sa.JSON(), nullable=True))
    op.create_table(
        "workload_fact",
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("workload_key", sa.String(length=500), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=True),
        sa.Column("project", sa.String(length=200), nullable=True),
        sa.Column("team", sa.String(length=200), nullable=True),
        sa.Column("user_name", sa.String(length=200), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("source", "workload_key"),
    )
    bind = op.get_bind()
    for table in ("ledger_hour", "ledger_day"):
        bind.execute(text(f"UPDATE {table} SET owner_rule = 'source' WHERE workload_key <> '' AND {_NAMED}"))
    for table in ("ledger_group_hour", "ledger_group_day"):
        bind.execute(text(f"UPDATE {table} SET owner_rule = 'source' WHERE NOT unallocated AND {_NAMED}"))
    rebuild_segments(bind, only_stored=False)


def downgrade() -> None:
    op.drop_table("workload_fact")
    for table, column in (("pushed_workload", "facts"), ("pushed_device", "tags"), ("device", "tags")):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column(column)
    for table in LEDGER_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("owner_rule")
