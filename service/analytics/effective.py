"""Cost per GPU-hour and per *effective* GPU-hour: the buy-or-rent comparison (docs/design.md §1, §4)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Label, case

from service.analytics.fx import NO_CURRENCY
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
    conn: Connection, q: LedgerQuery, metric: str | None = None, *, page: Page = WHOLE
) -> list[EffectiveCostRow]:
    """Per (group, currency) of the rows ``q.access`` may read: GPU-hours, effective GPU-hours, cost
    (granularity is ignored: TOTAL). Paged in SQL."""
    src, measures, currency = effective_measures(q, metric)
    c = fetch_columns(conn, grouped_select(src, q, measures, [currency], page=page), page)
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
