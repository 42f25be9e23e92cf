"""Pricing (docs/design.md §4): rate cards, billing-derived rates and the on-prem TCO model applied to
ledger rows, and the FX table's configuration (conversions: ``service.analytics.fx.FxTable``). The
domain only: no GraphQL, no HTTP."""

from service.pricing.apply import PriceBook, price_rows
from service.pricing.common import PricingConfigError, PricingError
from service.pricing.fx import FxRateConfig, sync_fx_rates
from service.pricing.rates import RateCardConfig, sync_rate_cards
from service.pricing.tco import SiteConfig

__all__ = [
    "FxRateConfig",
    "PriceBook",
    "PricingConfigError",
    "PricingError",
    "RateCardConfig",
    "SiteConfig",
    "price_rows",
    "sync_fx_rates",
    "sync_rate_cards",
]
