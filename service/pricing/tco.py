"""On-prem TCO model (docs/design.md §4): what a GPU-hour costs on hardware we own.

Per GPU-hour of presence (busy, idle or unobserved alike)::

    capex / (amortization_years × hours_per_year) + opex_per_gpu_hour

plus energy: ``kWh × price_per_kwh × pue``, with kWh from the measured ``energy_j`` of the ledger
row, or — when nothing was measured — ``tdp_w × assumed_load × present_s × gpu_fraction`` (flagged
as estimated; ``tdp_w`` is the physical board's, so a MIG instance is estimated at its share). A row
with neither measured energy nor a TDP is priced without energy (``energy_cost`` null).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.money import NANOS_PER_UNIT
from service.pricing.common import Currency, PricingConfigError


class SiteConfig(BaseModel):
    """One ``[[sites]]`` entry: the TCO inputs of an on-prem site, in ``currency``.

    A device belongs to the site when every given matcher equals its own: ``match_region`` its
    ``region`` (on-prem: the site), ``match_cluster`` its ``cluster``. At least one is required.
    When several sites match, the most specific wins: both matchers > cluster > region.

    ``capex_per_gpu`` maps a GPU model to the GPU's share of its server's purchase price;
    ``default_capex_per_gpu`` covers other models. ``price_per_kwh`` is per kWh drawn by the GPU;
    ``pue`` scales it to the facility's draw. ``assumed_load`` is the share of TDP assumed drawn when
    no energy was measured. ``opex_per_gpu_hour`` covers support, staff and space.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=190)
    match_region: str | None = Field(default=None, min_length=1)
    match_cluster: str | None = Field(default=None, min_length=1)
    currency: Currency
    capex_per_gpu: dict[str, Decimal] = Field(default_factory=dict)
    default_capex_per_gpu: Decimal | None = Field(default=None, ge=0)
    amortization_years: Decimal = Field(default=Decimal(4), gt=0)
    hours_per_year: Decimal = Field(default=Decimal(8760), gt=0)
    price_per_kwh: Decimal = Field(ge=0)
    pue: Decimal = Field(default=Decimal("1.0"), ge=1)
    opex_per_gpu_hour: Decimal = Field(default=Decimal(0), ge=0)
    assumed_load: Decimal = Field(default=Decimal("0.5"), ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> SiteConfig:
        if self.match_region is None and self.match_cluster is None:
            raise ValueError(f"site {self.name!r}: set match_region and/or match_cluster")
        negative = [model for model, capex in self.capex_per_gpu.items() if capex < 0]
        if negative:
            raise ValueError(f"site {self.name!r}: negative capex for {', '.join(negative)}")
        return self

    @property
    def specificity(self) -> int:
        return (2 if self.match_cluster is not None else 0) + (1 if self.match_region is not None else 0)

    def matches(self, region: str | None, cluster: str | None) -> bool:
        return (self.match_region is None or self.match_region == region) and (
            self.match_cluster is None or self.match_cluster == cluster
        )

    def capex(self, gpu_model: str | None) -> Decimal:
        """The GPU's capex; a model without one (and no default) is a configuration error."""
        if gpu_model is not None and gpu_model in self.capex_per_gpu:
            return self.capex_per_gpu[gpu_model]
        if self.default_capex_per_gpu is not None:
            return self.default_capex_per_gpu
        raise PricingConfigError(
            f"site {self.name!r} has no capex for GPU model {gpu_model or '<unknown>'!r}; "
            "add it to capex_per_gpu or set default_capex_per_gpu"
        )

    # Exact per-site constants, in 1e-9 currency units (nanos), as fractions: the per-row arithmetic
    # multiplies their numerators and denominators as integers and rounds once.

    def hourly_nanos(self, gpu_model: str | None) -> Fraction:
        """Capex amortization + opex per GPU-hour, in nanos."""
        per_hour = Fraction(self.capex(gpu_model)) / (
            Fraction(self.amortization_years) * Fraction(self.hours_per_year)
        )
        return (per_hour + Fraction(self.opex_per_gpu_hour)) * NANOS_PER_UNIT

    def kwh_nanos(self) -> Fraction:
        """Energy price per kWh the GPU draws, PUE included, in nanos."""
        return Fraction(self.price_per_kwh) * Fraction(self.pue) * NANOS_PER_UNIT

    def assumed_kwh_nanos(self) -> Fraction:
        """Energy price per kWh of TDP (× assumed load), in nanos."""
        return self.kwh_nanos() * Fraction(self.assumed_load)


def check_sites(sites: Sequence[SiteConfig]) -> None:
    """Site names are unique and no two sites claim the same devices with equal specificity."""
    names: set[str] = set()
    scopes: dict[tuple[str | None, str | None], str] = {}
    for site in sites:
        if site.name in names:
            raise PricingConfigError(f"two sites are named {site.name!r}")
        names.add(site.name)
        scope = (site.match_region, site.match_cluster)
        if scope in scopes:
            raise PricingConfigError(
                f"sites {scopes[scope]!r} and {site.name!r} both match region={scope[0]!r} "
                f"cluster={scope[1]!r}; a device must belong to one site"
            )
        scopes[scope] = site.name


def match_site(sites: Sequence[SiteConfig], region: str | None, cluster: str | None) -> SiteConfig | None:
    """The most specific site a device with this region and cluster belongs to, if any."""
    found = [site for site in sites if site.matches(region, cluster)]
    return max(found, key=lambda site: site.specificity, default=None)
