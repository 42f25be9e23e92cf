"""FinOps FOCUS 1.0 / 1.1 / 1.2 cost and usage exports, from any provider (``type = "focus"``).

The source is a directory (read recursively) or one file of FOCUS exports: CSV, gzipped CSV or
Parquet, told apart by their bytes (gzip and ``PAR1`` magic), not their names. AWS Data Exports
("FOCUS 1.0/1.2 with AWS columns"), Microsoft Cost Management ``FocusCost`` exports and Google's
FOCUS view over the detailed billing export all produce this layout; one file may hold several
providers. One :class:`~connectors.billing.BillingBatch` per chunk of about ``chunk_rows``
records (default 20,000) of a file; see **Streaming** below.

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
  key and a record repeated in a file is refused as a duplicate, naming both lines (in another
  chunk too: the file's earlier keys are remembered as 64-bit hashes with their line, 16 bytes a
  record).

**Streaming** (issue 5: a large export in bounded memory) is the billing driver's
(:mod:`connectors.billing_driver`; this module is its FOCUS dialect): a gzip file or a ZIP of one
is decompressed block by block to a temporary file first —
which checks it to its end, so a truncated or corrupt one is refused before its first batch and
never half imported — then read like a plain file. A CSV is read in blocks and cut at record ends
into chunks of about ``chunk_rows`` records (``billing_io.csv_chunks``: each chunk parsed with the
header in front, line numbers and refusals those of the whole file); a Parquet file is decoded
``chunk_rows`` records at a time (``billing_io.parquet_chunks``). The version detection and the
mandatory-column check run once per file, on the first chunk's header. Two things need the whole
file before its first batch, and come from a cheap first pass over only the columns they need
(CSV: 4 MiB blocks cut at record ends, the header in front, only those columns parsed — Polars' lazy
``scan_csv`` was tried and holds the whole file in memory; Parquet: a projected scan in batches):

* **The billing period.** A FOCUS file may hold several billing periods (a provider may export
  more than one month in a file), so no chunk tells the file's. Every batch of a file carries the
  same period: the span ``[min BillingPeriodStart, max BillingPeriodEnd)`` over the file's records
  whose two period columns are both timestamps — the rule of the unstreamed reader (min/max over
  the lines), taken over every record that names its period, a record refused for another column
  included (it belongs to that period all the same). The ingestor then replaces that whole span
  with the file's lines, as before. A file without one such record has no period (its lines are
  replaced by file). A file whose period does not overlap the window is not read further.
* **The GPU resources**: "other rows of a GPU resource → 0 GPU-hours" looks at every row of the
  resource, which may be in another chunk; the pass collects the (normalized) ``ResourceId`` of
  every record that has a GPU count or is a GPU SKU, over the whole file (a record refused for
  another reason included) — a set as large as the file's GPU resources, not its rows.

Memory: about one chunk's text and its frames while it is parsed (roughly 20 KB a record of the
fixture's 58 columns), the read-ahead block, 16 bytes a record for the duplicate check, and a
gzip file's decompressed copy on disk. Measured (2 cores, parse only, a 474 MB / 500,000-record
CSV made of the fixture's records with unique ``x_Operation``): 18 s and 0.49 GB peak RSS at
20,000 records a chunk, 21 s and 0.24 GB at 5,000; gzip'ed (21 MB): 18 s and 0.48 GB at 20,000;
the unstreamed reader (the whole file at once): 18 s and 4.2 GB.

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

from connectors.billing_driver import Dialect, ExportFile, OpenedFile, Period, read_file, read_files
from connectors.billing_io import BLOCK_BYTES, LINE, Checks, Normalized, require_columns, sane_period, sha1_keys
from connectors.billing_stores import local_export_files, local_file
from connectors.sdk import (
    BILLING_CURRENCIES,
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    ChargeCategory,
    PricingModel,
    RefusedRow,
)

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
#: Export file names (optionally ``.gz``; the content decides CSV, gzip or Parquet).
SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet")
#: File names read from a directory: exports, and a ``.zip`` of one (as a Data Export delivers it).
LISTED: tuple[str, ...] = (*SUFFIXES, ".zip")


class FocusConfig(BillingConfig):
    """``path``: a FOCUS export file, or a directory read recursively for ``*.csv``,
    ``*.csv.gz`` and ``*.parquet`` files (in name order)."""

    path: str = Field(min_length=1, description="a FOCUS export file or a directory of them")
    #: records per batch of a large file (one chunk's text and frames in memory at a time).
    chunk_rows: int = Field(20_000, ge=1)


def detect_version(columns: list[str]) -> str:
    """The FOCUS version a header belongs to: the newest one any of whose added columns is present."""
    present = set(columns)
    if present.intersection(FOCUS_1_2_ADDED):
        return "1.2"
    if present.intersection(FOCUS_1_1_ADDED):
        return "1.1"
    return "1.0"


class FocusConnector:
    """Billing connector for FinOps FOCUS exports (``type = "focus"``): a local store and the
    :class:`FocusDialect` on the billing driver (:mod:`connectors.billing_driver`)."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[BillingConfig]] = FocusConfig

    def __init__(self, config: FocusConfig, *, block_bytes: int = BLOCK_BYTES) -> None:
        self.config = config
        #: bytes asked of a file (or of a gzip stream) at a time; a chunk is read in such blocks.
        self.block_bytes = block_bytes

    def close(self) -> None:
        """Nothing is held open between reads."""

    def files(self) -> list[Path]:
        """The export files of ``path`` (a ``.zip`` of one export included), in name order."""
        return [Path(f.label) for f in self._store() if isinstance(f, ExportFile)]

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        """Batches (one per chunk) of every file whose billing period overlaps ``[start, end)``; a
        file that cannot be read at all is *yielded* as its :class:`BillingFileError`, so the other
        files go on."""
        yield from read_files(
            self._store(),
            FocusDialect(),
            start,
            end,
            chunk_rows=self.config.chunk_rows,
            block_bytes=self.block_bytes,
        )

    def read_file(
        self, path: str | Path, start: dt.datetime | None = None, end: dt.datetime | None = None
    ) -> Iterator[BillingBatch]:
        """The batches of one export file, one chunk of text in memory at a time; none when the
        file's billing period does not overlap ``[start, end)`` (when given)."""
        yield from read_file(
            local_file(Path(path)),
            FocusDialect(),
            start,
            end,
            chunk_rows=self.config.chunk_rows,
            block_bytes=self.block_bytes,
        )

    def _store(self) -> Iterator[ExportFile | BillingFileError]:
        return local_export_files(self.config.path, LISTED, SUFFIXES, "FOCUS")


class FocusDialect(Dialect):
    """The FOCUS layout for the billing driver: the version by its columns, its mandatory columns,
    the billing period and GPU resources from a first pass, the mapping of a chunk."""

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        return _as_text(frame)

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _FocusFile:
        del period  # a FOCUS path names none
        version = detect_version(opened.columns)
        require_columns(first, opened.label, MANDATORY[version])
        _require_resource_id(first, opened.label)
        span, gpu_resources = _file_summary(opened)
        return _FocusFile(opened.label, version, span, gpu_resources)


class _FocusFile:
    def __init__(self, file: str, version: str, period: Period | None, gpu_resources: list[str]) -> None:
        self.file, self.version, self.period, self.gpu_resources = file, version, period, gpu_resources

    def normalize(self, frame: pl.DataFrame) -> Normalized:
        frame = frame.with_columns(
            pl.lit(None, dtype=pl.String).alias(c)
            for c in (*FOCUS_1_0_COLUMNS, *FOCUS_1_1_ADDED, *_EXTENSIONS)
            if c not in frame.columns
        )
        lines, refused, findings = _normalize(frame, self.file, self.gpu_resources)
        return lines.with_columns(pl.lit(self.file).alias("source_file")), refused, findings

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        del key  # the record's hash, which says nothing to a reader
        reason = f"duplicate of line {first}: an identical record (FOCUS has no line id)"
        return RefusedRow(self.file, line, "line_key", reason)

    def finish(self, read: int, accepted: int, refused: int) -> None:
        log.info(
            "FOCUS %s export %s: %d rows read, %d accepted, %d refused",
            self.version,
            self.file,
            read,
            accepted,
            refused,
        )


#: Provider extension columns the mapping reads (null when a file lacks them).
_EXTENSIONS: tuple[str, ...] = ("x_SkuDescription", "x_SkuDetails", "x_UsageType")
#: The columns of the first pass (billing period, GPU resources).
_SUMMARY_COLUMNS: tuple[str, ...] = (
    "BillingPeriodStart", "BillingPeriodEnd", "ProviderName", "ResourceId", "CommitmentDiscountStatus",
    "SkuPriceDetails", "SkuMeter", "x_SkuDescription",
)  # fmt: skip


def _require_resource_id(frame: pl.DataFrame, file: str) -> None:
    """``ResourceId`` is Conditional in FOCUS: present when the provider bills provisioned
    resources — AWS, Google Cloud and Azure all do, so their export without it would import as
    cost of no resource and is refused; a provider without resources (a SaaS bill) may omit it.
    Its *values* stay nullable (purchases, taxes, credits name no resource)."""
    if "ResourceId" in frame.columns or frame.is_empty():
        return
    clouds = frame.select(_provider().is_in(["aws", "gcp", "azure"]).fill_null(False).any()).item()
    if clouds:
        raise BillingFileError(
            file,
            'missing column "ResourceId": an AWS, Google Cloud or Azure FOCUS export names its resources'
            " (the header is line 1)",
            line=1,
            column="ResourceId",
        )


def _file_summary(opened: OpenedFile) -> tuple[Period | None, list[str]]:
    """The file's billing period (the span of its records' periods) and its GPU resources, from a
    first pass over only the columns they need (module docstring, **Streaming**)."""
    lo_hi: list[dt.datetime] = []
    gpus: set[str] = set()
    lo, hi = _timestamp("BillingPeriodStart"), _timestamp("BillingPeriodEnd")
    marked = (_gpu_count().fill_null(0) > 0) | _is_gpu_sku().fill_null(False)
    try:
        for block in opened.blocks(list(_SUMMARY_COLUMNS)):
            block = block.with_columns(
                pl.lit(None, dtype=pl.String).alias(c) for c in _SUMMARY_COLUMNS if c not in block.columns
            )
            # records naming a period that cannot be one are refused, and must not widen the file's
            span = block.filter(sane_period(lo, hi).fill_null(False)).select(lo.min(), hi.max())
            lo_hi.extend(v for v in span.row(0) if v is not None)
            found = block.filter(marked).select(_resource_id(_provider()).alias("r")).drop_nulls()
            gpus.update(found["r"].unique().to_list())
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise BillingFileError(
            opened.label, f"not a readable export file: {str(exc).splitlines()[0]}"
        ) from None
    # Each block gives both bounds or none, so the minimum of all is a start and the maximum an end.
    period = (min(lo_hi), max(lo_hi)) if lo_hi else None
    return period, sorted(gpus)


def _as_text(frame: pl.DataFrame) -> pl.DataFrame:
    """A Parquet frame's typed columns as the text a CSV export would hold, so both go through the
    same checks: times as ISO 8601 UTC, floats through Decimal (never a float's scientific notation)."""
    return frame.select(_text_exprs(dict(frame.schema)))


def _text_exprs(schema: dict[str, pl.DataType]) -> list[pl.Expr]:
    """:func:`_as_text` as expressions (for a lazy scan too)."""
    out = []
    for name, dtype in schema.items():
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
    return out


def _timestamp(column: str) -> pl.Expr:
    """``column`` as the checks read a timestamp (``Checks.timestamp`` with :data:`_ISO_FORMATS`);
    null where it is not one."""
    text = pl.col(column).str.strip_chars()
    tried = [text.str.to_datetime(f, time_zone="UTC", strict=False, time_unit="us") for f in _ISO_FORMATS]
    return pl.coalesce(tried).cast(UTC_TIME)


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


def _normalize(
    frame: pl.DataFrame, file: str, gpu_resources: list[str]
) -> Normalized:
    """One chunk → checked, normalized lines (``BILLING_SCHEMA`` columns plus ``_period_start/_end``)
    and the refused rows; a repeated record is the driver's to refuse (by ``line_key``)."""
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
    charge = (parsed["charge_start"], parsed["charge_end"])
    checks.dates("ChargePeriodStart", charge[0], "ChargePeriodEnd", charge[1])
    billing = (parsed["_period_start"], parsed["_period_end"])
    checks.period("BillingPeriodStart", *billing)
    checks.within("ChargePeriodStart", charge[0], "ChargePeriodEnd", charge[1], billing, "its billing period")
    good, refused, findings = checks.split(frame, parsed)

    return _map(good, gpu_resources), refused, findings


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


def _provider() -> pl.Expr:
    provider_name = _text("ProviderName").str.to_lowercase()
    return provider_name.replace_strict(PROVIDERS, default=provider_name)


def _unused() -> pl.Expr:
    return (_text("CommitmentDiscountStatus") == "Unused").fill_null(False)


def _resource_id(provider: pl.Expr) -> pl.Expr:
    """``ResourceId`` as the metrics connectors spell the instance (module docstring)."""
    resource = _text("ResourceId")
    return (
        pl.when(_unused())
        .then(None)
        .when(provider == "gcp")
        .then(pl.coalesce(resource.str.extract(r"/instances/(\d+)$"), resource))
        .when(provider == "azure")
        .then(resource.str.to_lowercase())
        .otherwise(resource)
    )


def _gpu_count() -> pl.Expr:
    details = _text("SkuPriceDetails")
    return details.str.json_path_match("$.GpuCount").str.strip_chars().cast(pl.Int32, strict=False)


def _is_gpu_sku() -> pl.Expr:
    return (
        pl.coalesce(_text("SkuMeter").str.contains(GPU_SKU), pl.lit(False))
        | pl.coalesce(_text("x_SkuDescription").str.contains(GPU_SKU), pl.lit(False))
    ) & _gpu_count().is_null()


def _map(good: pl.DataFrame, gpu_resources: list[str]) -> pl.DataFrame:
    """Checked rows → the contract's columns (columnar); ``gpu_resources``: the file's resources
    with a GPU count or a GPU SKU on any record (:func:`_file_summary`)."""
    provider = _provider()
    category = _text("ChargeCategory")
    is_usage = category == ChargeCategory.USAGE.value
    unused = _unused()
    resource_id = _resource_id(pl.col("provider"))
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
    gpu_count = _gpu_count()
    is_gpu_sku = _is_gpu_sku()
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
    gpu_resource = pl.col("resource_id").is_in(gpu_resources)
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
