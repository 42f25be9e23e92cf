"""Properties of price_rows: 0 ≤ idle_cost ≤ cost, and cost is conserved across workload rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.pricing import PriceBook, RateCardConfig, SiteConfig, price_rows
from service.timeutil import hour_start

H = 490_000
T0 = hour_start(H)
SITE = SiteConfig(
    name="dc1", match_region="fra", currency="EUR", capex_per_gpu={"H100": Decimal("35000.01")},
    amortization_years=Decimal("4.5"), price_per_kwh=Decimal("0.1234"), pue=Decimal("1.37"),
    opex_per_gpu_hour=Decimal("0.2501"), assumed_load=Decimal("0.63"),
)  # fmt: skip
PROPS = settings(max_examples=150, deadline=None)


@st.composite
def books(draw: st.DrawFn) -> tuple[PriceBook, str]:
    """A rate card (sometimes changing mid-hour) for aws, or the TCO site for onprem."""
    if draw(st.booleans()):
        return PriceBook.from_rates([], [SITE]), "onprem"
    rate = Decimal(draw(st.integers(0, 100_000_000_000))).scaleb(-9)
    cards = [RateCardConfig(name="a", environment="aws", rate_per_gpu_hour=rate, currency="USD",
                            valid_from=T0 - dt.timedelta(days=1))]  # fmt: skip
    change_s = draw(st.none() | st.integers(1, 3599))
    if change_s is not None:
        at = T0 + dt.timedelta(seconds=change_s)
        cards[0] = cards[0].model_copy(update={"valid_to": at})
        other = Decimal(draw(st.integers(0, 100_000_000_000))).scaleb(-9)
        cards.append(RateCardConfig(name="b", environment="aws", rate_per_gpu_hour=other, currency="USD",
                                    valid_from=at))  # fmt: skip
    return PriceBook.from_rates([c.to_gpu_rate() for c in cards], []), "aws"


def frame(
    env: str, present_ms: list[int], idle_ms: list[int], energy_mj: list[int | None], k: int
) -> pl.DataFrame:
    n = len(present_ms)
    data: dict[str, Any] = {
        "hour_index": [H] * n, "environment": [env] * n, "region": ["fra"] * n, "cluster": [None] * n,
        "instance_id": ["i-1"] * n, "instance_type": ["p5"] * n, "gpu_model": ["H100"] * n,
        "gpu_fraction": [k / 7] * n, "tdp_w": [700.0] * n,
        "present_s": [p / 1000 for p in present_ms], "idle_s": [i / 1000 for i in idle_ms],
        "energy_j": [None if e is None else e / 1000 for e in energy_mj],
    }  # fmt: skip
    return pl.DataFrame(data, schema_overrides={"cluster": pl.Utf8, "energy_j": pl.Float64})


@PROPS
@given(book=books(), k=st.integers(1, 7), data=st.data())
def test_idle_cost_between_zero_and_cost(book: tuple[PriceBook, str], k: int, data: st.DataObject) -> None:
    present = data.draw(st.lists(st.integers(0, 3_600_000), min_size=1, max_size=6))
    idle = [data.draw(st.integers(0, p)) for p in present]
    energy = [data.draw(st.none() | st.integers(0, 3_000_000_000)) for _ in present]
    out = price_rows(frame(book[1], present, idle, energy, k), book[0])
    for cost, idle_cost, p, i in zip(out["cost_nanos"], out["idle_cost_nanos"], present, idle, strict=True):
        assert 0 <= idle_cost <= cost
        if i == p > 0:  # present_s = 0: idle_cost is 0 even when measured energy costs something
            assert idle_cost == cost
        if i == 0:
            assert idle_cost == 0


@pytest.mark.slow
@PROPS
@given(book=books(), k=st.integers(1, 7), data=st.data())
def test_cost_conserved_across_workload_rows(
    book: tuple[PriceBook, str], k: int, data: st.DataObject
) -> None:
    # A device-hour split over n workloads: the rows' costs add up to the price of the whole presence
    # (and the whole measured energy), within the n + 1 independent half-nano roundings.
    parts = data.draw(
        st.lists(st.integers(0, 3_600_000), min_size=1, max_size=8).filter(lambda x: sum(x) <= 3_600_000)
    )
    measured = data.draw(st.booleans())
    energy = [data.draw(st.integers(0, 800 * p)) if measured else None for p in parts]
    rows = price_rows(frame(book[1], parts, [0] * len(parts), energy, k), book[0])
    whole = price_rows(
        frame(book[1], [sum(parts)], [0], [sum(e or 0 for e in energy) if measured else None], k), book[0]
    )
    diff = abs(rows["cost_nanos"].sum() - whole["cost_nanos"][0])
    assert diff <= len(parts)
