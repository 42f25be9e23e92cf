"""breakEven on hand-built ledger rows: every number below is computed by hand (docs/break-even.md).

The owned fleet: site ``dc9`` (USD) with one H200, 4 hours in the window ``[D0, D0+4h)``:

* capex 43,800 over 5 years × 8,760 h = **1.0 /h**, opex **0.5 /h** → fixed F = **1.5** per GPU-hour;
* energy 0.10 /kWh × PUE 1.5 = k = **0.15 /kWh**;
* hours 0 and 1: nobody holds it, idle (busy 0 s), 100 W → 360,000 J each;
  hour 2: job ``j`` holds it, busy 3,600 s at 600 W → 2,160,000 J;
  hour 3: job ``j`` holds it, idle at 100 W → 360,000 J.
  The least-squares fit of J = P_busy·busy_s + P_idle·(present − busy)_s is exact: **600 W / 100 W**;
  busy energy 0.15 × 0.6 = **0.09 /h**, idle 0.15 × 0.1 = **0.015 /h**;
* allocation a = 2 of 4 hours = **50 %**; utilization of allocated time u = 3,600 / 7,200 = **50 %**.

Owning per present GPU-hour = F + idle + a·u·(busy − idle) = 1.5 + 0.015 + 0.25 × 0.075 = **1.53375**;
per allocated GPU-hour 1.53375 / 0.5 = **3.0675**; per effective GPU-hour 1.53375 / 0.25 = **6.135**.

Break-even a* = (F + idle) / (R − u·(busy − idle)) = 1.515 / (R − 0.0375):

* catalog p5e.48xlarge 48.00 /instance-h ÷ 8 GPUs: R = 6 → a* = 1.515 / 5.9625 = **25.408805031 %**;
* configured 3-year commitment R = 2 → 1.515 / 1.9625 = **77.197452229 %**;
* configured spot 1.20 EUR at 1.25 USD/EUR = R = 1.5 → 1.515 / 1.4625 > 1: **renting always cheaper**;
* the bills: two cloud GPU-hours billed 10 + 14 → R = 12 → 1.515 / 11.9625 = **12.664576803 %**.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from decimal import Decimal as D
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_rows import D0, at, row
from sqlalchemy import Engine

from service.analytics import break_even as be
from service.analytics.access import Access
from service.analytics.dims import Dimension, LedgerFilter
from service.analytics.errors import QueryError
from service.analytics.query import LedgerQuery
from service.analytics.window import Window
from service.models import Device, FxRate
from service.pricing.break_even import Owning, Planning, break_even
from service.settings import Settings

Put = Callable[[Iterable[Any]], None]
WINDOW = Window(D0, at(4))
CATALOG = """# test catalog, version t1 (2026-11-30)
provider,instance_type,region,price_per_instance_hour,currency,as_of,source
aws,p5e.48xlarge,us-east-1,48.00,USD,2026-11-01,test
aws,p5.48xlarge,us-east-1,55.04,USD,2026-11-01,test
"""
SITE = {
    "name": "dc9",
    "match_region": "dc9",
    "currency": "USD",
    "capex_per_gpu": {"H200": "43800"},
    "amortization_years": "5",
    "price_per_kwh": "0.10",
    "pue": "1.5",
    "opex_per_gpu_hour": "0.5",
    "assumed_load": "0.5",
}
OPTIONS = [
    {"name": "h200-3y", "provider": "aws", "gpu_model": "NVIDIA H200", "option": "3y",
     "price_per_gpu_hour": "2", "currency": "USD"},
    {"name": "h200-spot", "provider": "aws", "gpu_model": "NVIDIA H200", "option": "spot",
     "price_per_gpu_hour": "1.20", "currency": "EUR"},
]  # fmt: skip


@pytest.fixture
def planning(tmp_path: Path) -> Planning:
    path = tmp_path / "prices.csv"
    path.write_text(CATALOG)
    return Settings(sites=[SITE], rent_options=OPTIONS, price_catalog_path=path).planning()


def owned(energy: bool = True) -> list[Any]:
    def hour(h: int, workload: str, busy_s: float, watts: float) -> Any:
        joules = watts * 3600 if energy else None
        return row(h, "GPU-h200", workload, region="dc9", busy_s=busy_s, energy_j=joules)

    return [hour(0, "", 0, 100), hour(1, "", 0, 100), hour(2, "j", 3600, 600), hour(3, "j", 0, 100)]


def billed() -> list[Any]:
    cloud = {"environment": "aws", "provider": "aws", "region": "us-east-1", "instance_type": "p5e.48xlarge",
             "gpu_model": "NVIDIA H200", "rate_source": "billing:cur"}  # fmt: skip
    return [row(0, "i-1/gpu0", "", cost="10", **cloud), row(1, "i-1/gpu0", "", cost="14", **cloud)]


def fx() -> list[Any]:
    return [FxRate(base="EUR", quote="USD", day=D0.date(), rate=D("1.25"))]


def answer(
    engine: Engine, planning: Planning, q: LedgerQuery | None = None, **kw: Any
) -> list[be.BreakEvenRow]:
    with engine.connect() as conn:
        return be.break_even_rows(conn, q or LedgerQuery(WINDOW, access=Access.all()), planning, **kw)


def by_option(rows: list[be.BreakEvenRow]) -> dict[tuple[str | None, str], be.BreakEvenRow]:
    return {(r.option, r.rate_source): r for r in rows}


def test_hand_computed_h200(engine: Engine, put: Put, planning: Planning) -> None:
    put([*owned(), *billed(), *fx()])
    rows = answer(engine, planning)
    assert {(r.site, r.gpu_model) for r in rows} == {("dc9", "H200")}
    first = rows[0]
    assert (first.measured_allocation_pct, first.measured_utilization_pct) == (50.0, 50.0)
    assert (first.allocation_pct, first.utilization_pct, first.what_if) == (50.0, 50.0, False)
    assert (first.energy_basis, first.busy_power_w, first.idle_power_w) == ("MEASURED", D(600), D(100))
    assert (first.own_fixed, first.own_busy_energy, first.own_idle_energy) == (
        D("1.5"),
        D("0.09"),
        D("0.015"),
    )
    assert first.own_cost_per_gpu_hour == D("1.53375")
    assert first.own_cost_per_allocated_gpu_hour == D("3.0675")
    assert first.own_cost_per_effective_gpu_hour == D("6.135")
    assert (first.currency, first.metric, first.gpu_hours, first.allocated_gpu_hours) == (
        "USD",
        "sm_active",
        4,
        2,
    )
    got = {
        k: (r.rent_cost_per_gpu_hour, r.break_even_allocation_pct, r.outcome, r.cheaper_now)
        for k, r in by_option(rows).items()
    }
    assert got == {
        ("BILLS", "BILLS"): (D(12), 12.664576803, "BREAKS_EVEN", "OWN"),
        ("COMMITMENT_3Y", "CONFIG"): (D(2), 77.197452229, "BREAKS_EVEN", "RENT"),
        ("SPOT", "CONFIG"): (D("1.5"), None, "RENT_ALWAYS", "RENT"),
        ("ON_DEMAND", "CATALOG"): (D(6), 25.408805031, "BREAKS_EVEN", "OWN"),
    }
    catalog = by_option(rows)[("ON_DEMAND", "CATALOG")]
    assert catalog.rate_source_detail == "catalog t1 (2026-11-30), observed 2026-11-01 (test)"
    assert (catalog.provider, catalog.instance_type, catalog.region) == ("aws", "p5e.48xlarge", "us-east-1")
    assert catalog.rent_cost_per_effective_gpu_hour == D(12)  # 6 / 0.5
    assert by_option(rows)[("BILLS", "BILLS")].rate_source_detail == "bills: 2 GPU-hours in the window"
    assert [r.rate_source for r in rows] == ["BILLS", "CONFIG", "CONFIG", "CATALOG"]


def test_what_if(engine: Engine, put: Put, planning: Planning) -> None:
    put([*owned(), *fx()])
    rows = answer(engine, planning, what_if=be.WhatIf(allocation_pct=100, utilization_pct=100))
    r = by_option(rows)[("ON_DEMAND", "CATALOG")]
    assert (r.allocation_pct, r.utilization_pct, r.what_if) == (100.0, 100.0, True)
    assert (r.measured_allocation_pct, r.measured_utilization_pct) == (50.0, 50.0)
    # 1.5 + 0.09 at full use; a* = 1.515 / (6 − 0.075) = 25.569620253 %
    assert r.own_cost_per_allocated_gpu_hour == r.own_cost_per_effective_gpu_hour == D("1.59")
    assert r.break_even_allocation_pct == 25.569620253


def test_converted_per_day(engine: Engine, put: Put, planning: Planning) -> None:
    put([*owned(), *billed(), *fx()])
    rows = by_option(answer(engine, planning, currency="eur"))
    r = rows[("ON_DEMAND", "CATALOG")]
    assert (r.currency, r.own_fixed, r.own_cost_per_allocated_gpu_hour) == ("EUR", D("1.2"), D("2.454"))
    assert r.rent_cost_per_gpu_hour == D("4.8")
    assert r.break_even_allocation_pct == 25.408805031  # a ratio: the same in any currency
    assert rows[("SPOT", "CONFIG")].rent_cost_per_gpu_hour == D("1.2")
    assert rows[("BILLS", "BILLS")].rent_cost_per_gpu_hour == D("9.6")


def test_currency_errors(engine: Engine, put: Put, planning: Planning) -> None:
    put(owned())  # no FX rate at all: the EUR spot option cannot be brought into USD
    with pytest.raises(QueryError) as missing:
        answer(engine, planning)
    assert missing.value.code == "MISSING_FX_RATE" and "EUR/USD" in missing.value.message
    for bad in ("GBP", "dollars", ""):
        with pytest.raises(QueryError) as unknown:
            answer(engine, planning, currency=bad)
        assert unknown.value.code == "UNKNOWN_CURRENCY"


def test_energy_fallbacks(engine: Engine, put: Put, planning: Planning) -> None:
    device = Device(device_id="GPU-h200", source="test", environment="onprem", gpu_model="H200",
                    tdp_w=700.0, first_seen=D0, last_seen=at(4))  # fmt: skip
    put([*owned(energy=False), device, *fx()])
    r = answer(engine, planning)[0]
    # No energy measured: TDP 700 W × assumed_load 0.5 = 350 W busy and idle alike (0.0525 /h).
    assert (r.energy_basis, r.busy_power_w, r.idle_power_w) == ("ASSUMED", D(350), D(350))
    assert r.own_cost_per_gpu_hour == D("1.5525")


def test_no_energy_and_no_tdp(engine: Engine, put: Put, planning: Planning) -> None:
    put([*owned(energy=False), *fx()])
    r = answer(engine, planning)[0]
    assert (r.energy_basis, r.busy_power_w, r.own_cost_per_gpu_hour) == ("NONE", None, D("1.5"))


def test_mean_power_when_busy_and_idle_do_not_separate(engine: Engine, put: Put, planning: Planning) -> None:
    # Every hour half busy at 350 W: busy and idle seconds are proportional, the fit is singular.
    rows = [row(h, "GPU-h200", "j", region="dc9", busy_s=1800, energy_j=350 * 3600) for h in range(4)]
    put([*rows, *fx()])
    r = answer(engine, planning)[0]
    assert (r.energy_basis, r.busy_power_w, r.idle_power_w) == ("MEASURED_MEAN", D(350), D(350))


def test_a_model_without_any_price_says_so(engine: Engine, put: Put) -> None:
    put(owned())
    rows = answer(engine, Settings(sites=[SITE]).planning())  # bundled catalog: no H200 price
    assert [(r.option, r.rate_source, r.break_even_allocation_pct) for r in rows] == [(None, "NONE", None)]
    assert "no catalog price" in rows[0].rate_source_detail


def test_scoped_callers_and_hostile_arguments(engine: Engine, put: Put, planning: Planning) -> None:
    put([*owned(), *fx()])
    scoped = LedgerQuery(WINDOW, access=Access(projects=frozenset({"j"})))
    with pytest.raises(QueryError) as forbidden:
        answer(engine, planning, scoped)
    assert forbidden.value.code == "FORBIDDEN"
    for what_if in (be.WhatIf(allocation_pct=101), be.WhatIf(utilization_pct=-1),
                    be.WhatIf(utilization_pct=float("nan")), be.WhatIf(allocation_pct=0)):  # fmt: skip
        with pytest.raises(QueryError) as bad:
            answer(engine, planning, what_if=what_if)
        assert bad.value.code == "INVALID_ARGUMENT"
    by_project = LedgerQuery(WINDOW, filter=LedgerFilter({Dimension.PROJECT: ["j"]}), access=Access.all())
    with pytest.raises(QueryError) as workload:
        answer(engine, planning, by_project)
    assert workload.value.code == "INVALID_ARGUMENT" and "PROJECT" in workload.value.message


def test_whole_days_read_the_daily_rollup_alike(engine: Engine, put: Put, planning: Planning) -> None:
    # The billed instance's day also has an hour priced by a rate card (the edge of the bill's
    # coverage): the daily rollup keeps one rate source for the day, the bills' rate must not care.
    card = {"environment": "aws", "provider": "aws", "region": "us-east-1", "instance_type": "p5e.48xlarge",
            "gpu_model": "NVIDIA H200", "rate_source": "rate_card:p5e"}  # fmt: skip
    put([*owned(), *billed(), row(5, "i-1/gpu0", "", cost="100", **card), *fx()])
    day = LedgerQuery(Window(D0, D0 + dt.timedelta(days=1)), access=Access.all())
    assert answer(engine, planning, day) == answer(engine, planning)


# --- the formula (service.pricing.break_even), exactly -------------------------------------------------

money = st.fractions(min_value=0, max_value=100, max_denominator=10**6)
watts = st.fractions(min_value=0, max_value=1000, max_denominator=1000)
share = st.fractions(min_value=0, max_value=1, max_denominator=10**4)
#: Exact arithmetic on big fractions: no per-example deadline on a loaded machine.
PROPS = settings(max_examples=300, deadline=None)


@PROPS
@given(money, st.fractions(min_value=0, max_value=1, max_denominator=1000), watts, watts, money, share)
def test_both_sides_cost_the_same_at_the_break_even(
    fixed: Fraction, kwh: Fraction, busy_w: Fraction, idle_w: Fraction, rent: Fraction, u: Fraction
) -> None:
    owning = Owning(fixed, kwh, busy_w, idle_w)
    result = break_even(owning, rent, u)
    if result.allocation is not None and result.allocation > 0:
        assert owning.per_allocated_gpu_hour(result.allocation, u) == rent  # exact, not within 1e-9
        above = (result.allocation + 1) / 2  # between a* and 100 %: owning is no dearer
        above_cost = owning.per_allocated_gpu_hour(above, u)
        assert above_cost is not None and above_cost <= rent
    elif result.outcome.name == "RENT_ALWAYS":
        per_hour = owning.per_allocated_gpu_hour(Fraction(1), u)
        assert per_hour is not None and per_hour >= rent


@PROPS
@given(money, money, watts, watts, share, share, share)
def test_owning_per_allocated_hour_falls_as_allocation_rises(
    fixed: Fraction,
    kwh: Fraction,
    busy_w: Fraction,
    idle_w: Fraction,
    a1: Fraction,
    a2: Fraction,
    u: Fraction,
) -> None:
    owning = Owning(fixed, kwh / 100, busy_w, idle_w)
    lo, hi = sorted((a1, a2))
    if lo > 0:
        low, high = owning.per_allocated_gpu_hour(lo, u), owning.per_allocated_gpu_hour(hi, u)
        assert low is not None and high is not None and high <= low


@PROPS
@given(money, money, money, share)
def test_a_dearer_rent_never_raises_the_break_even(
    fixed: Fraction, r1: Fraction, r2: Fraction, u: Fraction
) -> None:
    owning = Owning(fixed, Fraction(15, 100), Fraction(600), Fraction(100))
    cheap, dear = (break_even(owning, r, u) for r in sorted((r1, r2)))
    if cheap.allocation is not None:
        assert dear.allocation is not None and dear.allocation <= cheap.allocation
