"""``breakEven``: per owned (site, GPU model), what owning costs at the window's measured (or a
what-if) allocation and utilization, against every way of renting that GPU, and the allocation at
which they cost the same (docs/break-even.md; the formula: :mod:`service.pricing.break_even`).

Fleet-wide data (the site's TCO, the account's bills): a project- or team-scoped caller is refused
(FORBIDDEN), since even its own position would be priced from account-wide rates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import polars as pl
from sqlalchemy import Connection

from service.analytics.break_even_measure import Billed, Owned, billed_rates, owned_fleet, tdp_w
from service.analytics.dims import metric_label
from service.analytics.errors import InvalidArgument, QueryError
from service.analytics.fx import FxTable, check_currency
from service.analytics.query import LedgerQuery, collector_paused
from service.pricing.break_even import (
    Owning,
    Planning,
    RateSource,
    RentOption,
    RentPrice,
    break_even,
    money,
    pct,
    same_gpu,
    share_of,
    weighted_mean,
)
from service.pricing.common import PricingConfigError
from service.pricing.tco import SiteConfig, match_site

#: The smallest what-if allocation (percentages are kept to 1e-6, shares to 1e-8).
MIN_PCT = 0.000001


@dataclass(frozen=True)
class WhatIf:
    """Overrides of the measured position, in percent (None: the measured value)."""

    allocation_pct: float | None = None
    utilization_pct: float | None = None

    def check(self) -> None:
        for name, value in (("allocationPct", self.allocation_pct), ("utilizationPct", self.utilization_pct)):
            if value is None:
                continue
            if not 0 <= value <= 100:  # NaN fails too
                raise _argument(name, f"{name} {value!r} must be a percentage from 0 to 100")
        if self.allocation_pct is not None and self.allocation_pct < MIN_PCT:
            raise _argument(
                "allocationPct",
                f"allocationPct must be at least {MIN_PCT:g}: owning has no hour in use at 0 %",
            )


def _argument(parameter: str, message: str) -> InvalidArgument:
    error = InvalidArgument(message)
    error.parameter = parameter  # type: ignore[attr-defined]  # the export names it (parameter_of)
    return error


@dataclass(frozen=True)
class BreakEvenRow:
    """One owned (site, GPU model) against one renting price (or none: ``rate_source`` NONE), all
    amounts in ``currency`` per GPU-hour, rounded half-even to 1e-9."""

    site: str
    gpu_model: str
    currency: str
    metric: str
    gpu_hours: float
    allocated_gpu_hours: float
    measured_allocation_pct: float | None
    measured_utilization_pct: float | None
    allocation_pct: float | None
    utilization_pct: float | None
    what_if: bool
    energy_basis: str
    busy_power_w: Decimal | None
    idle_power_w: Decimal | None
    own_fixed: Decimal
    own_busy_energy: Decimal
    own_idle_energy: Decimal
    own_cost_per_gpu_hour: Decimal
    own_cost_per_allocated_gpu_hour: Decimal | None
    own_cost_per_effective_gpu_hour: Decimal | None
    option: str | None
    rate_source: str
    rate_source_detail: str
    provider: str | None
    instance_type: str | None
    region: str | None
    rent_cost_per_gpu_hour: Decimal | None
    rent_cost_per_effective_gpu_hour: Decimal | None
    break_even_allocation_pct: float | None
    outcome: str | None
    cheaper_now: str | None


def _exact(value: float) -> Fraction:
    return Fraction(Decimal(repr(value)))


def _share(part: float, whole: float) -> Fraction | None:
    return share_of(_exact(part) / _exact(whole)) if whole > 0 else None


def _used(pct: float | None, measured: Fraction | None) -> Fraction:
    if pct is not None:
        return share_of(_exact(pct) / 100)
    return measured or Fraction(0)


def _pct_float(share: Fraction | None) -> float | None:
    shown = pct(share)
    return None if shown is None else float(shown)


class _Converter:
    """Amounts into ``target`` by the FX table, per day (a constant price: the mean of the days'
    rates weighted by the owned GPU-hours of each day, as if each day's cost were converted)."""

    def __init__(self, conn: Connection, target: str, sources: set[str], days: set[int]) -> None:
        self.target = target
        self.fx = FxTable(conn, target, sources, days)

    def factor(self, currency: str, days: Mapping[int, float]) -> Fraction:
        if currency == self.target:
            return Fraction(1)
        mean = weighted_mean(
            (Fraction(self.fx.rate(currency, d)), _exact(h)) for d, h in sorted(days.items())
        )
        return Fraction(1) if mean is None else mean

    def billed_rate(self, currency: str, billed: Billed) -> Fraction | None:
        gpu_hours = sum((_exact(h) for h in billed.gpu_hours.values()), Fraction(0))
        if gpu_hours <= 0:
            return None
        cost = sum(
            (Fraction(c) * Fraction(self.fx.rate(currency, d)) for d, c in sorted(billed.cost.items())),
            Fraction(0),
        )
        return cost / gpu_hours


def _owned_by_site(
    sites: tuple[SiteConfig, ...], fleet: dict[tuple[str | None, str | None, str], Owned]
) -> dict[tuple[str, str], tuple[SiteConfig, Owned]]:
    out: dict[tuple[str, str], tuple[SiteConfig, Owned]] = {}
    for (region, cluster, model), owned in sorted(fleet.items(), key=lambda kv: tuple(map(str, kv[0]))):
        site = match_site(sites, region, cluster)
        if site is None or owned.gpu_hours <= 0:
            continue  # not priced by a TCO model: nothing owned to compare
        _, total = out.setdefault((site.name, model), (site, Owned()))
        total.add(owned)
    return out


def _bill_prices(
    billed: dict[tuple[str | None, str | None, str | None, str, str], Billed],
) -> list[RentPrice]:
    """A price per billed group (its rate: :meth:`_Converter.billed_rate`, in the answer's currency)."""
    out = []
    for (provider, itype, region, model, currency), b in sorted(
        billed.items(), key=lambda kv: tuple(map(str, kv[0]))
    ):
        gpu_hours = sum(b.gpu_hours.values())
        detail = f"bills: {gpu_hours:.6g} GPU-hours in the window"
        out.append(
            RentPrice(
                RentOption.BILLS,
                RateSource.BILLS,
                detail,
                provider,
                itype,
                region,
                model,
                Fraction(0),
                currency,
            )
        )
    return out


_SOURCE_ORDER = {RateSource.BILLS: 0, RateSource.CONFIG: 1, RateSource.CATALOG: 2}


@collector_paused
def break_even_rows(
    conn: Connection,
    q: LedgerQuery,
    planning: Planning,
    *,
    metric: str | None = None,
    currency: str | None = None,
    what_if: WhatIf = WhatIf(),
) -> list[BreakEvenRow]:
    """The answer (module docstring). ``q``: window, filter (of the owned GPUs) and access."""
    q.access.require_everything("breakEven")
    what_if.check()
    workload = [d.name for d, values in q.filter.values.items() if values and d.is_workload]
    if workload or q.filter.unallocated is not None:
        named = ", ".join(workload) or "UNALLOCATED"
        raise InvalidArgument(
            f"breakEven measures whole GPUs (allocated and not): filter by site, cluster, node, device or "
            f"GPU model, not by {named}"
        )
    target = check_currency(conn, currency) if currency is not None else None
    owned = _owned_by_site(planning.sites, owned_fleet(conn, q, metric))
    if not owned:
        return []
    billed = billed_rates(conn, q)
    prices = [*_bill_prices(billed), *planning.prices]
    tdp = tdp_w(conn, sorted({model for _, model in owned}))
    days = {d for _, o in owned.values() for d in o.days} | {d for b in billed.values() for d in b.cost}
    sources = {s.currency for s, _ in owned.values()} | {p.currency for p in prices}
    converters: dict[str, _Converter] = {}
    rows: list[BreakEvenRow] = []
    for (_site, model), (site, o) in sorted(owned.items()):
        to = target or site.currency
        conv = converters.get(to) or converters.setdefault(to, _Converter(conn, to, sources, days))
        rows += _rows_of(conv, site, model, o, tdp.get(model), prices, billed, metric, what_if)
    return rows


def _rows_of(
    conv: _Converter,
    site: SiteConfig,
    model: str,
    o: Owned,
    tdp: float | None,
    prices: list[RentPrice],
    billed: dict[tuple[str | None, str | None, str | None, str, str], Billed],
    metric: str | None,
    what_if: WhatIf,
) -> list[BreakEvenRow]:
    powers = o.powers_w()
    if powers is None and tdp is not None:
        assumed = _exact(tdp) * Fraction(site.assumed_load)
        powers = (assumed, assumed, "ASSUMED")
    busy_w, idle_w, basis = powers or (Fraction(0), Fraction(0), "NONE")
    try:
        owning = Owning.of_site(site, model, busy_w, idle_w).scaled(conv.factor(site.currency, o.days))
    except PricingConfigError as exc:
        raise QueryError(str(exc), code="CONFIGURATION_ERROR") from None
    measured_a = _share(o.allocated_gpu_hours, o.gpu_hours)
    measured_u = _share(o.allocated_busy_gpu_hours, o.allocated_observed_gpu_hours)
    a, u = _used(what_if.allocation_pct, measured_a), _used(what_if.utilization_pct, measured_u)
    own_alloc = owning.per_allocated_gpu_hour(a, u)
    common = {
        "site": site.name,
        "gpu_model": model,
        "currency": conv.target,
        "metric": metric_label(
            metric, min(o.default_metrics, default=None), max(o.default_metrics, default=None)
        ),
        "gpu_hours": o.gpu_hours,
        "allocated_gpu_hours": o.allocated_gpu_hours,
        "measured_allocation_pct": _pct_float(measured_a),
        "measured_utilization_pct": _pct_float(measured_u),
        "allocation_pct": _pct_float(a),
        "utilization_pct": _pct_float(u),
        "what_if": what_if != WhatIf(),
        "energy_basis": basis,
        "busy_power_w": None if basis == "NONE" else money(busy_w),
        "idle_power_w": None if basis == "NONE" else money(idle_w),
        "own_fixed": money(owning.fixed),
        "own_busy_energy": money(owning.busy_energy),
        "own_idle_energy": money(owning.idle_energy),
        "own_cost_per_gpu_hour": money(owning.per_gpu_hour(a, u)),
        "own_cost_per_allocated_gpu_hour": money(own_alloc),
        "own_cost_per_effective_gpu_hour": money(owning.per_effective_gpu_hour(a, u)),
    }
    matching = [p for p in prices if same_gpu(p.gpu_model, model)]
    matching.sort(
        key=lambda p: (
            _SOURCE_ORDER[p.source],
            p.option.value,
            *map(str, (p.provider, p.instance_type, p.region)),
        )
    )
    rows = []
    for p in matching:
        if p.source is RateSource.BILLS:
            rate = conv.billed_rate(
                p.currency, billed[(p.provider, p.instance_type, p.region, p.gpu_model, p.currency)]
            )
            if rate is None:
                continue
        else:
            rate = (p.per_gpu_hour or Fraction(0)) * conv.factor(p.currency, o.days)
        result = break_even(owning, rate, u)
        cheaper = None
        if own_alloc is not None:
            cheaper = "OWN" if own_alloc < rate else "RENT" if own_alloc > rate else "EQUAL"
        rows.append(
            BreakEvenRow(
                **common,  # type: ignore[arg-type]
                option=p.option.name,
                rate_source=p.source.name,
                rate_source_detail=p.detail,
                provider=p.provider,
                instance_type=p.instance_type,
                region=p.region,
                rent_cost_per_gpu_hour=money(rate),
                rent_cost_per_effective_gpu_hour=money(rate / u) if u > 0 else None,
                break_even_allocation_pct=_pct_float(result.allocation),
                outcome=result.outcome.name,
                cheaper_now=cheaper,
            )
        )
    if not rows:
        rows.append(
            BreakEvenRow(
                **common,  # type: ignore[arg-type]
                option=None,
                rate_source=RateSource.NONE.name,
                rate_source_detail="no catalog price, bill or [[rent_options]] entry for this GPU model",
                provider=None,
                instance_type=None,
                region=None,
                rent_cost_per_gpu_hour=None,
                rent_cost_per_effective_gpu_hour=None,
                break_even_allocation_pct=None,
                outcome=None,
                cheaper_now=None,
            )
        )
    return rows


#: The export's columns after ``period_start`` (GraphQL's field names in snake_case; money as
#: Decimal(38, 9) beside ``currency``).
MONEY_COLUMNS = (
    "own_fixed",
    "own_busy_energy",
    "own_idle_energy",
    "own_cost_per_gpu_hour",
    "own_cost_per_allocated_gpu_hour",
    "own_cost_per_effective_gpu_hour",
    "rent_cost_per_gpu_hour",
    "rent_cost_per_effective_gpu_hour",
)
FLOAT_COLUMNS = (
    "gpu_hours",
    "allocated_gpu_hours",
    "measured_allocation_pct",
    "measured_utilization_pct",
    "allocation_pct",
    "utilization_pct",
    "busy_power_w",
    "idle_power_w",
    "break_even_allocation_pct",
)
TEXT_COLUMNS = (
    "site",
    "gpu_model",
    "currency",
    "metric",
    "energy_basis",
    "option",
    "rate_source",
    "rate_source_detail",
    "provider",
    "instance_type",
    "region",
    "outcome",
    "cheaper_now",
)
COLUMNS = (
    *TEXT_COLUMNS[:4],
    *FLOAT_COLUMNS[:6],
    "what_if",
    "energy_basis",
    *FLOAT_COLUMNS[6:8],
    *MONEY_COLUMNS[:6],
    *TEXT_COLUMNS[5:11],
    *MONEY_COLUMNS[6:],
    "break_even_allocation_pct",
    "outcome",
    "cheaper_now",
)


def break_even_frame(rows: list[BreakEvenRow]) -> pl.DataFrame:
    """The rows as the export's columns (``metric`` upper-case as GraphQL shows it)."""
    data: dict[str, list[object]] = {name: [getattr(r, name) for r in rows] for name in COLUMNS}
    data["metric"] = [str(m).upper() for m in data["metric"]]
    schema: dict[str, pl.DataType] = {name: pl.String() for name in TEXT_COLUMNS}
    schema |= {name: pl.Float64() for name in FLOAT_COLUMNS}
    schema |= {name: pl.Decimal(38, 9) for name in MONEY_COLUMNS}
    schema["what_if"] = pl.Boolean()
    for name in ("busy_power_w", "idle_power_w"):
        data[name] = [None if v is None else float(str(v)) for v in data[name]]
    return pl.DataFrame(data, schema={name: schema[name] for name in COLUMNS})
