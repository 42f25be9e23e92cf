"""facts by day: workload_fact_day and device_tag_day, the attribution facts each UTC day was reported with

``gpu-ledger reattribute`` re-decides a day's owners from the facts its source reported for that
day (a pod's labels, an instance's tags), no longer from the latest ones: a pod relabelled in June
must not move May's cost. Ingest writes one row per (source, workload, day) and per (device, day)
its ledger rows cover. Nothing is backfilled: a day ingested before has no row, and reattribute
reads the latest facts for it (``workload_fact``, ``device.tags``) as it did — what those days were
reported with is not known any more.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 15:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workload_fact_day",
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("workload_key", sa.String(length=500), nullable=False),
        sa.Column("day_index", sa.Integer(), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=True),
        sa.Column("project", sa.String(length=200), nullable=True),
        sa.Column("team", sa.String(length=200), nullable=True),
        sa.Column("user_name", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("source", "workload_key", "day_index"),
    )
    op.create_table(
        "device_tag_day",
        sa.Column("device_id", sa.String(length=200), nullable=False),
        sa.Column("day_index", sa.Integer(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("device_id", "day_index"),
    )


def downgrade() -> None:
    op.drop_table("device_tag_day")
    op.drop_table("workload_fact_day")
