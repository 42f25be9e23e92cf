"""``azure_cost``: Azure Cost Management exports ("Cost and usage details", actual or amortized).

Source: a local directory (read recursively) or file named by ``path`` holding the CSV files an
export writes (``.csv``, optionally gzipped; the export's ``manifest.json`` is ignored). Reading
Azure Blob Storage directly is not offered: download the container first (``azcopy``).

Header variants (FORMATS.md §5.3), matched case-insensitively so MCA camelCase
(``costInBillingCurrency``, ``date``, ``resourceId``…) reads like EA PascalCase: EA/MCA
``CostInBillingCurrency``, pay-as-you-go ``PreTaxCost``/``Cost``; ``Date`` / ``UsageDate`` /
``UsageDateTime``; ``Quantity`` / ``UsageQuantity``; ``BillingCurrencyCode`` / ``BillingCurrency``
/ ``Currency``; ``ResourceId`` / ``InstanceId``; ``SubscriptionId`` / ``SubscriptionGuid``;
``ReservationId`` / ``benefitId``. A UTF-8 byte-order mark is dropped. Dates are ``MM/DD/YYYY``
(EA/MCA CSV), ``YYYY-MM-DD`` or ISO 8601; a row covers its whole UTC day.

Mapping decisions:

* ``effective_cost`` = ``CostInBillingCurrency``. ``dataset`` (config, else detected per file:
  the file name says ``amortized``/``actual``; unused-commitment rows or priced commitment usage
  mean amortized) decides ``billed_cost``: in the amortized dataset, commitment-covered usage and
  ``UnusedReservation``/``UnusedSavingsPlan`` rows bill 0 (the purchase is the invoiced charge,
  FOCUS rule) and commitment ``Purchase`` rows have effective 0 (already spread over usage); in
  the actual dataset billed = effective = the cost.
* ``list_cost`` = ``Quantity × PayGPrice`` (the retail price of the meter; a Spot meter has its
  own); null without ``PayGPrice``.
* ``usage_quantity`` = ``Quantity`` × the block of ``UnitOfMeasure`` (``10 Hours`` → ×10, unit
  ``Hour``): for VMs, instance-hours.
* ``ChargeType``: Usage → Usage; UnusedReservation/UnusedSavingsPlan → Usage with pricing
  ``commitment`` and no resource (the commitment's waste); Purchase → Purchase; Refund → Credit;
  RoundingAdjustment → Adjustment; Tax → Tax. ``PricingModel``: OnDemand → on_demand,
  Reservation/SavingsPlan → commitment, Spot → spot. ``commitment_id`` = ``ReservationId``.
* ``resource_id`` = ``ResourceId`` lower-cased (ARM ids are case-insensitive and the case varies
  between exports); ``instance_type`` = ``AdditionalInfo.ServiceType`` of ``Virtual Machines``
  meters (the VM size), else derived from the meter name (``ND96isrH100v5`` →
  ``Standard_ND96isr_H100_v5``; an unused reservation names no VM). ``gpu_count``/``gpu_hours``
  are left to the bundled catalog (:func:`service.billing.catalog.fill_gpus`).
* ``Tags``: JSON without the outer braces in EA/MCA exports: wrapped in ``{}``; text that is no
  JSON object even then is kept as ``{"azure:unparsed_tags": "<text>"}``.
* ``line_key``: the export has no line id: ``sha1:`` + SHA-1 of the raw line (see
  :func:`connectors.gcp_billing.line_keys`); a line seen twice in a file is refused.
* The batch's billing period is the file's ``BillingPeriodStartDate``..``BillingPeriodEndDate``
  (end date inclusive) when it names one, so a re-exported month replaces the old lines.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
from pydantic import model_validator

from connectors.billing import (
    MONEY,
    BillingBatch,
    BillingConfig,
    ChargeCategory,
    PricingModel,
    conform,
)
from connectors.billing_io import (
    LINE,
    Checks,
    FileBatches,
    csv_frame,
    export_files,
    json_text,
    line_keys,
    read_bytes,
    refuse_duplicates,
    rename_variants,
    require_columns,
)
from service.billing.currencies import BILLING_CURRENCIES

_D18 = pl.Decimal(38, 18)
_SUFFIXES = {".csv": "csv"}
_DATE_FORMATS = ("%m/%d/%Y", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S%.fZ", "%Y-%m-%dT%H:%M:%S%.f")
VARIANTS: dict[str, list[str]] = {
    "Date": ["UsageDate", "UsageDateTime"],
    "Quantity": ["UsageQuantity", "ConsumedQuantity"],
    "CostInBillingCurrency": ["PreTaxCost", "Cost"],
    "BillingCurrencyCode": ["BillingCurrency", "Currency"],
    "SubscriptionId": ["SubscriptionGuid"],
    "ResourceId": ["InstanceId"],
    "ResourceLocation": ["Location"],
    "ReservationId": ["benefitId"],
    "ReservationName": ["benefitName"],
    "MeterCategory": [],
    "MeterSubCategory": [],
    "MeterId": [],
    "MeterName": [],
    "ProductName": [],
    "UnitOfMeasure": [],
    "PayGPrice": [],
    "ChargeType": [],
    "PricingModel": [],
    "AdditionalInfo": [],
    "Tags": [],
    "ResourceName": [],
    "BillingAccountId": [],
    "BillingPeriodStartDate": [],
    "BillingPeriodEndDate": [],
}
REQUIRED = ("Date", "Quantity", "CostInBillingCurrency", "BillingCurrencyCode")
_CATEGORY = {
    "usage": ChargeCategory.USAGE.value,
    "unusedreservation": ChargeCategory.USAGE.value,
    "unusedsavingsplan": ChargeCategory.USAGE.value,
    "purchase": ChargeCategory.PURCHASE.value,
    "refund": ChargeCategory.CREDIT.value,
    "roundingadjustment": ChargeCategory.ADJUSTMENT.value,
    "tax": ChargeCategory.TAX.value,
}
_PRICING = {
    "ondemand": PricingModel.ON_DEMAND.value,
    "": PricingModel.ON_DEMAND.value,  # pay-as-you-go exports have no PricingModel
    "reservation": PricingModel.COMMITMENT.value,
    "savingsplan": PricingModel.COMMITMENT.value,
    "spot": PricingModel.SPOT.value,
}
_UNUSED = ("unusedreservation", "unusedsavingsplan")


class AzureCostConfig(BillingConfig):
    """``path``: a directory (read recursively) or a CSV file of a Cost Management export.
    ``dataset``: ``amortized`` or ``actual``; detected per file when not set."""

    type: Literal["azure_cost"] = "azure_cost"
    dataset: Literal["amortized", "actual"] | None = None

    @model_validator(mode="after")
    def _needs_path(self) -> AzureCostConfig:
        if not self.path:
            raise ValueError('"path" is required: the directory or file of the cost export')
        return self


class AzureCostConnector:
    """Reads Azure cost export CSV files; one :class:`BillingBatch` per file."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[AzureCostConfig]] = AzureCostConfig

    def __init__(self, config: AzureCostConfig) -> None:
        self.config = config

    def files(self) -> list[Path]:
        return export_files(Path(str(self.config.path)), _SUFFIXES)

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        """Batches of the files whose billing period (else a line) overlaps ``[start, end)``;
        an unreadable file raises :class:`~connectors.billing.BillingFileError` from ``next()``
        and the iterator goes on with the next file."""
        return FileBatches(self.files(), self.read_file, start, end)

    def read_file(self, path: Path, data: bytes | None = None) -> BillingBatch:
        file = str(path)
        raw = read_bytes(path, data)
        frame, refused = csv_frame(raw, file)
        frame = rename_variants(frame, VARIANTS)
        require_columns(frame, file, REQUIRED)
        frame = frame.with_columns(
            pl.lit(None, pl.String).alias(c) for c in VARIANTS if c not in frame.columns
        )
        frame = frame.join(line_keys(raw.split(b"\n")), on=LINE, how="left")
        read = frame.height + len(refused)
        dataset = self.config.dataset or _detect(frame, file)
        checks = Checks(file)
        parsed = {
            "_cost": checks.decimal("CostInBillingCurrency"),
            "_quantity": checks.decimal("Quantity"),
            "_payg": checks.decimal("PayGPrice", required=False),
            "_date": checks.timestamp("Date", *_DATE_FORMATS),
            "_period_start": checks.timestamp("BillingPeriodStartDate", *_DATE_FORMATS, required=False),
            "_period_end": checks.timestamp("BillingPeriodEndDate", *_DATE_FORMATS, required=False),
            "_currency": checks.currency("BillingCurrencyCode", BILLING_CURRENCIES),
            "_charge": _key("ChargeType").fill_null("usage"),
        }
        charge = _key("ChargeType").fill_null("usage")
        checks.add("ChargeType", "unknown ChargeType", ~charge.is_in(list(_CATEGORY)))
        quantity = pl.col("Quantity").str.strip_chars().cast(MONEY, strict=False)
        negative_ok = charge.is_in(["refund", "roundingadjustment"])
        checks.add("Quantity", "negative where none is allowed", (quantity < 0) & ~negative_ok)
        good, bad = checks.split(frame, parsed)
        good, duplicates = refuse_duplicates(good, file)
        period_start, period_end = _period(good)
        return BillingBatch(
            lines=_to_lines(good, file, dataset),
            source_file=file,
            refused=[*refused, *bad, *duplicates],
            read=read,
            period_start=period_start,
            period_end=period_end,
        )

    def close(self) -> None:
        """Nothing to release: files are read whole and closed."""


def _key(column: str) -> pl.Expr:
    """A type column folded for matching: ``Unused Reservation`` = ``UnusedReservation``."""
    return pl.col(column).str.strip_chars().str.replace_all(" ", "").str.to_lowercase()


def _detect(frame: pl.DataFrame, file: str) -> Literal["amortized", "actual"]:
    name = Path(file).name.lower()
    if "amortized" in name or "amortised" in name:
        return "amortized"
    if "actual" in name:
        return "actual"
    charge, model = _key("ChargeType"), _key("PricingModel")
    cost = pl.col("CostInBillingCurrency").str.strip_chars().cast(MONEY, strict=False)
    priced_commitment = (charge == "usage") & model.is_in(["reservation", "savingsplan"]) & (cost != 0)
    amortized = frame.select((charge.is_in(_UNUSED) | priced_commitment).fill_null(False).any()).item()
    return "amortized" if amortized else "actual"


def _period(good: pl.DataFrame) -> tuple[dt.datetime | None, dt.datetime | None]:
    starts = good["_period_start"].drop_nulls().unique()
    ends = good["_period_end"].drop_nulls().unique()
    if starts.len() != 1 or ends.len() != 1 or good["_period_start"].null_count():
        return None, None
    return starts.item(), ends.item() + dt.timedelta(days=1)


def _vm_size_from_meter() -> pl.Expr:
    """``ND96isrH100v5`` / ``NC24ads A100 v4`` (``… Spot``) → ``Standard_ND96isr_H100_v5`` …"""
    name = pl.col("MeterName").str.strip_chars().str.replace(r"(?i)\s+(spot|low priority)$", "")
    name = name.str.replace_all(r"\s+", "_").str.replace_all(r"([a-z])([A-Z]\d+)", "${1}_${2}")
    return pl.lit("Standard_") + name.str.replace(r"(\d)(v\d+)$", "${1}_${2}")


def _to_lines(good: pl.DataFrame, file: str, dataset: str) -> pl.DataFrame:
    charge = pl.col("_charge")
    category = charge.replace_strict(_CATEGORY, return_dtype=pl.String)
    model = _key("PricingModel").fill_null("")
    committed = model.is_in(["reservation", "savingsplan"]) | charge.is_in(_UNUSED)
    pricing = (
        pl.when(category != ChargeCategory.USAGE.value)
        .then(pl.lit(None, pl.String))
        .when(charge.is_in(_UNUSED))
        .then(pl.lit(PricingModel.COMMITMENT.value))
        .otherwise(model.replace_strict(_PRICING, default=PricingModel.OTHER.value, return_dtype=pl.String))
    )
    cost = pl.col("_cost")
    zero = pl.lit(0).cast(MONEY)
    if dataset == "amortized":
        billed = pl.when((category == ChargeCategory.USAGE.value) & committed).then(zero).otherwise(cost)
        effective = pl.when((charge == "purchase") & committed).then(zero).otherwise(cost)
    else:
        billed = effective = cost
    block = pl.col("UnitOfMeasure").str.strip_chars().str.extract_groups(r"^(\d+(?:\.\d+)?)\s+(.+)$")
    multiplier = block.struct.field("1").cast(_D18, strict=False).fill_null(pl.lit(1).cast(_D18))
    unit = pl.coalesce(block.struct.field("2"), pl.col("UnitOfMeasure").str.strip_chars())
    unit = unit.str.replace(r"(?i)^hours$", "Hour")
    resource = pl.col("ResourceId").str.strip_chars().str.to_lowercase()
    has_resource = resource.is_not_null() & (resource != "")
    vm = pl.col("MeterCategory").str.strip_chars() == "Virtual Machines"
    size = pl.col("AdditionalInfo").str.json_path_match("$.ServiceType")
    meter_size = pl.when(pl.col("MeterName").str.strip_chars() != "").then(_vm_size_from_meter())
    instance_type = pl.when(vm).then(pl.coalesce(size, meter_size))
    tags = pl.col("Tags").str.strip_chars()
    wrapped = (
        pl.when(tags.str.starts_with("{")).then(tags).otherwise(pl.concat_str(pl.lit("{"), tags, pl.lit("}")))
    )
    is_object = wrapped.str.json_path_match("$").str.starts_with("{").fill_null(False)
    tag_text = (
        pl.when(tags.is_null() | (tags == ""))
        .then(pl.lit(None, pl.String))
        .when(is_object)
        .then(wrapped)
        .otherwise(pl.concat_str(pl.lit('{"azure:unparsed_tags":'), json_text(tags), pl.lit("}")))
    )
    name = pl.col("ResourceName").str.strip_chars()
    commitment = pl.col("ReservationId").str.strip_chars()
    lines = good.select(
        pl.lit(file).alias("source_file"),
        pl.col(LINE).alias("line_no"),
        "line_key",
        pl.lit("azure").alias("provider"),
        pl.col("BillingAccountId").alias("billing_account"),
        pl.col("SubscriptionId").alias("account"),
        pl.col("_date").dt.truncate("1d").alias("charge_start"),
        (pl.col("_date").dt.truncate("1d") + pl.duration(days=1)).alias("charge_end"),
        category.alias("charge_category"),
        pl.col("ChargeType").str.strip_chars().fill_null("Usage").alias("charge_type"),
        pricing.alias("pricing_model"),
        pl.when(commitment != "").then(commitment).alias("commitment_id"),
        pl.when(has_resource).then(resource).alias("resource_id"),
        pl.coalesce(
            pl.when(name != "").then(name),
            pl.when(has_resource).then(pl.col("ResourceId").str.extract(r"([^/]+)$")),
        ).alias("resource_name"),
        pl.col("MeterCategory").alias("service"),
        pl.col("MeterId").alias("sku"),
        pl.coalesce(pl.col("ProductName"), pl.col("MeterName")).alias("sku_description"),
        instance_type.alias("instance_type"),
        pl.col("ResourceLocation").str.replace_all(" ", "").str.to_lowercase().alias("region"),
        (pl.col("_quantity").cast(_D18) * multiplier).round(9).cast(MONEY).alias("usage_quantity"),
        unit.alias("usage_unit"),
        (pl.col("_quantity").cast(_D18) * pl.col("_payg").cast(_D18)).round(9).cast(MONEY).alias("list_cost"),
        billed.alias("billed_cost"),
        effective.alias("effective_cost"),
        pl.col("_currency").alias("currency"),
        tag_text.alias("tags"),
    )
    return conform(lines)
