"""alert_state, alert_event, alert_evaluation: the alert engine's state (service/alerts)

One row per (rule, subject) with its FIRING/RESOLVED state and whether it was announced; one
history row per change; one row whose lock makes evaluations of several processes take turns.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 06:58:17.375591
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime
from service.money import Quantity

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_evaluation",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("evaluated_at", UTCDateTime(), nullable=False),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "alert_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("subject_key", sa.String(length=600), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("subject", sa.String(length=600), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=True),
        sa.Column("team", sa.String(length=200), nullable=True),
        sa.Column("value", Quantity(), nullable=True),
        sa.Column("unit", sa.String(length=10), nullable=False),
        sa.Column("threshold", Quantity(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("notify", sa.Boolean(), nullable=False),
        sa.Column("deliveries", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alert_event", schema=None) as batch_op:
        batch_op.create_index("ix_alert_event_at", ["at"], unique=False)

    op.create_table(
        "alert_state",
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("subject_key", sa.String(length=600), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("subject", sa.String(length=600), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=True),
        sa.Column("team", sa.String(length=200), nullable=True),
        sa.Column("value", Quantity(), nullable=True),
        sa.Column("unit", sa.String(length=10), nullable=False),
        sa.Column("threshold", Quantity(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("since", UTCDateTime(), nullable=False),
        sa.Column("first_fired_at", UTCDateTime(), nullable=False),
        sa.Column("last_true_at", UTCDateTime(), nullable=False),
        sa.Column("notified", sa.Boolean(), nullable=False),
        sa.Column("last_fire_notified_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("rule", "subject_key"),
    )


def downgrade() -> None:
    op.drop_table("alert_state")
    with op.batch_alter_table("alert_event", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_event_at")

    op.drop_table("alert_event")
    op.drop_table("alert_evaluation")
