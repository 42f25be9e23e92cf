"""A report over months `gpu-ledger prune` dropped from ``ledger_hour`` shows the same numbers as
before the prune (its periods are whole UTC days: ``ledger_day`` and the group rollups answer), and
a part of it that read pruned device-level hours would fail with HOURS_PRUNED instead of showing
short sums (tests/pruned_ledger.py: 2025-01-31 20:00 – 2025-02-01 04:00, January pruned)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest
from pruned_ledger import write_pruned
from sqlalchemy import Connection, Engine

from service.analytics.access import ALL
from service.analytics.dims import Granularity, LedgerFilter
from service.analytics.errors import HoursPruned
from service.analytics.window import Window, ledger_source
from service.ledger import retention
from service.reports import build
from service.reports.build import Report, build_report
from service.reports.period import Period, month_of, week_of
from service.reports.scope import Scope

AT = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
JANUARY = month_of(dt.date(2025, 1, 1))
WEEK_5 = week_of(dt.date(2025, 1, 27))  # 2025-01-27 – 2025-02-02: across the boundary
ALPHA = Scope(project="alpha")


def _report(conn: Connection, period: Period, scope: Scope) -> Report:
    report = build_report(conn, period, scope, generated_at=AT, software_version="test")
    return dataclasses.replace(report, data_version=0)  # prune moves the ledger's version on


def test_a_report_over_pruned_months_is_unchanged(engine: Engine) -> None:
    write_pruned(engine, prune=False)
    with engine.connect() as conn:
        before = [_report(conn, p, ALPHA) for p in (JANUARY, WEEK_5)]
    with engine.begin() as conn:
        retention.prune(conn, dt.datetime(2025, 2, 1, tzinfo=dt.UTC))
    with engine.connect() as conn:
        assert retention.first_kept_hour(conn) is not None
        after = [_report(conn, p, ALPHA) for p in (JANUARY, WEEK_5)]
    assert after == before
    january, week = after
    assert (january.totals.cost, january.totals.gpu_hours) == (Decimal("4.000000004"), 4.0)
    assert (week.totals.cost, week.totals.gpu_hours) == (Decimal("8.000000008"), 8.0)
    assert [(p.project, p.cost, p.gpu_hours) for p in week.projects] == [
        ("alpha", Decimal("8.000000008"), 8.0)
    ]
    assert [(d.day.isoformat(), d.cost) for d in week.trend.days if d.cost] == [
        ("2025-01-31", Decimal("4.000000004")),
        ("2025-02-01", Decimal("4.000000004")),
    ]


def test_a_report_part_reading_pruned_hours_fails(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a part of the report read device-level hours (here the top idle workloads hour by
    hour), the report is refused with the boundary rather than summing February's hours alone."""
    write_pruned(engine)

    def hourly_top_idle(conn: Connection, window: Window, *_: object) -> list[build.IdleWorkload]:
        conn.execute(ledger_source(window, Granularity.HOUR, LedgerFilter(), ALL).select())
        return []

    monkeypatch.setattr(build, "_top_idle", hourly_top_idle)
    with engine.connect() as conn, pytest.raises(HoursPruned, match="before 2025-02-01 were pruned"):
        build_report(conn, WEEK_5, ALPHA, generated_at=AT, software_version="test")
