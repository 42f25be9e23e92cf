"""Currency conversion of aggregated amounts through the operator's ``fx_rate`` table.

``fx_rate`` row: 1 ``base`` = ``rate`` ``quote`` on ``day``. A pair is found directly or as its
inverse; a missing rate is an error naming the pair and the day, never a silent 1.0 (docs/design.md §4).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal

from sqlalchemy import Connection, or_, select

from service.analytics.errors import MissingFxRate, UnknownCurrency
from service.dbtypes import table_of
from service.models import FxRate, LedgerDay
from service.money import allocate, quantize
from service.timeutil import EPOCH

#: ISO 4217 "no currency": the currency of unpriced ledger time (its amount is always 0).
NO_CURRENCY = "XXX"
_ISO_4217 = re.compile(r"^[A-Z]{3}$")


ZERO = Decimal("0E-9")


def day_of(day_index: int) -> dt.date:
    return (EPOCH + dt.timedelta(days=int(day_index))).date()


def day_index_of(day: dt.date) -> int:
    return (day - EPOCH.date()).days


def check_currency(conn: Connection, code: str) -> str:
    """``code`` upper-cased if it is ISO-4217-shaped and known to the FX table or the ledger."""
    normalized = code.strip().upper()
    if not _ISO_4217.match(normalized):
        shown = repr(code[:20]) + ("…" if len(code) > 20 else "")  # a 10 KB argument is not echoed back
        raise UnknownCurrency(f"currency {shown} is not an ISO 4217 code (three letters, e.g. USD)")
    fx = table_of(FxRate)
    day = table_of(LedgerDay)
    known = (
        conn.execute(
            select(fx.c.id).where(or_(fx.c.base == normalized, fx.c.quote == normalized)).limit(1)
        ).first()
        or conn.execute(select(day.c.id).where(day.c.currency == normalized).limit(1)).first()
    )
    if not known:
        raise UnknownCurrency(f"currency {normalized} appears in no FX rate and no ledger row")
    return normalized


class FxTable:
    """The rates needed to bring ``sources`` into ``target`` on the given days, loaded in one query."""

    def __init__(
        self, conn: Connection, target: str, sources: Iterable[str], day_indexes: Iterable[int]
    ) -> None:
        self.target = target
        self._rates: dict[tuple[str, int], Decimal] = {}
        others = sorted({s for s in sources if s not in (target, NO_CURRENCY)})
        days = sorted(set(day_indexes))
        if not others or not days:
            return
        fx = table_of(FxRate)
        stmt = select(fx.c.base, fx.c.quote, fx.c.day, fx.c.rate).where(
            fx.c.day >= day_of(days[0]),
            fx.c.day <= day_of(days[-1]),
            or_(
                (fx.c.quote == target) & fx.c.base.in_(others),
                (fx.c.base == target) & fx.c.quote.in_(others),
            ),
        )
        index_of = {day_of(d): d for d in days}
        inverse: dict[tuple[str, int], Decimal] = {}
        for base, quote, day, rate in conn.execute(stmt):
            d = index_of.get(day)
            if d is None or not rate:
                continue
            if quote == target:
                self._rates[(base, d)] = Decimal(rate)
            else:
                inverse[(quote, d)] = Decimal(1) / Decimal(rate)
        for k, v in inverse.items():
            self._rates.setdefault(k, v)

    def rate(self, currency: str, day_index: int) -> Decimal:
        """1 ``currency`` in the target currency on that day."""
        if currency in (self.target, NO_CURRENCY):
            return Decimal(1)
        try:
            return self._rates[(currency, day_index)]
        except KeyError:
            raise MissingFxRate(
                f"no FX rate {currency}/{self.target} (or {self.target}/{currency}) "
                f"for {day_of(day_index).isoformat()}"
            ) from None


def convert_amounts(amounts: Sequence[Decimal], rate: Decimal) -> list[Decimal]:
    """``amounts`` × ``rate``, each rounded so that they add up to their rounded converted total."""
    if any(a < 0 for a in amounts):  # allocate() needs non-negative weights: round one by one
        return [quantize(a * rate) for a in amounts]
    return allocate(quantize(sum(amounts, ZERO) * rate), amounts)


def convert_day_buckets(
    fx: FxTable, columns: Sequence[Sequence[Decimal]], currencies: Sequence[str], days: Sequence[int]
) -> list[list[Decimal]]:
    """Each money column of buckets (bucket ``i`` in ``currencies[i]`` on UTC day ``days[i]``) in
    ``fx.target``: per (day, currency) the column's total is converted once, rounded half-even to
    1e-9 and split back over its buckets (:func:`convert_amounts`), the way ``cost`` converts. So
    however an answer groups the same buckets, its converted rows add up to the same total.
    MISSING_FX_RATE names the first (day, currency) without a rate."""
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(days, currencies, strict=True)):
        groups[key].append(i)
    out = [list(column) for column in columns]
    for (day, currency), members in sorted(groups.items()):
        rate = fx.rate(currency, day)
        for column, converted in zip(columns, out, strict=True):
            for i, value in zip(members, convert_amounts([column[i] for i in members], rate), strict=True):
                converted[i] = value
    return out
