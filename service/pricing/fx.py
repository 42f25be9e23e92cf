"""FX: the operator-maintained exchange-rate table (docs/design.md §4).

``1 base = rate quote`` on ``day``. A conversion uses the rate of that exact day: the direct pair,
else the inverse of the opposite pair. A missing rate raises :class:`MissingFxRate` naming the pair
and the day; it is never replaced by 1.0.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal, localcontext

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlmodel import Session, select

from service.models import FxRate
from service.money import quantize
from service.pricing.common import Currency, MissingFxRate, PricingConfigError
from service.timeutil import as_utc

__all__ = ["FxRateConfig", "FxTable", "MissingFxRate", "sync_fx_rates"]

_INVERSE_DIGITS = 28


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


class FxTable:
    """Exchange rates by (base, quote, day), in memory. Build with ``FxTable(rates)`` or
    :meth:`from_session`."""

    def __init__(self, rates: Iterable[FxRateConfig | FxRate] = ()) -> None:
        self._rates: dict[tuple[str, str, dt.date], Decimal] = {
            (r.base, r.quote, r.day): Decimal(r.rate) for r in rates
        }

    @classmethod
    def from_session(cls, session: Session) -> FxTable:
        return cls(session.exec(select(FxRate)).all())

    def __len__(self) -> int:
        return len(self._rates)

    def _lookup(self, base: str, quote: str, day: dt.date | dt.datetime) -> tuple[Decimal, bool]:
        """(rate, inverted): inverted means ``rate`` is quote→base and must be divided by."""
        if isinstance(day, dt.datetime):
            day = as_utc(day).date()
        base, quote = base.upper(), quote.upper()
        if base == quote:
            return Decimal(1), False
        direct = self._rates.get((base, quote, day))
        if direct is not None:
            return direct, False
        opposite = self._rates.get((quote, base, day))
        if opposite is not None:
            return opposite, True
        raise MissingFxRate(base, quote, day)

    def rate(self, base: str, quote: str, day: dt.date | dt.datetime) -> Decimal:
        """1 ``base`` in ``quote`` on ``day``; an inverse is computed to 28 significant digits."""
        rate, inverted = self._lookup(base, quote, day)
        if not inverted:
            return rate
        with localcontext() as ctx:
            ctx.prec = _INVERSE_DIGITS
            return Decimal(1) / rate

    def convert(self, amount: Decimal, base: str, quote: str, day: dt.date | dt.datetime) -> Decimal:
        """``amount`` of ``base`` in ``quote``, rounded half-even to 1e-9 once (an inverse rate is
        divided by, not multiplied by its rounded reciprocal)."""
        rate, inverted = self._lookup(base, quote, day)
        with localcontext() as ctx:
            ctx.prec = 50
            exact = amount / rate if inverted else amount * rate
            return quantize(exact)
