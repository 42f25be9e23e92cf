"""Cost per GPU-hour and per *effective* GPU-hour: the buy-or-rent comparison (docs/design.md §1, §4).

**Currency.** With ``currency`` (an EUR site next to USD clouds in one answer) the SQL groups also
by UTC day and currency; each day's cost of a source currency is converted once and split back
(:func:`service.analytics.fx.convert_day_buckets`, as ``cost`` converts), the buckets of a group
are added, and only then are the per-hour prices divided: a ratio of converted sums, never a sum
of converted ratios. Unpriced time stays its own XXX row (it never dilutes a price). The answer
is folded and paged in Python (a row's cursor is its position), so each page costs the whole
answer's SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Label, case

from service.analytics.dims import metric_label
from service.analytics.fx import NO_CURRENCY, FxTable, check_currency, convert_day_buckets
from service.analytics.idle import count_groups
from service.analytics.paging import WHOLE, Page
from service.analytics.query import (
    GroupKey,
    LedgerQuery,
    collector_paused,
    fetch_columns,
    group_keys,
    grouped_select,
)
from service.analytics.usage import floats, metric_labels, usage_measures
from service.analytics.window import money_sum
from service.money import quantize


def _per(amount: Decimal, hours: float) -> Decimal | None:
    return quantize(amount / Decimal(repr(hours))) if hours > 0 else None


@dataclass(frozen=True)
class EffectiveCostRow:
    """One (group, currency). Unpriced time forms its own ``XXX`` row, whose per-hour costs are None."""

    key: GroupKey
    currency: str
    gpu_hours: float
    effective_gpu_hours: float
    cost: Decimal
    metric: str

    @property
    def cost_per_gpu_hour(self) -> Decimal | None:
        """cost ÷ GPU-hours, rounded half-even to 1e-9; None without GPU-hours or a price."""
        return per_gpu_hour(self.cost, self.gpu_hours, self.currency)

    @property
    def cost_per_effective_gpu_hour(self) -> Decimal | None:
        """cost ÷ effective GPU-hours of the metric, rounded half-even to 1e-9; None when either is 0."""
        return per_gpu_hour(self.cost, self.effective_gpu_hours, self.currency)


def effective_measures(q: LedgerQuery, metric: str | None) -> tuple[Any, list[Any], Label[Any]]:
    """The source, measures and currency key of an effective-cost answer (:func:`effective_cost`,
    and the export's frame)."""
    src = q.source()
    # Unpriced rows (cost NULL) have no currency: they form their own group, never dilute a price.
    currency = case((src.c.cost.is_(None), None), else_=src.c.currency).label("currency")
    return src, [*usage_measures(src, metric), money_sum(src.c.cost).label("cost")], currency


def per_gpu_hour(amount: Decimal, hours: float, currency: str) -> Decimal | None:
    """``amount`` ÷ ``hours`` rounded half-even to 1e-9; None without hours or a price (XXX)."""
    return None if currency == NO_CURRENCY else _per(amount, hours)


@collector_paused
def effective_cost(
    conn: Connection,
    q: LedgerQuery,
    metric: str | None = None,
    *,
    page: Page = WHOLE,
    currency: str | None = None,
) -> list[EffectiveCostRow]:
    """Per (group, currency) of the rows ``q.access`` may read: GPU-hours, effective GPU-hours, cost
    (granularity is ignored: TOTAL). Paged in SQL; with ``currency`` converted per UTC day and
    paged by position (see the module docstring; MISSING_FX_RATE, UNKNOWN_CURRENCY as ``cost``)."""
    if currency is not None:
        return _converted(conn, q, metric, check_currency(conn, currency), page)
    src, measures, currency_key = effective_measures(q, metric)
    c = fetch_columns(conn, grouped_select(src, q, measures, [currency_key], page=page), page)
    return list(
        map(
            EffectiveCostRow,
            group_keys(q, c, ["currency"]),
            [cur or NO_CURRENCY for cur in c["currency"]],
            floats(c["gpu_hours"]),
            floats(c["effective_gpu_hours"]),
            c["cost"],
            metric_labels(metric, c["min_default_metric"], c["max_default_metric"]),
        )
    )


def _converted(
    conn: Connection, q: LedgerQuery, metric: str | None, target: str, page: Page
) -> list[EffectiveCostRow]:
    src, measures, currency_key = effective_measures(q, metric)
    if page.first is None and page.max_rows is not None:
        page.refuse_above(count_groups(conn, src, q) - page.offset)
    c = fetch_columns(conn, grouped_select(src, q, measures, [currency_key, src.c.day_index.label("day")]))
    currencies = [cur or NO_CURRENCY for cur in c["currency"]]
    days = [int(d) for d in c["day"]]
    [costs] = convert_day_buckets(FxTable(conn, target, set(currencies), days), [c["cost"]], currencies, days)
    folded: dict[tuple[GroupKey, str], list[Any]] = {}
    # SQL ordered by the keys, then currency (unpriced first): a row's buckets are adjacent.
    for i, key in enumerate(group_keys(q, c)):
        cur = NO_CURRENCY if currencies[i] == NO_CURRENCY else target
        acc = folded.setdefault((key, cur), [0.0, 0.0, Decimal("0E-9"), set()])
        acc[0] += float(c["gpu_hours"][i])
        acc[1] += float(c["effective_gpu_hours"][i])
        acc[2] += costs[i]
        acc[3].update(m for m in (c["min_default_metric"][i], c["max_default_metric"][i]) if m is not None)
    offset = page.offset
    return [
        EffectiveCostRow(
            replace(key, order=(offset + i,)),
            cur,
            gpu_hours,
            effective_hours,
            cost,
            metric_label(metric, min(seen, default=None), max(seen, default=None)),
        )
        for i, ((key, cur), (gpu_hours, effective_hours, cost, seen)) in enumerate(
            page.slice(list(folded.items()))
        )
    ]
