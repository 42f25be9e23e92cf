"""idle_waste(): idle split allocated/unallocated, thresholds from the histogram, idle streaks."""

from __future__ import annotations

from decimal import Decimal

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.dims import Dimension, Granularity
from service.analytics.errors import UnsupportedThreshold
from service.analytics.idle import IdleRow, idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window

D = Decimal
IDLE_0_1 = {"idle_s": 3600.0, "hist_0_1_s": 3600.0, "obs_s_sm_active": 3600.0, "idle_s_sm_active": 3600.0}
IDLE_1_5 = {"idle_s": 3600.0, "hist_1_5_s": 3600.0, "obs_s_sm_active": 3600.0, "idle_s_sm_active": 3600.0}
BUSY = {"busy_s": 2200.0, "hist_50_75_s": 3600.0, "obs_s_sm_active": 3600.0}


@pytest.fixture
def idle_ledger(put) -> None:  # type: ignore[no-untyped-def]
    a = [
        row(0, cost="1", idle_cost="1", **IDLE_0_1),
        row(1, "GPU-a", "job-1", project="alpha", cost="1", idle_cost="1", **IDLE_0_1),
        row(2, "GPU-a", "job-1", project="alpha", cost="1", idle_cost="0", **BUSY),
        *(row(h, cost="1", idle_cost="1", **IDLE_1_5) for h in (3, 4, 5)),
        row(6, observed_s=0.0, cost="1", idle_cost="0"),  # present, unobserved: not idle, breaks the run
        row(7, cost="1", idle_cost="1", **IDLE_0_1),
    ]
    half = {"idle_s": 1800.0, "hist_0_1_s": 1800.0, "hist_75_100_s": 1800.0, "busy_s": 1700.0}
    b = [
        row(h, "GPU-b", "job-2", project="beta", environment="aws", cost="2", idle_cost="1", **half)
        for h in range(4)
    ]
    put([*a, *b])


def run(engine: Engine, group_by=(), **kw) -> list[IdleRow]:  # type: ignore[no-untyped-def]
    gran = kw.pop("granularity", Granularity.TOTAL)
    q = LedgerQuery(check_window(at(0), at(8), max_days=400), gran, tuple(group_by), access=ALL)
    with engine.connect() as conn:
        return idle_waste(conn, q, **kw)


def test_default_threshold_by_device(engine: Engine, idle_ledger: None) -> None:
    a, b = run(engine, [Dimension.DEVICE])
    assert (a.key.value(Dimension.DEVICE), b.key.value(Dimension.DEVICE)) == ("GPU-a", "GPU-b")
    assert (a.idle_gpu_hours, a.allocated_idle_gpu_hours, a.unallocated_idle_gpu_hours) == (6.0, 1.0, 5.0)
    assert (a.idle_cost, a.allocated_idle_cost, a.unallocated_idle_cost) == (D(6), D(1), D(5))
    assert a.longest_idle_streak_hours == 3  # hours 3–5; hour 6 unobserved ends it
    assert (b.idle_gpu_hours, b.allocated_idle_gpu_hours, b.idle_cost) == (2.0, 2.0, D(4))
    assert b.longest_idle_streak_hours == 0  # never idle for a whole observed hour
    assert a.metric == "sm_active"


def test_threshold_one_percent_from_the_histogram(engine: Engine, idle_ledger: None) -> None:
    a, b = run(engine, [Dimension.DEVICE], threshold_pct=1.0)
    assert (a.idle_gpu_hours, a.allocated_idle_gpu_hours, a.unallocated_idle_gpu_hours) == (3.0, 1.0, 2.0)
    assert (a.allocated_idle_cost, a.unallocated_idle_cost) == (D(1), D(2))
    assert a.longest_idle_streak_hours == 2  # hours 0–1
    assert (b.idle_gpu_hours, b.idle_cost) == (2.0, D(4))  # Σ cost × idle_s / present_s = 4 × 2 × ½


def test_total_and_periods(engine: Engine, idle_ledger: None) -> None:
    [total] = run(engine)
    assert (total.idle_gpu_hours, total.idle_cost, total.longest_idle_streak_hours) == (8.0, D(10), 3)
    hourly = run(engine, granularity=Granularity.HOUR)
    assert [(r.key.period_start, r.longest_idle_streak_hours) for r in hourly] == [
        (at(h), 1 if h in (0, 1, 3, 4, 5, 7) else 0) for h in range(8)
    ]


def test_explicit_metric_uses_its_idle_seconds(engine: Engine, idle_ledger: None) -> None:
    [total] = run(engine, metric="sm_active")
    assert total.idle_gpu_hours == 6.0 and total.metric == "sm_active"
    assert total.idle_cost == D(6)  # Σ cost × idle_s_sm_active / present_s
    assert total.longest_idle_streak_hours == 3


@pytest.mark.parametrize(("threshold", "metric"), [(3.0, None), (0.0, None), (10.0, "gpu_util")])
def test_unsupported_thresholds(
    engine: Engine, idle_ledger: None, threshold: float, metric: str | None
) -> None:
    with pytest.raises(UnsupportedThreshold) as err:
        run(engine, threshold_pct=threshold, metric=metric)
    assert err.value.code == "UNSUPPORTED_THRESHOLD"


def test_mig_instances_count_their_fraction(put, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    put([row(h, "MIG-1", gpu_fraction=1 / 7, cost="0.5", idle_cost="0.5", **IDLE_0_1) for h in range(7)])
    [total] = run(engine)
    assert total.idle_gpu_hours == pytest.approx(1.0)
    assert total.longest_idle_streak_hours == 7
