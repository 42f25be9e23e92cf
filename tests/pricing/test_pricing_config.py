"""Config models: strict keys, UTC-aware datetimes, currency codes, exact money."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from service.pricing import FxRateConfig, PriceBook, PricingConfigError, RateCardConfig, SiteConfig

CARD: dict[str, Any] = {
    "name": "h100", "environment": "aws", "gpu_model": "H100", "rate_per_gpu_hour": "2.5",
    "currency": "usd", "valid_from": "2026-01-01T00:00:00+01:00",
}  # fmt: skip
SITE: dict[str, Any] = {"name": "dc1", "match_region": "fra", "currency": "EUR", "price_per_kwh": "0.12"}


def test_rate_card_normalizes_currency_and_utc() -> None:
    card = RateCardConfig.model_validate(CARD)
    assert card.currency == "USD"
    assert card.valid_from == dt.datetime(2025, 12, 31, 23, tzinfo=dt.UTC)
    assert card.valid_from.tzinfo == dt.UTC
    assert card.rate_per_gpu_hour == Decimal("2.5")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"valid_from": "2026-01-01T00:00:00"}, "timezone"),
        ({"currency": "US"}, "pattern"),
        ({"environment": "oracle"}, "onprem"),
        ({"colour": "red"}, "Extra inputs are not permitted"),
        ({"rate_per_gpu_hour": "0.0000000001"}, "more than 9 decimals"),
        ({"rate_per_gpu_hour": "-1"}, "greater than or equal to 0"),
        ({"valid_to": "2025-12-31T00:00:00Z"}, "valid_to must be after valid_from"),
    ],
)
def test_rate_card_rejects(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RateCardConfig.model_validate(CARD | change)


def test_site_defaults_and_rejections() -> None:
    site = SiteConfig.model_validate(SITE)
    assert (site.amortization_years, site.hours_per_year, site.pue, site.assumed_load) == (
        4,
        8760,
        1,
        Decimal("0.5"),
    )
    with pytest.raises(ValidationError, match="set match_region and/or match_cluster"):
        SiteConfig.model_validate(SITE | {"match_region": None})
    with pytest.raises(ValidationError, match="Extra inputs"):
        SiteConfig.model_validate(SITE | {"tdp": 1})
    with pytest.raises(ValidationError, match="negative capex for H100"):
        SiteConfig.model_validate(SITE | {"capex_per_gpu": {"H100": "-1"}})


def test_sites_may_not_claim_the_same_devices() -> None:
    a = SiteConfig.model_validate(SITE)
    b = SiteConfig.model_validate(SITE | {"name": "dc1-bis"})
    with pytest.raises(PricingConfigError, match="sites 'dc1' and 'dc1-bis' both match region='fra'"):
        PriceBook.from_rates([], [a, b])


def test_fx_config() -> None:
    fx = FxRateConfig.model_validate({"base": "eur", "quote": "USD", "day": "2026-11-02", "rate": "1.08"})
    assert (fx.base, fx.day) == ("EUR", dt.date(2026, 11, 2))
    with pytest.raises(ValidationError, match="same currency"):
        FxRateConfig.model_validate({"base": "USD", "quote": "USD", "day": "2026-11-02", "rate": "1"})
    with pytest.raises(ValidationError, match="greater than 0"):
        FxRateConfig.model_validate({"base": "EUR", "quote": "USD", "day": "2026-11-02", "rate": "0"})
