"""demand_capacity(): allocated vs installed GPUs per hour and pool, and the saturated hours.

By hand, pool onprem × H200, two GPUs:

=====  =====================================  =========  =========  =========
hour   rows                                   installed  allocated  saturated
=====  =====================================  =========  =========  =========
0      a held 3600 s; b free 3600 s           2          1          no
1      a held 3600 s; b held 1800, free 1800  2          1.5        no (75 %)
2      a held; b time-sliced 2 × 1800 s held  2          2          yes
=====  =====================================  =========  =========  =========

and pool aws × H100: hour 0 a 3g MIG slice (3/7) held all hour, alone: installed = allocated = 3/7,
saturated. DAY: onprem 3 hours, 6 installed and 4.5 allocated GPU-hours, 1 saturated hour.
"""

from __future__ import annotations

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import Access, Forbidden
from service.analytics.capacity import demand_capacity
from service.analytics.dims import Dimension, Granularity
from service.analytics.errors import InvalidArgument
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window

ALL = Access.all()
POOL = (Dimension.ENVIRONMENT, Dimension.GPU_MODEL)


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            row(0, "GPU-a", "job-1", project="p"),
            row(0, "GPU-b"),
            row(1, "GPU-a", "job-1", project="p"),
            row(1, "GPU-b", "job-2", project="q", present_s=1800.0, observed_s=1800.0),
            row(1, "GPU-b", present_s=1800.0, observed_s=1800.0),
            row(2, "GPU-a", "job-1", project="p"),
            row(2, "GPU-b", "job-2", project="q", present_s=1800.0, observed_s=1800.0),
            row(2, "GPU-b", "job-3", project="r", present_s=1800.0, observed_s=1800.0),
            row(0, "MIG-x", "job-4", project="p", environment="aws", gpu_model="H100", gpu_fraction=3 / 7),
        ]
    )


def run(engine: Engine, granularity: Granularity, threshold_pct: float = 100.0, **kw):  # type: ignore[no-untyped-def]
    q = LedgerQuery(
        check_window(at(0), at(24), max_days=400),
        granularity,
        kw.pop("group_by", POOL),
        access=kw.pop("access", ALL),
    )
    with engine.connect() as conn:
        return demand_capacity(conn, q, threshold_pct)


def test_hourly_saturation(engine: Engine, ledger: None) -> None:
    rows = run(engine, Granularity.HOUR)
    got = [
        (r.key.period_start, r.key.value(Dimension.ENVIRONMENT), r.installed_gpu_hours, r.allocated_gpu_hours,
         r.saturated_hours)
        for r in rows
    ]  # fmt: skip
    assert got == [
        (at(0), "aws", pytest.approx(3 / 7), pytest.approx(3 / 7), 1),
        (at(0), "onprem", 2.0, 1.0, 0),
        (at(1), "onprem", 2.0, 1.5, 0),
        (at(2), "onprem", 2.0, 2.0, 1),
    ]


def test_daily_summary(engine: Engine, ledger: None) -> None:
    aws, onprem = run(engine, Granularity.DAY)
    assert onprem.key.value(Dimension.GPU_MODEL) == "H200" and onprem.key.period_start == at(0)
    assert (onprem.hours, onprem.installed_gpu_hours, onprem.allocated_gpu_hours) == (3, 6.0, 4.5)
    assert (onprem.peak_installed_gpus, onprem.peak_allocated_gpus, onprem.saturated_hours) == (2.0, 2.0, 1)
    assert onprem.allocated_pct == 75.0
    assert (aws.hours, aws.saturated_hours) == (1, 1)


def test_threshold_counts_the_75_pct_hour(engine: Engine, ledger: None) -> None:
    _, onprem = run(engine, Granularity.TOTAL, 75.0)
    assert onprem.saturated_hours == 2
    _, onprem = run(engine, Granularity.TOTAL, 75.1)
    assert onprem.saturated_hours == 1


def test_pool_of_everything(engine: Engine, ledger: None) -> None:
    (total,) = run(engine, Granularity.TOTAL, group_by=())
    # hour 0: installed 2 + 3/7, allocated 1 + 3/7: not saturated; hour 2 is.
    assert total.hours == 3 and total.saturated_hours == 1
    assert total.installed_gpu_hours == pytest.approx(6 + 3 / 7)


def test_capacity_is_account_wide(engine: Engine, ledger: None) -> None:
    with pytest.raises(Forbidden):
        run(engine, Granularity.DAY, access=Access(projects=frozenset({"p"})))


@pytest.mark.parametrize(
    ("threshold", "group_by", "error"),
    [
        (100.0, (Dimension.PROJECT,), "device dimensions, not PROJECT"),
        (0.0, POOL, "allocationPct"),
        (100.5, POOL, "allocationPct"),
        (float("nan"), POOL, "allocationPct"),
    ],
)
def test_refusals(engine: Engine, threshold: float, group_by: tuple[Dimension, ...], error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        run(engine, Granularity.DAY, threshold, group_by=group_by)
