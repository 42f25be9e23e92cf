"""bench/dashboard_scale.py: a stopped load resumed writes the days it had not, and only those.

The year at 10,000 GPUs takes longer than one sitting; ``load --resume`` continues after the last
day the group rollups hold, from the same first day. Here: 8 GPUs, 5 days in chunks of 2, stopped
after the first chunk, resumed: every day once, each day's rollups equal to its hours.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import text

from service.db import make_engine, migrate

BENCH = Path(__file__).parents[1] / "bench"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("dashboard_scale", BENCH / "dashboard_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.postgres
def test_resume_continues_after_the_last_loaded_day(
    fresh_pg_database: Callable[[], AbstractContextManager[str]],
) -> None:
    bench = _bench()
    first = 20_000
    with fresh_pg_database() as url:
        engine = make_engine(url)
        migrate(engine)
        assert bench.resume_point(engine) is None
        bench.load_fleet(engine, 8, first, 2, 2)  # the first chunk of a 5-day load, then stopped
        assert bench.resume_point(engine) == (first, 2)
        bench.load_fleet(engine, 8, first, 5, 2, start_offset=2)
        assert bench.resume_point(engine) == (first, 5)
        with engine.connect() as conn:
            days = conn.execute(
                text("select day_index, count(*), sum(cost) from ledger_hour group by 1 order by 1")
            ).all()
            rolled = dict(
                conn.execute(text("select day_index, sum(cost) from ledger_group_day group by 1")).all()
            )
            segments = conn.execute(text("select day_index from ledger_hour_segment order by 1")).scalars()
            assert list(segments) == [first, first + 1, first + 2, first + 3, first + 4]
        engine.dispose()
    # every day once: 8 devices × 24 hours, plus the split device-hours (second rows) of that day
    assert [d for d, _, _ in days] == [first, first + 1, first + 2, first + 3, first + 4]
    assert all(8 * 24 <= n < 2 * 8 * 24 for _, n, _ in days)
    assert {d: c for d, _, c in days} == rolled


@pytest.mark.postgres
def test_monthly_check_holds_the_served_answer_to_ledger_day(
    fresh_pg_database: Callable[[], AbstractContextManager[str]],
) -> None:
    """``measure`` holds the year's monthly cost by project to ``ledger_day``: equal on a load that
    crosses a month end; a group rollup changed behind the hours' back fails it."""
    bench = _bench()
    first = (dt.date(2026, 3, 31) - dt.date(1970, 1, 1)).days  # 31 March and 1 April
    with fresh_pg_database() as url:
        engine = make_engine(url)
        migrate(engine)
        bench.load_fleet(engine, 8, first, 2, 2)
        with engine.connect() as conn:
            monthly = bench.monthly_from_ledger_day(conn, first, first + 1)
        # each device-hour costs its environment's hourly rate (a split hour: two halves), two
        # devices per environment: 24 h × 2 × (2.10 + 6.88 + 11.06 + 12.29) = 1,551.84 USD a day
        totals: dict[dt.datetime, Decimal] = {}
        for (month, _project, currency), cost in monthly.items():
            assert currency == "USD"
            totals[month] = totals.get(month, Decimal(0)) + cost
        assert totals == {
            dt.datetime(2026, 3, 1, tzinfo=dt.UTC): Decimal("1551.84"),
            dt.datetime(2026, 4, 1, tzinfo=dt.UTC): Decimal("1551.84"),
        }
        bench.check_monthly(url, first, first + 1)
        with engine.begin() as conn:
            one = "(SELECT min(id) FROM ledger_group_day)"
            conn.execute(text(f"UPDATE ledger_group_day SET cost = cost + 1 WHERE id = {one}"))
        engine.dispose()
        with pytest.raises(AssertionError, match="differs from ledger_day"):
            bench.check_monthly(url, first, first + 1)


def test_served_monthly_rows_keyed_as_ledger_day_sums() -> None:
    march, april = "2026-03-01T00:00:00+00:00", "2026-04-01T00:00:00+00:00"
    rows = [
        {"periodStart": march, "project": "a", "cost": {"amount": "1.500000000", "currency": "USD"}},
        {"periodStart": april, "project": None, "cost": {"amount": "2", "currency": "EUR"}},
    ]
    assert _bench().served_monthly(rows) == {
        (dt.datetime(2026, 3, 1, tzinfo=dt.UTC), "a", "USD"): Decimal("1.5"),
        (dt.datetime(2026, 4, 1, tzinfo=dt.UTC), None, "EUR"): Decimal("2"),
    }


@pytest.mark.postgres
def test_pruned_windows_are_timed_with_the_rate_limit_off(
    fresh_pg_database: Callable[[], AbstractContextManager[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A year prunes ten months: ~22 requests each from one client went over the served rate limit
    (burst 100) and failed with 429; the throwaway server is started with the limit off."""
    bench = _bench()
    monkeypatch.delenv("GPU_LEDGER_LIMITS__RATE_PER_MINUTE", raising=False)
    seen: list[str | None] = []

    def start_server(url: str, device_level: bool) -> None:
        seen.append(os.environ.get("GPU_LEDGER_LIMITS__RATE_PER_MINUTE"))
        raise RuntimeError("stop here")

    monkeypatch.setattr(bench, "start_server", start_server)
    with fresh_pg_database() as url:
        engine = make_engine(url)
        migrate(engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA bench_raw_check"))
            columns = "start_hour int, end_hour int, project text, currency text, cost numeric"
            conn.execute(text(f"CREATE TABLE {bench.RAW_CHECK} ({columns})"))
        engine.dispose()
        with pytest.raises(RuntimeError, match="stop here"):
            bench.measure_pruned(url, 1)
    assert seen == ["0"]
