"""fact_scope: which metrics sources a facts connector's facts describe (its ``describes`` key)

Two Slurm clusters number their jobs alike: ``slurm:123`` on both. A facts connector's run keeps
its ``describes`` here, and its facts own only those sources' rows (service/attribution/
shared_facts.py). No row (every connector until its next run) means every source, as before.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 16:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fact_scope",
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("describes", sa.JSON(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("source"),
    )


def downgrade() -> None:
    op.drop_table("fact_scope")
