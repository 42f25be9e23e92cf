"""FinOps FOCUS 1.0 / 1.1 / 1.2 cost and usage exports, from any provider (``type = "focus"``).

The source is a directory (read recursively) or one file of FOCUS exports: CSV, gzipped CSV or
Parquet, told apart by their bytes (gzip and ``PAR1`` magic), not their names. AWS Data Exports
("FOCUS 1.0/1.2 with AWS columns"), Microsoft Cost Management ``FocusCost`` exports and Google's
FOCUS view over the detailed billing export all produce this layout; one file may hold several
providers. One :class:`~connectors.billing.BillingBatch` per file.

Mapping decisions (FORMATS.md §5.4; the why of each):

* **Version** is told by the columns present — 1.1 added CapacityReservationId … SkuPriceDetails,
  1.2 added BillingAccountType … PricingCurrency*; any one of a version's added columns makes the
  file that version. The *Mandatory* columns of that version (the spec's feature level; most
  others are Conditional, present only when the provider supports the feature) are required: a
  missing one refuses the whole file, naming it. The detected version is logged per file.
* **Money**: ``BilledCost`` → ``billed_cost`` (the invoice basis), ``EffectiveCost`` →
  ``effective_cost`` (amortized, what allocation sums), ``ListCost`` → ``list_cost``, each parsed
  from the text to ``Decimal(38, 9)`` exactly. Both billed and effective are kept per line and
  never added: commitment-covered usage has ``BilledCost = 0`` and an effective cost, purchases
  have ``EffectiveCost = 0`` and a billed cost, so Σ effective and Σ billed are each right alone.
* **Provider**: ``ProviderName`` "AWS"/"Amazon Web Services" → ``aws``, "Google Cloud" → ``gcp``,
  "Microsoft" → ``azure``; any other provider keeps its name lower-cased (FOCUS is not only the
  three clouds).
* **Resource**: ``ResourceId`` as the metrics connectors' ``DeviceInfo.instance_id`` spells it, so
  billing joins telemetry: AWS ``i-…`` as given; GCP the numeric instance id when the id ends in
  ``/instances/<id>`` (else as given); Azure lower-cased (ARM ids are case-insensitive and exports
  vary the case). Rows of an *unused* commitment (``CommitmentDiscountStatus = Unused``) have no
  resource by the spec; one that names one is not charged to it (idle capacity is not the
  instance's cost).
* **Pricing**: ``PricingCategory`` Standard → on_demand, Dynamic → spot, Committed → commitment,
  Other → other, on Usage rows (the contract leaves non-usage lines without a pricing model).
* **charge_type** (the source's own type): ``ChargeCategory`` (plus ``/Correction`` when
  ``ChargeClass`` says so), except unused commitments: ``Unused`` + ``CommitmentDiscountType``
  (``UnusedReservation``, ``UnusedSavingsPlan``) — the names the instance catalog treats as
  billing no GPU time.
* **GPUs**: ``instance_type`` from ``SkuPriceDetails.InstanceType`` / ``.MachineSpec``, else
  Microsoft's ``x_SkuDetails.ServiceType`` (the VM size), else AWS's ``x_UsageType``
  (``BoxUsage:p5.48xlarge``, ``USE2-SpotUsage:g5.12xlarge``). ``gpu_count`` from
  ``SkuPriceDetails.GpuCount`` when the provider gives it; otherwise it stays null and the billing
  ingestor fills it from the instance catalog by ``instance_type`` (``catalog.fill_gpus``, with
  the operator's ``[[instance_types]]`` overrides — filling it here from the bundled catalog would
  hide those overrides). A SKU naming a GPU (GCP ``Nvidia H100 80GB GPU running in Americas``,
  ``H200 141GB GPU …``) is a GPU SKU row (``is_gpu_sku``): its hours already are GPU-hours.
  ``gpu_hours``: GPU SKU usage rows → ``ConsumedQuantity``; other usage rows with a count →
  ``ConsumedQuantity × gpu_count``; other rows of a GPU resource (purchases, credits, unused
  commitments, a GCP machine's core/RAM/SSD rows) → 0; left null when no count is known yet.
  ``ConsumedQuantity`` is null by the spec unless the row is Usage and not an unused commitment.
* **line_key**: FOCUS has no line id. The key is the SHA-1 of the record's fields (every column,
  by name, trimmed; *not* the line number), so the same record in a re-exported file keeps its
  key and a record repeated in a file is refused as a duplicate, naming both lines.

Bad input: a truncated gzip/Parquet file, a missing mandatory column or a header that is not
UTF-8 refuses the whole file (:class:`~connectors.billing.BillingFileError`, yielded in place of
its batch so the other files go on); a record with non-UTF-8 bytes or fewer fields than the
header, a value that is not a number/timestamp/allowed value, a negative ``ConsumedQuantity`` on
a Usage row that is not a correction, an unknown currency or a duplicated record is refused by
file, line and column. The good rows land; ``read == accepted + refused``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
from pydantic import Field

from connectors.billing import (
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    ChargeCategory,
    PricingModel,
    RefusedRow,
    conform,
)
from connectors.billing_io import (
    LINE,
    Checks,
    csv_frame,
    parquet_frame,
    read_bytes,
    require_columns,
    sha1_keys,
)
from service.billing.currencies import BILLING_CURRENCIES

log = logging.getLogger(__name__)

#: The 43 columns of FOCUS 1.0.
FOCUS_1_0_COLUMNS: tuple[str, ...] = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)  # fmt: skip
#: Columns FOCUS 1.1 added (→ 50).
FOCUS_1_1_ADDED: tuple[str, ...] = (
    "CapacityReservationId", "CapacityReservationStatus", "CommitmentDiscountQuantity",
    "CommitmentDiscountUnit", "ServiceSubcategory", "SkuMeter", "SkuPriceDetails",
)  # fmt: skip
#: Columns FOCUS 1.2 added (→ 57).
FOCUS_1_2_ADDED: tuple[str, ...] = (
    "BillingAccountType", "SubAccountType", "InvoiceId", "PricingCurrency",
    "PricingCurrencyContractedUnitPrice", "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice",
)  # fmt: skip

#: Feature level "Mandatory" in FOCUS 1.0 and 1.1 (the others are Conditional or Recommended).
_MANDATORY: tuple[str, ...] = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
)  # fmt: skip
#: Mandatory columns per version; 1.2 made ServiceSubcategory (Recommended in 1.1) mandatory.
MANDATORY: dict[str, tuple[str, ...]] = {
    "1.0": _MANDATORY,
    "1.1": _MANDATORY,
    "1.2": (*_MANDATORY, "ServiceSubcategory"),
}

#: ``ProviderName`` (lower-cased) → the ledger's provider; others keep their lower-cased name.
PROVIDERS: dict[str, str] = {
    "aws": "aws",
    "amazon web services": "aws",
    "amazon": "aws",
    "google cloud": "gcp",
    "google cloud platform": "gcp",
    "google": "gcp",
    "gcp": "gcp",
    "microsoft": "azure",
    "microsoft azure": "azure",
    "azure": "azure",
}
PRICING: dict[str, str] = {
    "Standard": PricingModel.ON_DEMAND.value,
    "Dynamic": PricingModel.SPOT.value,
    "Committed": PricingModel.COMMITMENT.value,
    "Other": PricingModel.OTHER.value,
}
CHARGE_CATEGORIES: tuple[str, ...] = tuple(c.value for c in ChargeCategory)
CHARGE_CLASSES: tuple[str, ...] = ("Correction",)
CHARGE_FREQUENCIES: tuple[str, ...] = ("One-Time", "Recurring", "Usage-Based")
COMMITMENT_STATUSES: tuple[str, ...] = ("Used", "Unused")
#: ``ConsumedUnit`` spellings in hours (FOCUS UnitFormat says ``Hours``; compared lower-cased).
HOUR_UNITS: tuple[str, ...] = ("hours", "hour", "hrs", "hr", "h")
#: A SKU that is the GPU itself (GCP bills GPUs as their own SKUs): its name says GPU.
GPU_SKU = r"(?i)\bGPUs?\b"
#: AWS usage types of instance hours: ``[REGION-]BoxUsage:<type>`` (also Spot, Dedicated, Host).
AWS_INSTANCE_USAGE = r"^(?:[A-Z0-9]+-)?(?:BoxUsage|SpotUsage|DedicatedUsage|HostBoxUsage|SchedUsage):(.+)$"
#: File names read from a directory (the content decides CSV, gzip or Parquet).
SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet")


class FocusConfig(BillingConfig):
    """``path``: a FOCUS export file, or a directory read recursively for ``*.csv``,
    ``*.csv.gz`` and ``*.parquet`` files (in name order)."""

    path: str = Field(min_length=1, description="a FOCUS export file or a directory of them")


def detect_version(columns: list[str]) -> str:
    """The FOCUS version a header belongs to: the newest one any of whose added columns is present."""
    present = set(columns)
    if present.intersection(FOCUS_1_2_ADDED):
        return "1.2"
    if present.intersection(FOCUS_1_1_ADDED):
        return "1.1"
    return "1.0"


class FocusConnector:
    """Billing connector for FinOps FOCUS exports (``type = "focus"``)."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[BillingConfig]] = FocusConfig

    def __init__(self, config: FocusConfig) -> None:
        self.config = config

    def close(self) -> None:
        """Nothing is held open between reads."""

    def files(self) -> list[Path]:
        root = Path(self.config.path)
        if root.is_file():
            return [root]
        if not root.is_dir():
            return []
        return sorted(p for p in root.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        """One batch per file whose billing period overlaps ``[start, end)``; a file that cannot be
        read at all is *yielded* as its :class:`BillingFileError`, so the other files go on."""
        paths = self.files()
        if not paths and not Path(self.config.path).exists():
            yield BillingFileError(self.config.path, "no such file or directory")  # type: ignore[misc]
            return
        for path in paths:
            try:
                batch = self.read_file(path)
            except BillingFileError as error:
                yield error  # type: ignore[misc]
                continue
            unknown = batch.period_start is None or batch.period_end is None
            if unknown or (batch.period_start < end and batch.period_end > start):  # type: ignore[operator]
                yield batch

    def read_file(self, path: str | Path, data: bytes | None = None) -> BillingBatch:
        """The batch of one export file (``data``: its bytes when already fetched)."""
        file = str(path)
        raw = read_bytes(path, data)
        if raw[:4] == b"PAR1":
            frame, refused = _as_text(parquet_frame(raw, file)), []
        else:
            frame, refused = csv_frame(raw, file)
        read = frame.height + len(refused)
        version = detect_version(frame.columns)
        require_columns(frame, file, MANDATORY[version])
        frame = frame.with_columns(
            pl.lit(None, dtype=pl.String).alias(c)
            for c in (*FOCUS_1_0_COLUMNS, *FOCUS_1_1_ADDED, "x_SkuDescription", "x_SkuDetails", "x_UsageType")
            if c not in frame.columns
        )
        lines, bad = _normalize(frame, file)
        refused.extend(bad)
        refused.sort(key=lambda r: r.line or 0)
        period_start = lines["_period_start"].min() if lines.height else None
        period_end = lines["_period_end"].max() if lines.height else None
        log.info(
            "FOCUS %s export %s: %d rows read, %d accepted, %d refused",
            version,
            file,
            read,
            lines.height,
            len(refused),
        )
        return BillingBatch(
            lines=conform(lines.with_columns(pl.lit(file).alias("source_file"))),
            source_file=file,
            refused=refused,
            read=read,
            period_start=period_start,  # type: ignore[arg-type]
            period_end=period_end,  # type: ignore[arg-type]
        )


def _as_text(frame: pl.DataFrame) -> pl.DataFrame:
    """A Parquet frame's typed columns as the text a CSV export would hold, so both go through the
    same checks: times as ISO 8601 UTC, floats through Decimal (never a float's scientific notation)."""
    out = []
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if name == LINE or dtype == pl.String:
            out.append(col)
        elif isinstance(dtype, pl.Datetime):
            utc = col.dt.convert_time_zone("UTC") if dtype.time_zone else col.dt.replace_time_zone("UTC")
            out.append(utc.dt.strftime("%Y-%m-%dT%H:%M:%S%.fZ"))
        elif dtype in (pl.Float32, pl.Float64):
            out.append(col.cast(pl.Decimal(38, 15)).cast(pl.String))
        else:
            out.append(col.cast(pl.String))
    return frame.select(out)


def _text(column: str) -> pl.Expr:
    """Trimmed text, empty → null."""
    text = pl.col(column).str.strip_chars()
    return pl.when(text == "").then(None).otherwise(text)


def _line_keys(frame: pl.DataFrame) -> pl.Series:
    record = pl.concat_str(
        [
            pl.lit(f"{c}=") + pl.col(c).str.strip_chars().fill_null("")
            for c in sorted(frame.columns)
            if c != LINE
        ],
        separator="\x1f",
    )
    return sha1_keys(frame.select(record).to_series())


def _normalize(frame: pl.DataFrame, file: str) -> tuple[pl.DataFrame, list[RefusedRow]]:
    """Checked, normalized lines (``BILLING_SCHEMA`` columns plus ``_period_start/_end``) and the
    refused rows."""
    frame = frame.with_columns(_line_keys(frame).alias("line_key"))
    checks = Checks(file)
    category = _text("ChargeCategory")
    correction = _text("ChargeClass") == "Correction"
    is_usage = category == ChargeCategory.USAGE.value

    def allowed(column: str, values: tuple[str, ...], *, required: bool = False) -> None:
        value = _text(column)
        bad = value.is_not_null() & ~value.is_in(values)
        reason = f"not one of {', '.join(values)}"
        checks.add(column, reason, (bad | value.is_null()) if required else bad)

    checks.add("ProviderName", "empty where a provider is required", _text("ProviderName").is_null())
    allowed("ChargeCategory", CHARGE_CATEGORIES, required=True)
    allowed("ChargeClass", CHARGE_CLASSES)
    allowed("ChargeFrequency", CHARGE_FREQUENCIES)
    allowed("PricingCategory", tuple(PRICING))
    allowed("CommitmentDiscountStatus", COMMITMENT_STATUSES)
    parsed: dict[str, pl.Expr] = {
        "charge_start": checks.timestamp("ChargePeriodStart", *_ISO_FORMATS),
        "charge_end": checks.timestamp("ChargePeriodEnd", *_ISO_FORMATS),
        "_period_start": checks.timestamp("BillingPeriodStart", *_ISO_FORMATS),
        "_period_end": checks.timestamp("BillingPeriodEnd", *_ISO_FORMATS),
        "billed_cost": checks.decimal("BilledCost"),
        "effective_cost": checks.decimal("EffectiveCost"),
        "list_cost": checks.decimal("ListCost"),
        "usage_quantity": checks.decimal("ConsumedQuantity", required=False),
        "currency": checks.currency("BillingCurrency", BILLING_CURRENCIES),
    }
    quantity = pl.col("ConsumedQuantity").str.strip_chars().cast(MONEY, strict=False)
    checks.add(
        "ConsumedQuantity",
        "negative on a Usage row that is not a correction",
        is_usage & ~correction.fill_null(False) & (quantity < 0),
    )
    checks.add(
        "ChargePeriodEnd",
        "not after ChargePeriodStart (the end is exclusive)",
        parsed["charge_end"] <= parsed["charge_start"],
    )
    good, refused = checks.split(frame, parsed)

    # The frame is in line order: the first of identical records is kept, the later ones refused.
    good = good.with_columns(pl.col(LINE).min().over("line_key").alias("_first"))
    repeated = good.filter(pl.col(LINE) != pl.col("_first"))
    for row in repeated.select(LINE, "_first").iter_rows(named=True):
        reason = f"duplicate of line {row['_first']}: an identical record (FOCUS has no line id)"
        refused.append(RefusedRow(file, row[LINE], "line_key", reason))
    good = good.filter(pl.col(LINE) == pl.col("_first")).drop("_first")
    return _map(good), refused


#: ISO 8601 as FOCUS writes it (``2025-09-01T00:00:00Z``), with fractions or an offset, and the
#: space-separated form some CSV writers use.
_ISO_FORMATS: tuple[str, ...] = (
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%:z",
    "%Y-%m-%dT%H:%M:%S%.f%:z",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S%.f",
)


def _map(good: pl.DataFrame) -> pl.DataFrame:
    """Checked rows → the contract's columns (columnar)."""
    provider_name = _text("ProviderName").str.to_lowercase()
    provider = provider_name.replace_strict(PROVIDERS, default=provider_name)
    category = _text("ChargeCategory")
    is_usage = category == ChargeCategory.USAGE.value
    status = _text("CommitmentDiscountStatus")
    unused = (status == "Unused").fill_null(False)
    resource = _text("ResourceId")
    resource_id = (
        pl.when(unused)
        .then(None)
        .when(pl.col("provider") == "gcp")
        .then(pl.coalesce(resource.str.extract(r"/instances/(\d+)$"), resource))
        .when(pl.col("provider") == "azure")
        .then(resource.str.to_lowercase())
        .otherwise(resource)
    )
    charge_type = (
        pl.when(unused)
        .then(
            pl.lit("Unused")
            + pl.coalesce(_text("CommitmentDiscountType").str.replace_all(" ", ""), pl.lit("Commitment"))
        )
        .when(_text("ChargeClass") == "Correction")
        .then(category + pl.lit("/Correction"))
        .otherwise(category)
    )
    details = _text("SkuPriceDetails")
    instance_type = pl.coalesce(
        details.str.json_path_match("$.InstanceType"),
        details.str.json_path_match("$.MachineSpec"),
        _text("x_SkuDetails").str.json_path_match("$.ServiceType"),
        _text("x_UsageType").str.extract(AWS_INSTANCE_USAGE),
    ).str.strip_chars()
    gpu_count = details.str.json_path_match("$.GpuCount").str.strip_chars().cast(pl.Int32, strict=False)
    is_gpu_sku = (
        pl.coalesce(_text("SkuMeter").str.contains(GPU_SKU), pl.lit(False))
        | pl.coalesce(_text("x_SkuDescription").str.contains(GPU_SKU), pl.lit(False))
    ) & gpu_count.is_null()
    hours = _text("ConsumedUnit").str.to_lowercase().is_in(HOUR_UNITS).fill_null(False)
    counts_time = is_usage.fill_null(False) & ~unused
    lines = good.with_columns(
        provider.alias("provider"),
        pl.col(LINE).alias("line_no"),
        _text("BillingAccountId").alias("billing_account"),
        _text("SubAccountId").alias("account"),
        charge_type.alias("charge_type"),
        category.alias("charge_category"),
        pl.when(is_usage)
        .then(_text("PricingCategory").replace_strict(PRICING, default=None))
        .alias("pricing_model"),
        _text("CommitmentDiscountId").alias("commitment_id"),
        _text("ResourceName").alias("resource_name"),
        _text("ServiceName").alias("service"),
        pl.coalesce(_text("SkuId"), _text("SkuPriceId")).alias("sku"),
        pl.coalesce(_text("x_SkuDescription"), _text("SkuMeter"), _text("ChargeDescription")).alias(
            "sku_description"
        ),
        instance_type.alias("instance_type"),
        _text("RegionId").alias("region"),
        _text("ConsumedUnit").alias("usage_unit"),
        gpu_count.alias("gpu_count"),
        pl.when(is_gpu_sku).then(True).otherwise(None).alias("is_gpu_sku"),
        _text("Tags").alias("tags"),
        counts_time.alias("_counts_time"),
        hours.alias("_hours"),
    ).with_columns(resource_id.alias("resource_id"))
    gpu_resource = (
        ((pl.col("gpu_count").fill_null(0) > 0) | pl.col("is_gpu_sku").fill_null(False))
        .any()
        .over("resource_id")
    )
    gpu_hours = (
        pl.when(pl.col("is_gpu_sku").fill_null(False) & pl.col("_counts_time") & pl.col("_hours"))
        .then(pl.col("usage_quantity"))
        .when(pl.col("gpu_count").is_not_null() & pl.col("_counts_time") & pl.col("_hours"))
        .then(pl.col("usage_quantity") * pl.col("gpu_count"))
        .when(pl.col("gpu_count").is_not_null() | pl.col("is_gpu_sku").fill_null(False))
        .then(pl.lit(0))
        .when(pl.col("resource_id").is_not_null() & gpu_resource)
        .then(pl.lit(0))
        .otherwise(None)
        .cast(MONEY)
    )
    return lines.with_columns(
        gpu_hours.alias("gpu_hours"),
        pl.col("charge_start").cast(UTC_TIME),
        pl.col("charge_end").cast(UTC_TIME),
    )
