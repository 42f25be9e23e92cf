"""The GPU instance catalog: how many GPUs (and which) a cloud instance type has.

A bill says "24 hours of p5.48xlarge"; the ledger needs GPU-hours (192). The bundled catalog
``gpu_instances.csv`` (versioned on its first line; package data) maps AWS instance types, GCP
machine types, Azure VM sizes and Oracle Cloud (OCI) GPU shapes to ``provider``, ``gpu_model``,
``gpu_count`` and ``gpu_memory_gib`` (memory of ONE GPU). Operators add or correct entries — for
any provider, those arriving through FOCUS included — with ``[[instance_types]]`` tables in the
config file (:class:`InstanceTypeConfig`, ``provider = "oracle"``…; ``Settings.instance_catalog()``
builds the catalog the ingest uses); a configured entry replaces the bundled one of the same name.
Lookups ignore case and surrounding spaces (Azure spells sizes ``Standard_ND96isr_H100_v5`` or
``standard_nd96isr_h100_v5`` depending on the export).

An OCI GPU shape the catalog does not know (a new one) still gets its GPUs from its name, where the
name says them: OCI names GPU shapes ``<BM|VM>.GPU….<GPUs>`` (``BM.GPU.A100-v2.8`` → 8,
``VM.GPU.A10.1`` → 1; :data:`OCI_SHAPE_GPUS`) — a catalog entry, bundled or configured, wins.

What is deliberately *not* in it:

* GCP N1 machine types: ``n1-standard-8`` has no GPUs of its own; attached GPUs (T4, V100, P100,
  P4) are billed as their own GPU SKU rows (``is_gpu_sku``), whose quantity in hours already is
  GPU-hours. Every GCP family bills its GPUs that way (A2/A3/G2 too), so GCP GPU-hours come from
  the GPU SKU rows only; the core/RAM/SSD rows of a GPU machine bill 0 GPU-hours.
* Sizes with a fraction of a GPU (Azure NVadsA10 v5 below NV36ads) and figures not known for
  sure: a missing entry is reported (:func:`unknown_gpu_types`), a wrong one would silently
  misprice.

:func:`fill_gpus` completes a frame of billing lines (``connectors.billing.BILLING_SCHEMA``) in
one columnar join. A line whose instance type *looks* like a GPU family but is not in the catalog
keeps ``gpu_count``/``gpu_hours`` null — never 0 — and is named by :func:`unknown_gpu_types`, so
the import summary tells the operator which ``[[instance_types]]`` to add.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from connectors.billing import MONEY, ChargeCategory
from connectors.billing_io import by_distinct

CATALOG_FILE = "gpu_instances.csv"

#: ``usage_unit`` spellings that mean the quantity is in hours (CUR ``Hrs``, FOCUS ``Hours``,
#: Azure ``1 Hour``, GCP pricing unit ``hour``); compared lower-cased and trimmed.
HOUR_UNITS = frozenset({"hrs", "hr", "hours", "hour", "1 hour", "h"})

#: Usage lines that bill no GPU time although they name a GPU instance type: the negation that
#: offsets Savings-Plan-covered usage (its covered row counts the hours), and the unused part of a
#: commitment (idle reserved capacity — reported as commitment waste, not as GPU-hours).
NON_GPU_TIME_CHARGES = frozenset({"savingsplannegation", "unusedreservation", "unusedsavingsplan"})

#: Instance types that look like GPU families: AWS P and G (p3, p4de, p5en, g4dn, g5, g6e, gr6),
#: GCP accelerator-optimized (a2-, a3-, a4-, g2-, g4-), Azure N-series GPU sizes (NC, ND, NG, NV;
#: NP is FPGA), OCI GPU shapes (BM.GPU…, VM.GPU…). Matched lower-cased.
GPU_LOOKING = r"^(?:[pg][a-z]?\d+[a-z0-9\-]*\.|a\d+[a-z]?-|g\d+-|standard_n[cdgv]|(?:bm|vm)\.gpu)"
#: An OCI GPU shape whose last part is its number of GPUs (matched lower-cased): ``bm.gpu.h100.8``,
#: ``bm.gpu.a100-v2.8``, ``bm.gpu4.8``, ``vm.gpu3.4``. (In OCI's *standard* shapes the last number
#: counts OCPUs: only ``.GPU`` shapes are read this way.)
OCI_SHAPE_GPUS = r"^(?:bm|vm)\.gpu[0-9]*(?:\.[a-z0-9][a-z0-9-]*)*\.([0-9]{1,2})$"


class InstanceTypeConfig(BaseModel):
    """A ``[[instance_types]]`` table: adds an instance type or replaces the bundled entry."""

    model_config = ConfigDict(extra="forbid")

    instance_type: str = Field(min_length=1, max_length=100)
    gpu_model: str = Field(min_length=1, max_length=100)
    gpu_count: int = Field(gt=0)
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    provider: str | None = Field(
        default=None, description="aws | gcp | azure | …; default: the bundled entry's, else none"
    )


@dataclass(frozen=True, slots=True)
class InstanceType:
    provider: str | None
    instance_type: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float | None


def _key(instance_type: str) -> str:
    return instance_type.strip().lower()


def _key_expr(column: str = "instance_type") -> pl.Expr:
    return pl.col(column).str.strip_chars().str.to_lowercase()


class InstanceCatalog:
    """Instance types by name (case-insensitive). Build with :func:`load_catalog`."""

    def __init__(self, entries: Iterable[InstanceType], version: str) -> None:
        self.version = version
        self._by_key: dict[str, InstanceType] = {}
        for entry in entries:
            self._by_key[_key(entry.instance_type)] = entry
        self.frame = pl.DataFrame(
            {
                "_key": list(self._by_key),
                "_catalog_gpu_count": [e.gpu_count for e in self._by_key.values()],
            },
            schema={"_key": pl.String, "_catalog_gpu_count": pl.Int32},
        )

    def get(self, instance_type: str | None) -> InstanceType | None:
        return None if instance_type is None else self._by_key.get(_key(instance_type))

    def gpu_count(self, instance_type: str | None) -> int | None:
        entry = self.get(instance_type)
        return entry.gpu_count if entry else None

    def __contains__(self, instance_type: object) -> bool:
        return isinstance(instance_type, str) and _key(instance_type) in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)

    def entries(self) -> list[InstanceType]:
        return list(self._by_key.values())

    def with_overrides(self, overrides: Iterable[InstanceTypeConfig]) -> InstanceCatalog:
        """This catalog with ``overrides`` added or replacing entries of the same name."""
        merged = dict(self._by_key)
        count = 0
        for o in overrides:
            bundled = merged.get(_key(o.instance_type))
            provider = o.provider or (bundled.provider if bundled else None)
            merged[_key(o.instance_type)] = InstanceType(
                provider, o.instance_type.strip(), o.gpu_model, o.gpu_count, o.gpu_memory_gib
            )
            count += 1
        version = f"{self.version} + {count} configured" if count else self.version
        return InstanceCatalog(merged.values(), version)


@functools.cache
def bundled_catalog() -> InstanceCatalog:
    """The catalog shipped with the package (``gpu_instances.csv``)."""
    text = (resources.files("service.billing") / CATALOG_FILE).read_text(encoding="utf-8")
    first = text.splitlines()[0]
    version = first.split("version", 1)[1].split(":", 1)[0].strip() if "version" in first else "unknown"
    frame = pl.read_csv(
        text.encode(),
        comment_prefix="#",
        schema={
            "provider": pl.String,
            "instance_type": pl.String,
            "gpu_model": pl.String,
            "gpu_count": pl.Int32,
            "gpu_memory_gib": pl.Float64,
        },
    )
    return InstanceCatalog((InstanceType(**row) for row in frame.iter_rows(named=True)), version)


def load_catalog(overrides: Iterable[InstanceTypeConfig] = ()) -> InstanceCatalog:
    """The bundled catalog with the configured ``[[instance_types]]`` applied."""
    return bundled_catalog().with_overrides(overrides)


def _hours_unit() -> pl.Expr:
    return pl.col("usage_unit").str.strip_chars().str.to_lowercase().is_in(sorted(HOUR_UNITS))


def fill_gpus(lines: pl.DataFrame, catalog: InstanceCatalog | None = None) -> pl.DataFrame:
    """``lines`` with ``gpu_count`` and ``gpu_hours`` filled where the parser left them null.

    * ``gpu_count`` ← the catalog's count for ``instance_type`` (a count the source itself gives,
      e.g. FOCUS ``SkuPriceDetails.GpuCount``, is kept), else the count an OCI GPU shape's name
      states (:data:`OCI_SHAPE_GPUS`).
    * ``gpu_hours`` (a value the parser set is kept):
      GPU SKU rows (``is_gpu_sku``, GCP) in an hours unit → ``usage_quantity`` (already GPU-hours);
      other GCP rows of a known GPU machine → 0 (their GPUs are billed on the GPU SKU rows);
      ``Usage`` lines in an hours unit with a known count → ``usage_quantity × gpu_count``, except
      Savings Plan negations and unused commitments (:data:`NON_GPU_TIME_CHARGES`) → 0;
      a negative quantity → 0 (it is a finding, never negative billed hours);
      any other line with a known count → 0; without a count → null.

    Exact: ``Decimal(38, 9)`` times an integer count stays exact.
    """
    catalog = catalog or bundled_catalog()
    columns = lines.columns
    # What depends on one low-cardinality column alone is computed once per distinct value and
    # joined back (a CUR chunk of 20,000 lines names ~15 instance types, 6 units, 5 charge types):
    # 10 → 7 ms a chunk, where the key, the shape regex and the lower-casing ran per line.
    types = (
        lines.select(pl.col("instance_type").unique())
        .with_columns(_key_expr().alias("_key"))
        .join(catalog.frame, on="_key", how="left")
        .select(
            "instance_type",
            pl.coalesce(
                pl.col("_catalog_gpu_count"),
                pl.col("_key").str.extract(OCI_SHAPE_GPUS, 1).cast(pl.Int32, strict=False),
            ).alias("_type_gpu_count"),
        )
    )
    joined = lines.join(types, on="instance_type", how="left", nulls_equal=True, maintain_order="left")
    joined = by_distinct(joined, "usage_unit", {"_hours": _hours_unit().fill_null(False)})
    no_gpu_charge = (
        pl.col("charge_type").str.strip_chars().str.to_lowercase().is_in(sorted(NON_GPU_TIME_CHARGES))
    )
    joined = by_distinct(joined, "charge_type", {"_no_gpu_time": no_gpu_charge.fill_null(False)})
    count = pl.coalesce(pl.col("gpu_count"), pl.col("_type_gpu_count")).cast(pl.Int32)
    joined = joined.with_columns(count.alias("gpu_count"))
    gpu_sku = pl.col("is_gpu_sku").fill_null(False)
    hours = pl.col("_hours")
    is_usage = pl.col("charge_category") == ChargeCategory.USAGE.value
    no_gpu_time = pl.col("_no_gpu_time")
    known = pl.col("gpu_count").is_not_null()
    # A negative quantity (a credit-like usage row: flagged negative_usage by the dialect) bills no
    # GPU-hours: re-pricing must never see negative billed hours.
    negative = (pl.col("usage_quantity") < 0).fill_null(False)
    derived = (
        pl.when(negative & (known | gpu_sku))
        .then(pl.lit(0))
        .when(gpu_sku & hours)
        .then(pl.col("usage_quantity"))
        .when((pl.col("provider") == "gcp") & known)
        .then(pl.lit(0))
        .when(known & is_usage.fill_null(False) & hours & ~no_gpu_time)
        .then(pl.col("usage_quantity") * pl.col("gpu_count"))
        .when(known)
        .then(pl.lit(0))
        .otherwise(pl.lit(None))
        .cast(MONEY)
    )
    return joined.with_columns(pl.coalesce(pl.col("gpu_hours"), derived).alias("gpu_hours")).select(columns)


def unknown_gpu_types(lines: pl.DataFrame, catalog: InstanceCatalog | None = None) -> list[str]:
    """Instance types of ``lines`` that look like GPU families (:data:`GPU_LOOKING`) but have no
    GPU count — neither from the source nor from the catalog — sorted, as the bill spells them."""
    catalog = catalog or bundled_catalog()
    if lines.is_empty():
        return []
    key = _key_expr()
    found = lines.filter(
        key.str.contains(GPU_LOOKING).fill_null(False)
        & ~key.is_in(catalog.frame["_key"].implode())
        & pl.col("gpu_count").is_null()
    )
    return sorted(set(found["instance_type"].str.strip_chars().to_list()))
