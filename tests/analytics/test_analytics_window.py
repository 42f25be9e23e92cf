"""Windows, periods, and the rollup path: ledger_day + partial-day hours == ledger_hour alone."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from ledger_rows import D0, at, row
from sqlalchemy import Engine, delete

from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy
from service.analytics.effective import effective_cost
from service.analytics.errors import InvalidWindow, WindowNotAligned, WindowTooLarge
from service.analytics.idle import idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window, period_start
from service.models import FxRate, LedgerHour

UTC = dt.UTC


@pytest.mark.parametrize(
    ("start", "end", "error"),
    [
        (at(2), at(1), InvalidWindow),
        (at(1), at(1), InvalidWindow),
        (at(0), at(24 * 401), WindowTooLarge),
        (at(0.5), at(3), WindowNotAligned),
        (at(0), at(3) + dt.timedelta(seconds=1), WindowNotAligned),
    ],
)
def test_bad_windows(start: dt.datetime, end: dt.datetime, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_window(start, end, max_days=400)


def test_naive_and_offset_windows() -> None:
    with pytest.raises(InvalidWindow, match="no timezone"):
        check_window(dt.datetime(2025, 1, 1), at(1), max_days=400)  # noqa: DTZ001
    plus2 = dt.timezone(dt.timedelta(hours=2))
    w = check_window(dt.datetime(2025, 1, 6, 2, tzinfo=plus2), at(5), max_days=400)
    assert w.start == D0 and w.whole_days is None
    assert check_window(at(0), at(24 * 400), max_days=400).whole_days == (20094, 20494)


def test_period_starts() -> None:
    assert period_start(Granularity.DAY, 20094) == D0
    assert period_start(Granularity.WEEK, (20094 + 3) // 7) == D0  # D0 is a Monday
    assert period_start(Granularity.WEEK, (20100 + 3) // 7) == D0  # …and so is the Sunday after it
    assert period_start(Granularity.MONTH, 660) == dt.datetime(2025, 1, 1, tzinfo=UTC)
    assert period_start(Granularity.HOUR, 20094 * 24 + 5) == at(5)
    assert period_start(Granularity.TOTAL, None) is None


# --- rollup path == hourly path ---------------------------------------------------------------------------

START = dt.datetime(2025, 1, 30, 6, tzinfo=UTC)  # Thursday; the window crosses a month and an ISO week
END = dt.datetime(2025, 2, 3, 18, tzinfo=UTC)
FIRST_H = int((START - D0).total_seconds() // 3600)


@pytest.fixture
def long_ledger(put) -> None:  # type: ignore[no-untyped-def]
    rows: list[Any] = []
    for h in range(FIRST_H - 8, FIRST_H + 5 * 24):
        idle = float((h * 53) % 3600)
        rows.append(
            row(h, "GPU-a", "job-1" if h % 3 else "", project="alpha" if h % 3 else None,
                observed_s=3000.0, busy_s=float((h * 37) % 2000), idle_s=idle, hist_0_1_s=idle / 2,
                hist_1_5_s=idle / 2, hist_10_25_s=3000.0 - idle, obs_s_gpu_util=3000.0,
                busy_s_gpu_util=2500.0, idle_s_gpu_util=float(h % 7) * 10, energy_j=float(h * 1000),
                cost=f"0.{h % 997:03d}000001", idle_cost=f"0.000{h % 89:02d}0003")
        )  # fmt: skip
        rows.append(
            row(h, "MIG-m", f"job-{h % 2}", project="beta", environment="aws", gpu_fraction=1 / 7,
                default_metric="gpu_util", busy_s=float(h % 3600), obs_s_gpu_util=3600.0,
                busy_s_gpu_util=float(h % 3600), idle_s=float(h % 11), hist_0_1_s=float(h % 11),
                cost="0.142857143", idle_cost="0.000000007", currency="EUR", rate_source="billing:x")
        )  # fmt: skip
    days = {(D0 + dt.timedelta(hours=h)).date() for h in range(FIRST_H - 8, FIRST_H + 5 * 24)}
    rows += [FxRate(base="EUR", quote="USD", day=d, rate=Decimal("1.0833")) for d in days]
    put(rows)


def comparable(rows: list[Any]) -> list[Any]:
    def norm(value: Any) -> Any:
        return round(value, 6) if isinstance(value, float) else value

    out = []
    for r in rows:
        d = dataclasses.asdict(r)
        out.append({k: norm(v) for k, v in d.items()})
    return out


QUERIES = {
    "usage": lambda c, q: usage(c, q),
    "usage_gpu_util": lambda c, q: usage(c, q, "gpu_util"),
    "cost": lambda c, q: cost(c, q),
    "cost_shared_usd": lambda c, q: cost(c, q, IdlePolicy.SHARE_BY_USAGE, "USD"),
    "cost_evenly": lambda c, q: cost(c, q, IdlePolicy.SHARE_EVENLY),
    "idle": lambda c, q: idle_waste(c, q),
    "idle_10": lambda c, q: idle_waste(c, q, threshold_pct=10.0),
    "effective": lambda c, q: effective_cost(c, q),
}


@pytest.mark.slow
def test_rollup_path_equals_hourly_path(engine: Engine, long_ledger: None) -> None:
    group_by = (Dimension.ENVIRONMENT, Dimension.PROJECT)
    window = check_window(START, END, max_days=400)
    with engine.connect() as conn:
        for granularity in (Granularity.DAY, Granularity.WEEK, Granularity.MONTH, Granularity.TOTAL):
            for name, query in QUERIES.items():
                rolled = query(conn, LedgerQuery(window, granularity, group_by, access=ALL))
                hourly = query(conn, LedgerQuery(window, granularity, group_by, rollup=False, access=ALL))
                assert rolled, (name, granularity)
                assert comparable(rolled) == comparable(hourly), (name, granularity)


def test_rollup_path_reads_ledger_day(engine: Engine, long_ledger: None) -> None:
    window = check_window(START, END, max_days=400)
    whole_day = dt.datetime(2025, 2, 1, tzinfo=UTC)
    with engine.begin() as conn:  # the hours of a whole day vanish; its rollup row stays
        conn.execute(delete(LedgerHour).where(LedgerHour.hour_start >= whole_day))  # type: ignore[arg-type]
    with engine.connect() as conn:
        rolled = usage(conn, LedgerQuery(window, Granularity.DAY, access=ALL))
        hourly = usage(conn, LedgerQuery(window, Granularity.DAY, rollup=False, access=ALL))
    rolled_days = {r.key.period_start: round(r.gpu_hours, 9) for r in rolled}
    hourly_days = {r.key.period_start: round(r.gpu_hours, 9) for r in hourly}
    assert rolled_days[whole_day] == round(24 * (1 + 1 / 7), 9)  # from ledger_day
    assert whole_day not in hourly_days
    assert rolled_days[dt.datetime(2025, 1, 30, tzinfo=UTC)] == round(18 * (1 + 1 / 7), 9)  # partial edge
    assert min(rolled_days) == dt.datetime(2025, 1, 30, tzinfo=UTC)
