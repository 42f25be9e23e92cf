"""What the ledger measured for a break-even answer (docs/break-even.md): per owned (site region,
cluster, GPU model) the hours, allocation, utilization and the sums that fit its busy and idle power;
per rented (provider, instance type, region, GPU model, currency) what the bills charged. One GROUP
BY each, per UTC day (the days weigh the per-day currency conversion)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, func, select

from service.analytics.query import LedgerQuery
from service.analytics.usage import metric_columns
from service.analytics.window import fsum, hours, money_sum
from service.dbtypes import table_of
from service.models import Device

ONPREM = "onprem"
BILLING_PREFIX = "billing:"
#: Fitted powers are kept to the milliwatt: a measurement, not an amount, and exact from there on.
POWER_QUANTUM = 1000
#: A fit whose normal equations are this close to singular (busy and idle seconds move together
#: in every row) tells the two powers apart no better than noise: the mean power is used instead.
SINGULAR = 1e-9


_SUMS = (
    "gpu_hours",
    "allocated_gpu_hours",
    "allocated_observed_gpu_hours",
    "allocated_busy_gpu_hours",
    *("bb", "bi", "ii", "by", "iy", "y", "x"),
)


@dataclass
class Owned:
    """Sums over one owned (region, cluster, GPU model)'s ledger rows; hours are GPU-hours."""

    gpu_hours: float = 0.0
    allocated_gpu_hours: float = 0.0
    allocated_observed_gpu_hours: float = 0.0
    allocated_busy_gpu_hours: float = 0.0
    # Least-squares sums over whole-GPU rows with energy: x_b = busy s, x_i = present − busy s, y = J.
    bb: float = 0.0
    bi: float = 0.0
    ii: float = 0.0
    by: float = 0.0
    iy: float = 0.0
    y: float = 0.0
    x: float = 0.0
    days: dict[int, float] = field(default_factory=dict)  # present GPU-hours per day_index
    default_metrics: set[str] = field(default_factory=set)  # the rows' default metrics

    def add(self, other: Owned) -> None:
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for day, h in other.days.items():
            self.days[day] = self.days.get(day, 0.0) + h
        self.default_metrics |= other.default_metrics

    def powers_w(self) -> tuple[Fraction, Fraction, str] | None:
        """(busy W, idle W, basis) fitted from the energy rows: ``MEASURED`` when the two powers
        separate (both ≥ 0), ``MEASURED_MEAN`` (the mean power for both) when they do not; None
        without energy."""
        if self.x <= 0:
            return None
        det = self.bb * self.ii - self.bi * self.bi
        if det > SINGULAR * self.bb * self.ii:
            busy = (self.by * self.ii - self.iy * self.bi) / det
            idle = (self.iy * self.bb - self.by * self.bi) / det
            if busy >= 0 and idle >= 0:
                return _watts(busy), _watts(idle), "MEASURED"
        mean = _watts(self.y / self.x)
        return mean, mean, "MEASURED_MEAN"


def _watts(value: float) -> Fraction:
    return Fraction(round(value * POWER_QUANTUM), POWER_QUANTUM)


def owned_fleet(
    conn: Connection, q: LedgerQuery, metric: str | None
) -> dict[tuple[str | None, str | None, str], Owned]:
    """Per on-prem (region, cluster, GPU model) in ``q`` (window, filter, access) the sums of
    :class:`Owned`, by ``metric`` (None: each row's default metric)."""
    src = q.source(per_device=True)
    obs, busy, _ = metric_columns(metric)
    allocated = src.c.workload_key != ""
    fitted = and_(src.c.energy_j.is_not(None), src.c.gpu_fraction == 1.0)
    xb = src.c[busy]
    xi = src.c.present_s - src.c[busy]
    y = src.c.energy_j

    def fit(expr: Any) -> ColumnElement[float]:
        return fsum(case((fitted, expr), else_=0.0))

    stmt = (
        select(
            src.c.region,
            src.c.cluster,
            src.c.gpu_model,
            src.c.day_index,
            func.min(src.c.default_metric),
            func.max(src.c.default_metric),
            hours(src.c.present_s, src),
            hours(case((allocated, src.c.present_s), else_=0.0), src),
            hours(case((allocated, src.c[obs]), else_=0.0), src),
            hours(case((allocated, src.c[busy]), else_=0.0), src),
            fit(xb * xb),
            fit(xb * xi),
            fit(xi * xi),
            fit(xb * y),
            fit(xi * y),
            fit(y),
            fit(src.c.present_s),
        )
        .where(src.c.environment == ONPREM, src.c.gpu_model.is_not(None))
        .group_by(src.c.region, src.c.cluster, src.c.gpu_model, src.c.day_index)
    )
    out: dict[tuple[str | None, str | None, str], Owned] = {}
    for region, cluster, model, day, lo, hi, *v in conn.execute(stmt):
        part = Owned()
        for name, value in zip(_SUMS, v, strict=True):
            setattr(part, name, float(value))
        part.days[int(day)] = part.gpu_hours
        part.default_metrics |= {lo, hi} - {None}
        out.setdefault((region, cluster, model), Owned()).add(part)
    return out


def tdp_w(conn: Connection, models: Sequence[str]) -> dict[str, float]:
    """The largest board power (TDP) an on-prem device of each model reported."""
    if not models:
        return {}
    d = table_of(Device)
    stmt = (
        select(d.c.gpu_model, func.max(d.c.tdp_w))
        .where(d.c.environment == ONPREM, d.c.gpu_model.in_(sorted(models)), d.c.tdp_w.is_not(None))
        .group_by(d.c.gpu_model)
    )
    return {model: float(w) for model, w in conn.execute(stmt) if w}


@dataclass
class Billed:
    """One rented (provider, instance type, region, GPU model, currency): the ledger's cost of its
    GPU-hours priced from billing lines, and those GPU-hours, per day."""

    cost: dict[int, Decimal] = field(default_factory=dict)
    gpu_hours: dict[int, float] = field(default_factory=dict)


BilledKey = tuple[str | None, str | None, str | None, str, str]


def billed_rates(conn: Connection, q: LedgerQuery) -> dict[BilledKey, Billed]:
    """Cloud GPU-hours of ``q``'s window (no filter: the renting side is the whole account's) whose
    cost came from the bills — effective cost, commitments and discounts included (docs/design.md §4).
    From the hourly rows: a daily rollup row keeps one rate source for a day that has several (the
    edge of a bill's coverage), which would count or drop that day's other hours."""
    src = LedgerQuery(q.window, rollup=False, access=q.access).source(per_device=True)
    keys = (src.c.provider, src.c.instance_type, src.c.region, src.c.gpu_model, src.c.currency)
    stmt = (
        select(*keys, src.c.day_index, money_sum(src.c.cost), hours(src.c.present_s, src))
        .where(
            src.c.environment != ONPREM,
            src.c.gpu_model.is_not(None),
            src.c.cost.is_not(None),
            src.c.rate_source.startswith(BILLING_PREFIX),
        )
        .group_by(*keys, src.c.day_index)
    )
    out: dict[BilledKey, Billed] = {}
    for provider, itype, region, model, currency, day, cost, gpu_hours in conn.execute(stmt):
        billed = out.setdefault((provider, itype, region, model, currency), Billed())
        billed.cost[int(day)] = Decimal(cost)
        billed.gpu_hours[int(day)] = float(gpu_hours)
    return out
