"""forecast(): the daily history read from the ledger (exact), the model on known series, the bounds.

The history case, by hand (D0 = Monday 2025-01-06, 8 whole days):

* alpha: day 0 one GPU-hour, busy 1800 s, 3 USD; day 2 one GPU-hour, 1.000000001 USD, and on an
  EUR site one GPU-hour for 2 EUR (1 EUR = 1.1 USD that day).
* beta: day 1 two GPU-hours (two devices), 5 USD, busy 3600 s.
* the pool (nobody's): day 0 one GPU-hour, 2 USD — project null.

Without ``currency`` alpha has a USD series [3, 0, 1.000000001, 0…] and an EUR one [0, 0, 2, 0…];
converted to USD one series [3, 0, 1.000000001 + 2.2 = 3.200000001, 0…].
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import Access
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy
from service.analytics.errors import InvalidArgument, MissingFxRate, UnknownCurrency, WindowNotAligned
from service.analytics.forecast import MAX_GROUPS, TooManyGroups, forecast, history
from service.analytics.forecast_model import (
    CONSTANT,
    HOLT_LINEAR,
    HOLT_WINTERS,
    SEASONAL_NAIVE,
    HistoryTooShort,
    forecast_series,
    seasonal_naive,
)
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.models import FxRate

D = Decimal
ALL = Access.all()
Z = D(0)


def query(
    days: int = 8, group_by=(Dimension.PROJECT,), access: Access = ALL, start: float = 0
) -> LedgerQuery:  # type: ignore[no-untyped-def]
    window = check_window(at(start), at(start + 24 * days), max_days=400)
    return LedgerQuery(window, Granularity.DAY, tuple(group_by), access=access)


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    eur = {"currency": "EUR", "rate_source": "tco:paris", "environment": "onprem-eu"}
    put(
        [
            row(0, "GPU-a", "job-1", project="alpha", cost="3", busy_s=1800.0),
            row(48, "GPU-a", "job-1", project="alpha", cost="1.000000001"),
            row(49, "GPU-e", "job-2", project="alpha", cost="2", **eur),
            row(30, "GPU-b", "job-3", project="beta", cost="2.5", busy_s=1800.0),
            row(30, "GPU-c", "job-3", project="beta", cost="2.5", busy_s=1800.0),
            row(5, "GPU-b", cost="2", idle_cost="2"),
            FxRate(base="EUR", quote="USD", day=at(48).date(), rate=D("1.1")),
        ]
    )


def test_history_is_the_daily_totals_per_group_exactly(engine: Engine, ledger: None) -> None:
    with engine.connect() as conn:
        h = history(conn, query())
    dims = [dict(g)[Dimension.PROJECT] for g in h.groups]
    assert sorted(dims, key=str) == sorted([None, "alpha", "beta"], key=str)
    alpha, beta, pool = (dims.index(p) for p in ("alpha", "beta", None))
    assert h.first_day == (at(0) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).days and h.days == 8
    assert h.gpu_hours[alpha].tolist() == [1, 0, 2, 0, 0, 0, 0, 0]
    assert h.effective_gpu_hours[alpha].tolist() == [0.5, 0, 0, 0, 0, 0, 0, 0]
    assert h.gpu_hours[beta].tolist() == [0, 2, 0, 0, 0, 0, 0, 0]
    assert h.effective_gpu_hours[beta].tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    assert h.gpu_hours[pool].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    assert h.cost == {
        (alpha, "USD"): [D("3"), Z, D("1.000000001"), Z, Z, Z, Z, Z],
        (alpha, "EUR"): [Z, Z, D("2"), Z, Z, Z, Z, Z],
        (beta, "USD"): [Z, D("5"), Z, Z, Z, Z, Z, Z],
        (pool, "USD"): [D("2"), Z, Z, Z, Z, Z, Z, Z],
    }


def test_history_converted_per_day_adds_up_to_cost(engine: Engine, ledger: None) -> None:
    with engine.connect() as conn:
        h = history(conn, query(), currency="usd")
        total = cost(conn, query(group_by=()), IdlePolicy.SEPARATE, "USD")
    alpha = [dict(g)[Dimension.PROJECT] for g in h.groups].index("alpha")
    assert h.cost[(alpha, "USD")] == [D("3"), Z, D("3.200000001"), Z, Z, Z, Z, Z]
    assert {cur for _, cur in h.cost} == {"USD"}
    per_day = [sum((s[d] for s in h.cost.values()), Z) for d in range(8)]
    by_day = [Z] * 8  # the pool's own rows and the allocated ones, per day
    for r in total:
        by_day[(r.key.period_start - at(0)).days] += r.cost  # type: ignore[operator]
    assert per_day == by_day
    assert per_day[:3] == [D("5"), D("5"), D("3.200000001")]


def test_fx_errors_are_cost_s(engine: Engine, ledger: None) -> None:
    with engine.connect() as conn:
        with pytest.raises(UnknownCurrency):
            forecast(conn, query(), 7, currency="ZZZ")
        with pytest.raises(UnknownCurrency):
            forecast(conn, query(), 7, currency="dollars")
        with pytest.raises(MissingFxRate, match="no FX rate"):
            conn.execute(FxRate.__table__.insert().values(base="CHF", quote="USD", day=at(0).date(), rate=1))  # type: ignore[attr-defined]
            forecast(conn, query(), 7, currency="CHF")


def test_a_project_scope_forecasts_only_its_project(engine: Engine, ledger: None) -> None:
    scoped = Access(projects=frozenset({"beta"}))
    with engine.connect() as conn:
        f = forecast(conn, query(access=scoped), 7, currency="USD")
        whole = forecast(conn, query(group_by=(), access=scoped), 7)
    assert [dict(g.dims)[Dimension.PROJECT] for g in f.groups] == ["beta"]
    assert len(whole.groups) == 1 and [c for c, _ in whole.groups[0].cost] == ["USD"]
    # beta's history is 5 USD on day 1 and nothing else: alpha's EUR never shows up.
    with engine.connect() as conn:
        h = history(conn, query(group_by=(), access=scoped))
    assert h.cost == {(0, "USD"): [Z, D("5"), Z, Z, Z, Z, Z, Z]}


@pytest.mark.parametrize(
    ("horizon", "levels", "error"),
    [
        (0, (80.0,), "horizonDays must be between 1 and 92, not 0"),
        (10**9, (80.0,), "horizonDays"),
        (93, (80.0,), "horizonDays"),
        (7, (), "give 1 to 4 interval levels"),
        (7, (10.0, 20.0, 30.0, 40.0, 50.0), "give 1 to 4"),
        (7, (0.0,), "strictly between 0 and 100"),
        (7, (100.0,), "strictly between 0 and 100"),
        (7, (float("nan"),), "strictly between"),
    ],
)
def test_hostile_arguments_are_refused_before_any_sql(
    horizon: int, levels: tuple[float, ...], error: str
) -> None:
    with pytest.raises(InvalidArgument, match=error):
        forecast(None, query(), horizon, levels)  # type: ignore[arg-type]  # no connection needed


def test_window_must_be_whole_days_and_a_week_long() -> None:
    with pytest.raises(WindowNotAligned, match="UTC midnight"):
        forecast(None, query(start=1), 7)  # type: ignore[arg-type]
    with pytest.raises(HistoryTooShort, match="6 days of history"):
        forecast(None, query(days=6), 7)  # type: ignore[arg-type]


def test_too_many_groups_is_refused_before_fitting(put, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    put([row(0, f"GPU-{i}", f"job-{i}", project=f"p{i:02d}", cost="1") for i in range(MAX_GROUPS + 1)])
    with engine.connect() as conn, pytest.raises(TooManyGroups, match=f"more than {MAX_GROUPS} groups"):
        forecast(conn, query(), 7)
    put([])
    with engine.connect() as conn:  # one group fewer is answered
        f = forecast(conn, query(group_by=()), 7)
    assert len(f.groups) == 1 and f.groups[0].gpu_hours.model == HOLT_LINEAR


def test_forecast_groups_and_days(engine: Engine, ledger: None) -> None:
    with engine.connect() as conn:
        f = forecast(conn, query(), 3, (95.0, 80.0))
    assert f.first_day == at(24 * 8) and f.levels == (80.0, 95.0) and f.history_days == 8
    assert [dict(g.dims)[Dimension.PROJECT] for g in f.groups] == [None, "alpha", "beta"]
    alpha = f.groups[1]
    assert [c for c, _ in alpha.cost] == ["EUR", "USD"]
    for s in (alpha.gpu_hours, alpha.effective_gpu_hours, *(s for _, s in alpha.cost)):
        assert s.mean.shape == (3,) and (s.mean >= 0).all()
        lo80, hi80 = s.bounds[80.0]
        lo95, hi95 = s.bounds[95.0]
        assert (
            (lo95 <= lo80).all()
            and (lo80 <= s.mean).all()
            and (s.mean <= hi80).all()
            and (hi80 <= hi95).all()
        )


# --- the model ------------------------------------------------------------------------------------

WEEK = np.array([10.0, 12.0, 8.0, 9.0, 11.0, -25.0, -25.0])


def _seasonal(days: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    t = np.arange(days)
    rng = np.random.default_rng(seed)
    return 100.0 + 0.5 * t + WEEK[t % 7] + noise * rng.standard_normal(days)


def test_holt_winters_recovers_the_weekly_pattern_and_trend() -> None:
    """8 weeks of level 100 + 0.5/day with a weekday pattern (weekends −25): the forecast of the
    next two weeks is within 1.5 of the truth every day (3 noise σ), so the pattern is recovered."""
    full = _seasonal(70, noise=0.5, seed=1)
    f = forecast_series(full[:56], 14, (80.0, 95.0))
    assert f.model == HOLT_WINTERS
    truth = _seasonal(70)[56:]
    # The weekday effects: the forecast less the true level and trend, against the pattern.
    t = np.arange(56, 70)
    assert np.abs(f.mean - (100.0 + 0.5 * t) - WEEK[t % 7]).max() < 1.5
    assert 0.2 < f.sigma < 1.0  # the noise's σ 0.5, estimated
    lo, hi = f.bounds[95.0]
    assert ((lo <= truth) & (truth <= hi)).mean() >= 0.85


def test_intervals_widen_with_the_horizon() -> None:
    f = forecast_series(_seasonal(28, noise=2.0, seed=4), 28, (80.0,))
    lo, hi = f.bounds[80.0]
    width = hi - lo
    assert (np.diff(width) >= -1e-9).all() and width[-1] > width[0]


def test_fallbacks_by_history_length() -> None:
    assert forecast_series(_seasonal(13, noise=1.0), 7, (80.0,)).model == HOLT_LINEAR
    assert forecast_series(_seasonal(14, noise=1.0), 7, (80.0,)).model == HOLT_WINTERS
    with pytest.raises(HistoryTooShort):
        forecast_series(_seasonal(6), 7, (80.0,))
    flat = forecast_series([4.0] * 20, 5, (80.0, 95.0))
    assert flat.model == CONSTANT and flat.mean.tolist() == [4.0] * 5
    assert flat.bounds[95.0][0].tolist() == [4.0] * 5 == flat.bounds[95.0][1].tolist()


def test_holt_linear_follows_a_trend() -> None:
    y = 10.0 + 3.0 * np.arange(10) + np.array([0.1, -0.1] * 5)
    f = forecast_series(y, 3, (80.0,))
    assert f.model == HOLT_LINEAR
    assert np.abs(f.mean - (10.0 + 3.0 * np.arange(10, 13))).max() < 0.5


def test_never_negative() -> None:
    y = np.maximum(50.0 - 5.0 * np.arange(21) + WEEK[np.arange(21) % 7], 0.0)
    f = forecast_series(y, 14, (95.0,))
    assert (f.mean >= 0).all() and (f.bounds[95.0][0] >= 0).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=1e7, allow_nan=False), min_size=7, max_size=60),
    st.integers(min_value=1, max_value=40),
)
def test_any_history_gives_ordered_finite_non_negative_bands(history: list[float], horizon: int) -> None:
    f = forecast_series(history, horizon, (50.0, 80.0, 99.0))
    assert f.mean.shape == (horizon,) and np.isfinite(f.mean).all() and (f.mean >= 0).all()
    lo50, hi50 = f.bounds[50.0]
    lo99, hi99 = f.bounds[99.0]
    lo80, hi80 = f.bounds[80.0]
    for a, b in ((lo99, lo80), (lo80, lo50), (lo50, f.mean), (f.mean, hi50), (hi50, hi80), (hi80, hi99)):
        assert np.isfinite(a).all() and (a >= 0).all()
        assert (a <= b * (1 + 1e-12) + 1e-9).all()


def test_seasonal_naive_fallback_by_hand() -> None:
    """Two weeks: week 2 = week 1 + 1 each day, so σ = 1; the forecast repeats week 2; the 95 %
    interval of week 1 ahead is ± 1.959964 and of week 2 ahead ± 1.959964 × √2."""
    week1 = np.array([10.0, 12, 8, 9, 11, 0, 0])
    f = seasonal_naive(np.concatenate([week1, week1 + 1]), 9, (95.0,))
    assert f.model == SEASONAL_NAIVE and f.sigma == 1.0
    assert f.mean.tolist() == [11, 13, 9, 10, 12, 1, 1, 11, 13]
    lo, hi = f.bounds[95.0]
    assert hi[0] - f.mean[0] == pytest.approx(1.959964, abs=1e-6)
    assert hi[7] - f.mean[7] == pytest.approx(1.959964 * 2**0.5, abs=1e-6)
    assert lo[5] == 0.0  # 1 − 1.96 clipped at 0


@pytest.mark.parametrize(
    "history",
    [
        [0.0] * 6 + [2.2250738585072014e-308],  # found by hypothesis: log(0) inside statsmodels
        [float(d) for d in range(14)],  # a straight line the trend model fits exactly (SSE 0)
    ],
)
def test_a_history_fitted_exactly_still_forecasts(history: list[float]) -> None:
    f = forecast_series(history, 3, (80.0,))
    assert np.isfinite(f.mean).all() and (f.mean >= 0).all()
    lo, hi = f.bounds[80.0]
    assert (lo <= f.mean).all() and (f.mean <= hi).all()
