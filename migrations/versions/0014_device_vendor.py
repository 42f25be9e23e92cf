"""vendor: the accelerator's vendor on devices and every ledger table (GraphQL dimension VENDOR)

``nvidia``, ``amd``, ``intel`` or ``huawei`` (connectors.sdk.shapes). New rows get it from their
source, else from ``gpu_model`` (connectors.sdk.vendors.vendor_of); existing rows get it here from
their ``gpu_model`` the same way — one UPDATE per distinct model and table, so what a model says is
decided by the code that decides it for new rows, never by a second copy of the patterns in SQL.
The day segments carry every dimension column: they are rebuilt when ``ledger_hour`` has all the
columns today's code puts in them (a later migration adding one rebuilds them itself).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 11:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.support import rebuild_segments

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("device", "pushed_device", "ledger_hour", "ledger_day", "ledger_group_hour", "ledger_group_day")


def upgrade() -> None:
    from connectors.sdk.vendors import vendor_of

    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("vendor", sa.String(length=16), nullable=True))
    bind = op.get_bind()
    for table in TABLES:
        rows = sa.table(table, sa.column("gpu_model", sa.String), sa.column("vendor", sa.String))
        models = bind.execute(sa.select(rows.c.gpu_model).distinct().where(rows.c.gpu_model.is_not(None)))
        for (model,) in list(models):
            vendor = vendor_of(model)
            if vendor is not None:
                bind.execute(sa.update(rows).where(rows.c.gpu_model == model).values(vendor=vendor))
    rebuild_segments(bind, only_stored=True)  # skipped while ledger_hour lacks a newer column


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("vendor")
