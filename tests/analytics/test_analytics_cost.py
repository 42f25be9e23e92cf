"""cost(): idle policies (exact conservation), unpriced time, FX conversion and its errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.cost import CostRow, cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy
from service.analytics.errors import MissingFxRate, UnknownCurrency
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.models import FxRate

D = Decimal


@pytest.fixture
def priced(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            row(0, "GPU-a", "job-1", project="alpha", cost="3", idle_cost="0.5"),
            row(0, "GPU-b", "job-2", project="beta", environment="aws", cost="1", idle_cost="0",
                rate_source="billing:aws"),
            row(1, "GPU-a", cost="2.000000001", idle_cost="2.000000001"),
            row(1, "GPU-b", "job-2", project="beta", environment="aws", cost="1", idle_cost="0",
                rate_source="billing:aws"),
            row(0, "GPU-c", "job-3", project="gamma", cost=None, currency=None, rate_source=None),
        ]
    )  # fmt: skip


def run(
    engine: Engine, group_by=(), policy=IdlePolicy.SEPARATE, currency=None, hours=2, **kw
) -> list[CostRow]:  # type: ignore[no-untyped-def]
    q = LedgerQuery(check_window(at(0), at(hours), max_days=400), group_by=tuple(group_by), access=ALL, **kw)
    with engine.connect() as conn:
        return cost(conn, q, policy, currency)


def flat(rows: list[CostRow], dim: Dimension = Dimension.PROJECT) -> list[tuple[object, ...]]:
    return [
        (r.key.value(dim), r.currency, r.cost, r.idle_cost, r.shared_idle_cost, r.unallocated) for r in rows
    ]


def test_separate_keeps_the_pool_as_its_own_row(engine: Engine, priced: None) -> None:
    rows = run(engine, [Dimension.PROJECT])
    assert flat(rows) == [
        (None, "USD", D("2.000000001"), D("2.000000001"), 0, True),
        ("alpha", "USD", D("3"), D("0.5"), 0, False),
        ("beta", "USD", D("2"), D("0"), 0, False),
        ("gamma", "XXX", D("0"), D("0"), 0, False),  # unpriced: amount 0, and says so
    ]
    assert rows[3].unpriced_gpu_hours == 1.0 and rows[3].rate_source is None
    assert rows[1].rate_source == "tco:site-1" and rows[2].rate_source == "billing:aws"
    [usd_alloc, pool, _] = run(engine)
    assert usd_alloc.rate_source == "mixed" and pool.rate_source == "tco:site-1"


def test_share_by_usage_splits_the_pool_by_cost_exactly(engine: Engine, priced: None) -> None:
    rows = run(engine, [Dimension.PROJECT], IdlePolicy.SHARE_BY_USAGE)
    # pool 2.000000001 over 3 : 2 → 1.2000000006 / 0.8000000004: the odd nano goes to the larger remainder
    assert flat(rows) == [
        ("alpha", "USD", D("4.200000001"), D("1.700000001"), D("1.200000001"), False),
        ("beta", "USD", D("2.800000000"), D("0.800000000"), D("0.800000000"), False),
        ("gamma", "XXX", D("0"), D("0"), 0, False),
    ]
    assert rows[0].gpu_hours == 1.0  # GPU-hours are not redistributed


def test_share_evenly(engine: Engine, priced: None) -> None:
    rows = run(engine, [Dimension.PROJECT], IdlePolicy.SHARE_EVENLY)
    assert [(r.key.value(Dimension.PROJECT), r.cost) for r in rows] == [
        ("alpha", D("4.000000001")),
        ("beta", D("3.000000000")),
        ("gamma", D("0")),
    ]


def test_pool_stays_within_grouped_device_dimensions(engine: Engine, priced: None) -> None:
    rows = run(engine, [Dimension.ENVIRONMENT, Dimension.PROJECT], IdlePolicy.SHARE_BY_USAGE)
    got = [(r.key.value(Dimension.ENVIRONMENT), r.key.value(Dimension.PROJECT), r.cost) for r in rows]
    # the on-prem pool lands on alpha (on-prem) only, never on beta (aws)
    assert got == [
        ("aws", "beta", D("2")),
        ("onprem", "alpha", D("5.000000001")),
        ("onprem", "gamma", D("0")),
    ]


def test_a_bucket_without_allocated_rows_keeps_its_pool(engine: Engine, priced: None) -> None:
    rows = run(engine, [Dimension.PROJECT], IdlePolicy.SHARE_EVENLY, granularity=Granularity.HOUR)
    hour1 = [flat([r])[0] for r in rows if r.key.period_start == at(1)]
    assert hour1 == [("beta", "USD", D("3.000000001"), D("2.000000001"), D("2.000000001"), False)]
    # grouped by device, GPU-a's pool of hour 1 has no work of GPU-a beside it: it stays unallocated
    by_device = run(engine, [Dimension.DEVICE], IdlePolicy.SHARE_EVENLY, granularity=Granularity.HOUR)
    assert [
        (r.key.value(Dimension.DEVICE), r.unallocated, r.cost)
        for r in by_device
        if r.key.period_start == at(1)
    ] == [
        ("GPU-a", True, D("2.000000001")),
        ("GPU-b", False, D("1")),
    ]


@pytest.mark.parametrize("policy", list(IdlePolicy))
@pytest.mark.parametrize(
    "group_by", [[Dimension.PROJECT], [Dimension.USER, Dimension.DEVICE], [Dimension.WORKLOAD]]
)
def test_conservation_every_policy(engine: Engine, priced: None, policy: IdlePolicy, group_by) -> None:  # type: ignore[no-untyped-def]
    def totals(rows: list[CostRow]) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for r in rows:
            out[r.currency] = out.get(r.currency, D(0)) + r.cost
        return out

    assert (
        totals(run(engine, group_by, policy))
        == totals(run(engine, [], policy))
        == {"USD": D("7.000000001"), "XXX": 0}
    )


# --- FX -------------------------------------------------------------------------------------------------


@pytest.fixture
def euro(put) -> None:  # type: ignore[no-untyped-def]
    day = at(0).date()
    put(
        [
            row(0, "GPU-a", "job-1", project="alpha", cost="10", idle_cost="1", currency="EUR"),
            row(0, "GPU-b", "job-2", project="beta", cost="5", idle_cost="0", currency="EUR"),
            row(1, "GPU-b", cost="1", idle_cost="1", currency="EUR"),
            row(24, "GPU-a", "job-1", project="alpha", cost="4", idle_cost="0", currency="EUR"),
            row(0, "GPU-d", "job-2", project="beta", cost="1", idle_cost="0", currency="USD"),
            row(48, "GPU-a", "job-1", project="alpha", cost="1", idle_cost="0", currency="EUR"),
            FxRate(base="EUR", quote="USD", day=day, rate=D("1.1")),
            FxRate(base="USD", quote="EUR", day=day + dt.timedelta(days=1), rate=D("0.8")),  # inverse
        ]
    )


def test_fx_converts_per_day_direct_and_inverse(engine: Engine, euro: None) -> None:
    rows = run(engine, [Dimension.PROJECT], currency="usd", hours=48)
    assert [(r.key.value(Dimension.PROJECT), r.currency, r.cost, r.idle_cost) for r in rows] == [
        (None, "USD", D("1.1"), D("1.1")),
        ("alpha", "USD", D("11") + D("5"), D("1.1")),  # day 0 at 1.1, day 1 at 1/0.8
        ("beta", "USD", D("5.5") + D("1"), D("0")),
    ]
    assert sum(r.cost for r in run(engine, [], IdlePolicy.SHARE_BY_USAGE, currency="USD", hours=48)) == D(
        "23.6"
    )
    per_currency = run(engine, [], hours=48)
    assert {(r.currency, r.unallocated): r.cost for r in per_currency} == {
        ("EUR", False): D("19"),
        ("EUR", True): D("1"),
        ("USD", False): D("1"),
    }


def test_fx_missing_rate_names_pair_and_day(engine: Engine, euro: None) -> None:
    with pytest.raises(MissingFxRate, match=r"EUR/USD .*2025-01-08") as err:
        run(engine, [Dimension.PROJECT], currency="USD", hours=72)
    assert err.value.code == "MISSING_FX_RATE"


@pytest.mark.parametrize("code", ["ZZZ", "US", "dollars", "U1D"])
def test_unknown_currency(engine: Engine, euro: None, code: str) -> None:
    with pytest.raises(UnknownCurrency) as err:
        run(engine, currency=code)
    assert err.value.code == "UNKNOWN_CURRENCY"


@pytest.mark.parametrize("policy", list(IdlePolicy))
def test_fx_conservation_with_an_awkward_rate(put, engine: Engine, policy: IdlePolicy) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            *(row(h, f"GPU-{i}", f"job-{i}", project=f"p{i % 3}", cost=f"0.00000000{i + 1}", idle_cost="0",
                  currency="EUR") for h in range(3) for i in range(5)),
            *(row(h, "GPU-x", cost="1.000000007", idle_cost="1.000000007", currency="EUR") for h in range(3)),
            FxRate(base="USD", quote="EUR", day=at(0).date(), rate=D("3")),
        ]
    )  # fmt: skip
    total = sum(r.cost for r in run(engine, [], policy, currency="USD", hours=3))
    by_project = run(engine, [Dimension.PROJECT], policy, currency="USD", hours=3)
    assert sum(r.cost for r in by_project) == total
    assert total == D("1.000000022")  # (3 × 1.000000007 + 3 × 15e-9) EUR / 3, rounded once
