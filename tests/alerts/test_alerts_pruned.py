"""project_idle_cost over a month boundary after `gpu-ledger prune --before` the new month: the
last 24 hours reach into the pruned month, and the rule still sums them all (from the group
rollup), instead of only the hours ``ledger_hour`` kept (which would miss the alert)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from ledger_rows import D0, row
from sqlalchemy import Engine
from sqlmodel import Session

from service.alerts.conditions import find
from service.alerts.rules import ProjectIdleCostRule
from service.ledger import partitions, retention
from service.ledger.store import rebuild_days
from service.timeutil import hour_index

JAN = dt.datetime(2025, 1, 31, 20, tzinfo=dt.UTC)
FEB = dt.datetime(2025, 2, 1, tzinfo=dt.UTC)


def test_project_idle_cost_sums_the_pruned_hours_of_the_last_day(engine: Engine) -> None:
    offset = hour_index(JAN) - hour_index(D0)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:  # the rows go through no ingest: make their months
            partitions.ensure_months(conn, hour_index(JAN), hour_index(JAN) + 8)
    with Session(engine) as session:  # 8 hours × 1.25 USD idle, 4 of them in January
        session.add_all(row(offset + i, "GPU-a", "a", project="ml", idle_cost="1.25") for i in range(8))
        session.commit()
    with engine.begin() as conn:
        rebuild_days(conn, hour_index(JAN) // 24, hour_index(FEB) // 24)
        retention.prune(conn, FEB)
    rule = ProjectIdleCostRule(name="i", kind="project_idle_cost", per_day=Decimal(10))
    with engine.connect() as conn:
        assert retention.first_kept_hour(conn) == hour_index(FEB)
        found = find(conn, rule, FEB + dt.timedelta(hours=3))  # (now − 24 h, now]: all eight hours
    assert [(f.subject_key, f.value) for f in found] == [("project:ml", Decimal("10.00"))]
