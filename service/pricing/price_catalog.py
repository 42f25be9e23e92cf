"""The public on-demand GPU price catalog: list prices per instance-hour by provider, instance type
and region (``price_catalog.csv``, versioned and dated on its first line, sources in its header).

A planner without bills still gets a renting price (docs/break-even.md). The file holds instance
prices; a GPU-hour's price is the instance price ÷ the instance's GPUs from the instance catalog
(``service/billing/gpu_instances.csv``), so both catalogs are needed to price a GPU. Operators
replace the whole file with ``price_catalog_path`` or single entries with ``[[rent_options]]``
(``option = "on_demand"``, :mod:`service.pricing.break_even`).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

from service.pricing.common import PricingConfigError

CATALOG_FILE = "price_catalog.csv"
COLUMNS = ("provider", "instance_type", "region", "price_per_instance_hour", "currency", "as_of", "source")
_HEADER = re.compile(r"version\s+(?P<version>\S+)\s+\((?P<date>\d{4}-\d{2}-\d{2})\)")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
#: The largest price per instance-hour accepted (a sanity bound against a typo's extra digits).
MAX_PRICE = Decimal(10**9)


@dataclass(frozen=True, slots=True)
class CatalogPrice:
    """One list price: ``price_per_instance_hour`` in ``currency`` as observed on ``as_of``."""

    provider: str
    instance_type: str
    region: str
    price_per_instance_hour: Decimal
    currency: str
    as_of: dt.date
    source: str


@dataclass(frozen=True)
class PriceCatalog:
    """The catalog's ``version`` and ``date`` (named in every answer that uses it) and its prices."""

    version: str
    date: dt.date
    prices: tuple[CatalogPrice, ...]

    @property
    def label(self) -> str:
        return f"{self.version} ({self.date.isoformat()})"


def parse_catalog(text: str, where: str) -> PriceCatalog:
    """A catalog from CSV text: first line ``# … version <v> (<YYYY-MM-DD>)``, ``#`` comments, then
    :data:`COLUMNS`. Anything else is a :class:`PricingConfigError` naming ``where`` and the line."""
    lines = text.splitlines()
    head = _HEADER.search(lines[0]) if lines else None
    if head is None:
        raise PricingConfigError(f"{where}: the first line must say 'version <v> (<YYYY-MM-DD>)'")
    date = _date(head["date"], where, 1)
    rows = [(n, line) for n, line in enumerate(lines, 1) if line.strip() and not line.startswith("#")]
    if not rows or tuple(c.strip() for c in rows[0][1].split(",")) != COLUMNS:
        raise PricingConfigError(f"{where}: the header row must be {','.join(COLUMNS)}")
    prices: list[CatalogPrice] = []
    seen: set[tuple[str, str, str]] = set()
    for n, line in rows[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(COLUMNS) or not all(cells[:3]):
            raise PricingConfigError(f"{where} line {n}: expected {len(COLUMNS)} non-empty cells")
        provider, instance_type, region, price_text, currency, as_of, source = cells
        try:
            price = Decimal(price_text)
        except InvalidOperation:
            raise PricingConfigError(f"{where} line {n}: price {price_text!r} is not a number") from None
        if not price.is_finite() or not 0 < price <= MAX_PRICE:
            raise PricingConfigError(f"{where} line {n}: price must be a positive number up to {MAX_PRICE}")
        if not _CURRENCY.match(currency):
            raise PricingConfigError(f"{where} line {n}: currency {currency!r} is not an ISO 4217 code")
        key = (provider.lower(), instance_type.lower(), region.lower())
        if key in seen:
            raise PricingConfigError(f"{where} line {n}: {provider} {instance_type} {region} is listed twice")
        seen.add(key)
        prices.append(
            CatalogPrice(
                provider.lower(), instance_type, region, price, currency, _date(as_of, where, n), source
            )
        )
    return PriceCatalog(head["version"], date, tuple(prices))


def _date(text: str, where: str, n: int) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise PricingConfigError(f"{where} line {n}: {text!r} is not a date (YYYY-MM-DD)") from None


@functools.cache
def bundled_price_catalog() -> PriceCatalog:
    """The catalog shipped with the package."""
    text = (resources.files("service.pricing") / CATALOG_FILE).read_text(encoding="utf-8")
    return parse_catalog(text, CATALOG_FILE)


def load_price_catalog(path: Path | None = None) -> PriceCatalog:
    """``path``'s catalog (an operator's own file), else the bundled one."""
    if path is None:
        return bundled_price_catalog()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PricingConfigError(f"{path}: cannot read the price catalog: {exc.strerror}") from None
    return parse_catalog(text, str(path))
