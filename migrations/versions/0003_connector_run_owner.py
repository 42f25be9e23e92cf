"""connector run owner: host, pid and the lock its process holds while the run is RUNNING

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 16:47:11.807440
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("connector_run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_host", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("owner_pid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("owner_lock", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("connector_run", schema=None) as batch_op:
        batch_op.drop_column("owner_lock")
        batch_op.drop_column("owner_pid")
        batch_op.drop_column("owner_host")
