"""Own or rent: the break-even allocation of an owned GPU against each way of renting one
(docs/break-even.md has the derivation; the domain only: no SQL, no GraphQL).

Per GPU-hour of an installed GPU, owning costs ``F + k·(P_idle + a·u·(P_busy − P_idle))``: ``F`` the
site's capex amortization + opex (accrues every present hour), ``k`` the energy price per watt-hour
(PUE included), ``P_busy``/``P_idle`` the GPU's draw while busy/idle, ``a`` the allocation (share of
hours some workload holds the GPU) and ``u`` the utilization of allocated time. Renting costs ``R``
per GPU-hour and is paid only for allocated hours. Per allocated GPU-hour the two are equal at::

    a* = (F + k·P_idle) / (R − k·u·(P_busy − P_idle))

Owning is cheaper above ``a*``. All arithmetic is exact (``Fraction``); amounts are rounded half-even
to 1e-9 only when shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.billing.catalog import InstanceCatalog
from service.money import NANOS_PER_UNIT
from service.pricing.common import Currency, PricingConfigError
from service.pricing.price_catalog import PriceCatalog
from service.pricing.tco import SiteConfig

WH_PER_KWH = 1000
SHARE_QUANTUM = 10**8
#: The largest price per hour accepted from configuration (a sanity bound, not a market view).
MAX_PRICE = Decimal(10**9)


class RentOption(Enum):
    """How a GPU is rented."""

    ON_DEMAND = "on_demand"
    COMMITMENT_1Y = "1y"
    COMMITMENT_3Y = "3y"
    SPOT = "spot"
    BILLS = "bills"  # what the bills of the window charged, commitments and discounts included


class RateSource(Enum):
    """Where a renting price came from."""

    CATALOG = "catalog"  # the public on-demand price catalog (service/pricing/price_catalog.csv)
    BILLS = "bills"  # the ledger's cost of cloud GPU-hours priced from billing lines
    CONFIG = "config"  # a [[rent_options]] entry
    NONE = "none"  # no price for this GPU model anywhere


class Outcome(Enum):
    BREAKS_EVEN = "breaks_even"  # owning is cheaper above a*, renting below
    RENT_ALWAYS = "rent_always"  # renting is cheaper even at 100 % allocation
    OWN_ALWAYS = "own_always"  # owning is cheaper at any allocation (nothing accrues while unused)


class RentOptionConfig(BaseModel):
    """One ``[[rent_options]]`` entry: a price for renting GPUs of one instance type or GPU model.

    ``option``: ``on_demand`` (replaces the catalog's price of the same provider, instance type and
    region), ``1y`` / ``3y`` (a commitment's effective hourly rate), ``spot``. The price is either
    ``price_per_gpu_hour`` or ``price_per_instance_hour`` (then ``instance_type`` must be in the
    instance catalog, which says its GPUs), in ``currency``. The GPU model is ``gpu_model`` or the
    instance type's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=200)
    provider: str = Field(min_length=1, max_length=32)
    option: Literal["on_demand", "1y", "3y", "spot"]
    instance_type: str | None = Field(default=None, min_length=1, max_length=100)
    gpu_model: str | None = Field(default=None, min_length=1, max_length=100)
    region: str | None = Field(default=None, min_length=1, max_length=100)
    price_per_gpu_hour: Decimal | None = Field(default=None, gt=0, le=MAX_PRICE, allow_inf_nan=False)
    price_per_instance_hour: Decimal | None = Field(default=None, gt=0, le=MAX_PRICE, allow_inf_nan=False)
    currency: Currency

    @field_validator("provider")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()

    @model_validator(mode="after")
    def _check(self) -> RentOptionConfig:
        if (self.price_per_gpu_hour is None) == (self.price_per_instance_hour is None):
            raise ValueError(f"rent option {self.name!r}: give price_per_gpu_hour or price_per_instance_hour")
        if self.price_per_instance_hour is not None and self.instance_type is None:
            raise ValueError(f"rent option {self.name!r}: price_per_instance_hour needs instance_type")
        if self.instance_type is None and self.gpu_model is None:
            raise ValueError(f"rent option {self.name!r}: give instance_type or gpu_model")
        return self


@dataclass(frozen=True)
class RentPrice:
    """A price per GPU-hour for renting GPUs of ``gpu_model``, and where it came from."""

    option: RentOption
    source: RateSource
    detail: str  # e.g. the catalog's version and date, the rent option's name, the bills' hours
    provider: str | None
    instance_type: str | None
    region: str | None
    gpu_model: str
    per_gpu_hour: Fraction | None  # None for BILLS: computed per day in the answer's currency
    currency: str


_VENDOR_WORDS = frozenset({"", "nvidia", "tesla"})


def model_tokens(gpu_model: str) -> frozenset[str]:
    return frozenset(re.split(r"[\s\-_/]+", gpu_model.lower())) - _VENDOR_WORDS


def same_gpu(a: str, b: str) -> bool:
    """Whether two spellings name one GPU: one's words (vendor words aside) are all in the other's.
    ``NVIDIA H100 80GB HBM3`` (NVML) is the catalog's ``NVIDIA H100 80GB``; ``NVIDIA A100 40GB``
    is not ``NVIDIA A100-SXM4-80GB``."""
    ta, tb = model_tokens(a), model_tokens(b)
    return bool(ta and tb) and (ta <= tb or tb <= ta)


def listed_prices(
    catalog: PriceCatalog, instances: InstanceCatalog, options: Sequence[RentOptionConfig]
) -> list[RentPrice]:
    """The catalog's on-demand prices (those whose instance type's GPUs are known) and the configured
    options; a configured ``on_demand`` replaces the catalog's entry of its provider, type and region.
    An option priced per instance of a type the instance catalog lacks is a configuration error."""
    configured: list[RentPrice] = []
    replaced: set[tuple[str, str, str | None]] = set()
    for o in options:
        entry = instances.get(o.instance_type)
        if o.price_per_instance_hour is not None:
            if entry is None:
                raise PricingConfigError(
                    f"rent option {o.name!r}: instance type {o.instance_type!r} is not in the instance "
                    "catalog; add it with [[instance_types]] or give price_per_gpu_hour"
                )
            per_gpu = Fraction(o.price_per_instance_hour) / entry.gpu_count
        else:
            per_gpu = Fraction(o.price_per_gpu_hour or 0)
        model = o.gpu_model or (entry.gpu_model if entry else None)
        if model is None:
            raise PricingConfigError(
                f"rent option {o.name!r}: instance type {o.instance_type!r} is not in the instance catalog; "
                "give gpu_model"
            )
        if o.option == "on_demand" and o.instance_type is not None:
            replaced.add((o.provider, o.instance_type.lower(), o.region.lower() if o.region else None))
        configured.append(
            RentPrice(
                RentOption(o.option), RateSource.CONFIG, f"rent option {o.name}", o.provider,
                o.instance_type, o.region, model, per_gpu, o.currency,
            )
        )  # fmt: skip
    listed: list[RentPrice] = []
    for p in catalog.prices:
        entry = instances.get(p.instance_type)
        if entry is None:
            continue  # GPUs unknown: no GPU-hour price (the instance catalog names every GPU type)
        key = (p.provider, p.instance_type.lower())
        if (*key, p.region.lower()) in replaced or (*key, None) in replaced:
            continue
        detail = f"catalog {catalog.label}, observed {p.as_of.isoformat()} ({p.source})"
        per_gpu = Fraction(p.price_per_instance_hour) / entry.gpu_count
        listed.append(
            RentPrice(
                RentOption.ON_DEMAND, RateSource.CATALOG, detail, p.provider, p.instance_type, p.region,
                entry.gpu_model, per_gpu, p.currency,
            )
        )  # fmt: skip
    return listed + configured


@dataclass(frozen=True)
class Owning:
    """What an owned GPU-hour costs, in one currency: ``fixed`` per present hour, ``kwh_price``
    (PUE included) and the draw while busy and idle in watts."""

    fixed: Fraction
    kwh_price: Fraction
    busy_power_w: Fraction
    idle_power_w: Fraction

    @classmethod
    def of_site(
        cls, site: SiteConfig, gpu_model: str, busy_power_w: Fraction, idle_power_w: Fraction
    ) -> Owning:
        """The site's TCO for ``gpu_model`` (a model without capex is the site's configuration error)."""
        fixed = Fraction(site.capex(gpu_model)) / (
            Fraction(site.amortization_years) * Fraction(site.hours_per_year)
        ) + Fraction(site.opex_per_gpu_hour)
        return cls(fixed, Fraction(site.price_per_kwh) * Fraction(site.pue), busy_power_w, idle_power_w)

    def scaled(self, factor: Fraction) -> Owning:
        """In another currency: every amount × ``factor`` (powers unchanged)."""
        return Owning(self.fixed * factor, self.kwh_price * factor, self.busy_power_w, self.idle_power_w)

    @property
    def busy_energy(self) -> Fraction:
        """Energy cost of a busy GPU-hour."""
        return self.kwh_price * self.busy_power_w / WH_PER_KWH

    @property
    def idle_energy(self) -> Fraction:
        """Energy cost of an idle GPU-hour."""
        return self.kwh_price * self.idle_power_w / WH_PER_KWH

    def per_gpu_hour(self, allocation: Fraction, utilization: Fraction) -> Fraction:
        """Cost of a present GPU-hour at allocation ``a`` and utilization ``u`` of allocated time."""
        return (
            self.fixed + self.idle_energy + allocation * utilization * (self.busy_energy - self.idle_energy)
        )

    def per_allocated_gpu_hour(self, allocation: Fraction, utilization: Fraction) -> Fraction | None:
        return None if allocation <= 0 else self.per_gpu_hour(allocation, utilization) / allocation

    def per_effective_gpu_hour(self, allocation: Fraction, utilization: Fraction) -> Fraction | None:
        busy = allocation * utilization
        return None if busy <= 0 else self.per_gpu_hour(allocation, utilization) / busy


@dataclass(frozen=True)
class BreakEven:
    outcome: Outcome
    allocation: Fraction | None  # a*, in [0, 1]; None unless a break-even exists


def break_even(owning: Owning, rent_per_gpu_hour: Fraction, utilization: Fraction) -> BreakEven:
    """The allocation at which an owned GPU-hour in use costs what a rented one does (module docstring)."""
    always = owning.fixed + owning.idle_energy
    margin = rent_per_gpu_hour - utilization * (owning.busy_energy - owning.idle_energy)
    if margin <= 0:
        return BreakEven(Outcome.RENT_ALWAYS, None)
    if always <= 0:
        return BreakEven(Outcome.OWN_ALWAYS, Fraction(0))
    a_star = always / margin
    if a_star > 1:
        return BreakEven(Outcome.RENT_ALWAYS, None)
    return BreakEven(Outcome.BREAKS_EVEN, a_star)


def money(value: Fraction | None) -> Decimal | None:
    """A shown amount: rounded half-even to 1e-9 once, in integers (exact at any size: a decimal
    context's 28 digits would refuse a large amount's nanos)."""
    if value is None:
        return None
    nanos, rest = divmod(value.numerator * NANOS_PER_UNIT, value.denominator)
    if 2 * rest > value.denominator or (2 * rest == value.denominator and nanos % 2):
        nanos += 1
    return Decimal(f"{nanos}e-9")


def share_of(value: Fraction) -> Fraction:
    """A share kept to 1e-8 (percentages to the 1e-6 GraphQL shows), half-even: the answer is then
    computed from the figures it shows, and a vanishing share is 0, never a 1e300 cost per hour."""
    return Fraction(round(value * SHARE_QUANTUM), SHARE_QUANTUM)


def pct(share: Fraction | None) -> Decimal | None:
    return money(None if share is None else share * 100)


def weighted_mean(values: Iterable[tuple[Fraction, Fraction]]) -> Fraction | None:
    """Σ value·weight ÷ Σ weight over ``(value, weight)`` pairs; None without weight."""
    pairs = list(values)
    total = sum((w for _, w in pairs), Fraction(0))
    return None if total <= 0 else sum((v * w for v, w in pairs), Fraction(0)) / total


@dataclass(frozen=True)
class Planning:
    """What a break-even answer needs from the configuration: the on-prem sites (owning), the listed
    renting prices (catalog and ``[[rent_options]]``) and the catalog's label."""

    sites: tuple[SiteConfig, ...] = ()
    prices: tuple[RentPrice, ...] = ()
    catalog_label: str = ""
