"""usage(): GPU-hours, effective GPU-hours, utilization, idle and coverage, MIG-weighted."""

from __future__ import annotations

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.dims import Dimension, Granularity, LedgerFilter
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window

MIG = 1 / 7


@pytest.fixture
def mixed(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            # full GPU, SM activity known: half busy by SM, fully busy by "GPU util"
            row(0, "GPU-a", "job-1", project="alpha", busy_s=1800.0, obs_s_sm_active=3600.0,
                busy_s_sm_active=1800.0, obs_s_gpu_util=3600.0, busy_s_gpu_util=3600.0, energy_j=3.6e6),
            # same GPU, next hour, nobody: half observed, all of it idle
            row(1, "GPU-a", observed_s=1800.0, idle_s=1800.0, obs_s_sm_active=1800.0,
                idle_s_sm_active=1800.0, obs_s_gpu_util=1800.0, idle_s_gpu_util=1800.0, energy_j=1.8e6),
            # a 1g MIG instance (1/7 GPU) with GPU util only, 25 % busy
            row(0, "MIG-m", "job-2", project="beta", environment="aws", gpu_fraction=MIG,
                default_metric="gpu_util", busy_s=900.0, obs_s_gpu_util=3600.0, busy_s_gpu_util=900.0),
        ]
    )  # fmt: skip


def q(**kw):  # type: ignore[no-untyped-def]
    return LedgerQuery(check_window(at(0), at(2), max_days=400), access=ALL, **kw)


def test_total_default_metric_mixes_sm_and_gpu_util(engine: Engine, mixed: None) -> None:
    with engine.connect() as conn:
        [r] = usage(conn, q())
    assert r.key.period_start is None
    assert r.gpu_hours == pytest.approx(2 + MIG)
    assert r.effective_gpu_hours == pytest.approx(0.5 + 0.25 * MIG)
    assert r.idle_gpu_hours == pytest.approx(0.5)
    assert r.observed_gpu_hours == pytest.approx(1.5 + MIG)
    assert r.utilization_pct == pytest.approx((0.5 + 0.25 * MIG) / (1.5 + MIG) * 100)
    assert r.coverage_pct == pytest.approx((1.5 + MIG) / (2 + MIG) * 100)
    assert r.energy_kwh == pytest.approx(1.5)
    assert r.metric == "sm_active_else_gpu_util"


def test_explicit_metric_per_device(engine: Engine, mixed: None) -> None:
    with engine.connect() as conn:
        rows = usage(conn, q(group_by=(Dimension.DEVICE,)), metric="gpu_util")
        sm = usage(conn, q(group_by=(Dimension.DEVICE,)), metric="sm_active")
    by_dev = {r.key.value(Dimension.DEVICE): r for r in rows}
    assert set(by_dev) == {"GPU-a", "MIG-m"}
    assert by_dev["GPU-a"].effective_gpu_hours == pytest.approx(1.0)
    assert by_dev["GPU-a"].utilization_pct == pytest.approx(1.0 / 1.5 * 100)
    assert by_dev["MIG-m"].effective_gpu_hours == pytest.approx(0.25 * MIG)
    assert by_dev["MIG-m"].utilization_pct == pytest.approx(25.0)
    assert {r.metric for r in rows} == {"gpu_util"}
    # the MIG instance has no SM activity: nothing observed, utilization unknown, not 0
    sm_mig = next(r for r in sm if r.key.value(Dimension.DEVICE) == "MIG-m")
    assert sm_mig.effective_gpu_hours == 0 and sm_mig.utilization_pct is None and sm_mig.coverage_pct == 0


def test_group_by_and_filter(engine: Engine, mixed: None) -> None:
    with engine.connect() as conn:
        by_env = usage(conn, q(group_by=(Dimension.ENVIRONMENT, Dimension.PROJECT)))
        alloc = usage(conn, q(filter=LedgerFilter(unallocated=False)))
        aws = usage(conn, q(filter=LedgerFilter({Dimension.ENVIRONMENT: ["aws"]})))
    keys = [(r.key.value(Dimension.ENVIRONMENT), r.key.value(Dimension.PROJECT)) for r in by_env]
    assert keys == [("aws", "beta"), ("onprem", None), ("onprem", "alpha")]  # NULLs first
    assert [r.metric for r in by_env] == ["gpu_util", "sm_active", "sm_active"]
    assert alloc[0].gpu_hours == pytest.approx(1 + MIG)
    assert aws[0].gpu_hours == pytest.approx(MIG) and aws[0].energy_kwh is None


def test_hourly_periods(engine: Engine, mixed: None) -> None:
    with engine.connect() as conn:
        rows = usage(conn, q(granularity=Granularity.HOUR))
    assert [(r.key.period_start, round(r.gpu_hours, 9)) for r in rows] == [
        (at(0), round(1 + MIG, 9)),
        (at(1), 1.0),
    ]


def test_empty_window_total_is_one_zero_row(engine: Engine) -> None:
    with engine.connect() as conn:
        [r] = usage(conn, q())
        grouped = usage(conn, q(group_by=(Dimension.PROJECT,)))
    assert r.gpu_hours == 0 and r.utilization_pct is None and r.energy_kwh is None
    assert grouped == []
