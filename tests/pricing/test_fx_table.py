"""FxTable: identity, direct, inverse, and a missing rate that names the pair and day."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from service.pricing import FxRateConfig, FxTable, MissingFxRate, PricingError

DAY = dt.date(2026, 11, 2)
TABLE = FxTable([FxRateConfig(base="EUR", quote="USD", day=DAY, rate=Decimal("1.25"))])


def test_identity_and_direct() -> None:
    assert TABLE.rate("USD", "USD", DAY) == Decimal(1)
    assert TABLE.rate("EUR", "USD", DAY) == Decimal("1.25")
    assert TABLE.convert(Decimal("10.000000001"), "EUR", "USD", DAY) == Decimal(
        "12.500000001"
    )  # 12.50000000125
    assert TABLE.convert(Decimal("3"), "JPY", "JPY", DAY) == Decimal("3")


def test_inverse() -> None:
    assert TABLE.rate("USD", "EUR", DAY) == Decimal("0.8")
    # 10 / 1.25 = 8 exactly (divided, not multiplied by a rounded reciprocal)
    assert TABLE.convert(Decimal(10), "USD", "EUR", DAY) == Decimal("8")
    third = FxTable([FxRateConfig(base="EUR", quote="USD", day=DAY, rate=Decimal(3))])
    assert third.rate("USD", "EUR", DAY) == Decimal("0.3333333333333333333333333333")
    assert third.convert(Decimal(1), "USD", "EUR", DAY) == Decimal("0.333333333")


def test_missing_rate_names_pair_and_day() -> None:
    with pytest.raises(MissingFxRate) as err:
        TABLE.convert(Decimal(1), "EUR", "USD", dt.date(2026, 11, 3))
    assert str(err.value) == "no FX rate EUR→USD for 2026-11-03; add it to [[fx_rates]]"
    assert isinstance(err.value, PricingError)
    with pytest.raises(MissingFxRate, match="no FX rate GBP→USD for 2026-11-02"):
        TABLE.rate("GBP", "USD", DAY)
