"""FX: the operator-maintained exchange-rate table (docs/design.md §4): its ``[[fx_rates]]`` config
entries and their sync into ``fx_rate``.

``1 base = rate quote`` on ``day``. Conversions read the table through one class,
:class:`service.analytics.fx.FxTable` (the rate of that exact day: the direct pair, else the inverse
of the opposite pair; a missing rate is MISSING_FX_RATE naming the pair and the day, never 1.0).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlmodel import Session, select

from service.models import FxRate
from service.pricing.common import Currency, PricingConfigError

__all__ = ["FxRateConfig", "sync_fx_rates"]


class FxRateConfig(BaseModel):
    """One ``[[fx_rates]]`` entry: 1 ``base`` = ``rate`` ``quote`` on ``day`` (UTC calendar day)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: Currency
    quote: Currency
    day: dt.date
    rate: Decimal = Field(gt=0, max_digits=24, decimal_places=12)

    @model_validator(mode="after")
    def _check(self) -> FxRateConfig:
        if self.base == self.quote:
            raise ValueError(f"FX rate {self.base}→{self.quote}: base and quote are the same currency")
        return self


def sync_fx_rates(session: Session, rates: Sequence[FxRateConfig]) -> int:
    """Upsert ``rates`` into ``fx_rate`` on (base, quote, day); returns how many were given.

    Rows not in ``rates`` stay. Runs in the caller's transaction (flushes, never commits). The same
    pair and day given twice with different rates is a :class:`PricingConfigError`.
    """
    wanted: dict[tuple[str, str, dt.date], Decimal] = {}
    for fx in rates:
        key = (fx.base, fx.quote, fx.day)
        if key in wanted and wanted[key] != fx.rate:
            raise PricingConfigError(f"FX rate {fx.base}→{fx.quote} for {fx.day} is given twice")
        wanted[key] = fx.rate
    existing = {(r.base, r.quote, r.day): r for r in session.exec(select(FxRate)).all()}
    for (base, quote, day), rate in wanted.items():
        row = existing.get((base, quote, day))
        if row is None:
            session.add(FxRate(base=base, quote=quote, day=day, rate=rate))
        elif row.rate != rate:
            row.rate = rate
            session.add(row)
    session.flush()
    return len(wanted)
