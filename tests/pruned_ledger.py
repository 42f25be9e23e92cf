"""A ledger with a pruned month, for the HOURS_PRUNED tests of every reader (GraphQL, the HTTP
export, ``gpu-ledger export``, reports): eight hours, 2025-01-31 20:00 – 2025-02-01 04:00, on two
devices — GPU-a (job-1, project alpha, 1.000000001 USD an hour), GPU-b (unallocated, 2.5 EUR an
hour) — rolled up, then January pruned (``ledger_hour`` keeps only February's four hours)."""

from __future__ import annotations

import datetime as dt

from ledger_rows import row
from sqlalchemy import Engine, func, select
from sqlmodel import Session

from service.ledger import partitions, retention
from service.ledger.store import rebuild_days
from service.models import LedgerHour
from service.timeutil import hour_index

JAN = dt.datetime(2025, 1, 31, 20, tzinfo=dt.UTC)
FEB = dt.datetime(2025, 2, 1, tzinfo=dt.UTC)


def write_pruned(engine: Engine, *, prune: bool = True) -> None:
    """The eight hours written and rolled up, then (``prune``) January pruned."""
    offset = hour_index(JAN) - hour_index(dt.datetime(2025, 1, 6, tzinfo=dt.UTC))  # ledger_rows' D0
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:  # the rows go through no ingest: make their months
            partitions.ensure_months(conn, hour_index(JAN), hour_index(JAN) + 8)
    with Session(engine) as session:
        for i in range(8):
            session.add(row(offset + i, "GPU-a", "job-1", project="alpha", cost="1.000000001"))
            session.add(row(offset + i, "GPU-b", "", cost="2.5", currency="EUR"))
        session.commit()
    with engine.begin() as conn:
        first, last = conn.execute(
            select(func.min(LedgerHour.day_index), func.max(LedgerHour.day_index))
        ).one()
        rebuild_days(conn, first, last)
        if prune:
            retention.prune(conn, FEB)
