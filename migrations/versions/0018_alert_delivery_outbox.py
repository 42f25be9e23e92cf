"""alert_delivery: the alerts' outbox (one row per announcement and channel); alert_event.since

An announcement's sends are written in the evaluation's transaction and sent after it commits, so
a receiver that is down, or a process killed between the commit and the send, no longer loses it:
later evaluations retry it (service/alerts/outbox.py). ``alert_event.since`` (when the state began)
lets a later evaluation rebuild the announcement from its history row; rows written before this
migration get their ``at``, which equals ``since`` for every announcement but a late one. Nothing
already recorded is sent again: earlier events get no outbox rows.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.dbtypes import UTCDateTime

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("alert_event", schema=None) as batch_op:
        batch_op.add_column(sa.Column("since", UTCDateTime(), nullable=True))
    events = sa.table("alert_event", sa.column("since", UTCDateTime()), sa.column("at", UTCDateTime()))
    op.get_bind().execute(sa.update(events).values(since=events.c.at))
    with op.batch_alter_table("alert_event", schema=None) as batch_op:
        batch_op.alter_column("since", existing_type=UTCDateTime(), nullable=False)
    op.create_table(
        "alert_delivery",
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["event_id"], ["alert_event.id"]),
        sa.PrimaryKeyConstraint("event_id", "channel"),
    )
    with op.batch_alter_table("alert_delivery", schema=None) as batch_op:
        batch_op.create_index(
            "ix_alert_delivery_status_channel", ["status", "channel", "event_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("alert_delivery", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_delivery_status_channel")
    op.drop_table("alert_delivery")
    with op.batch_alter_table("alert_event", schema=None) as batch_op:
        batch_op.drop_column("since")
