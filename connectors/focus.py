"""FinOps FOCUS 1.0 / 1.1 / 1.2 cost and usage exports, from any provider (``type = "focus"``).

The source is a directory (read recursively) or one file of FOCUS exports: CSV, gzipped CSV or
Parquet, told apart by their bytes (gzip and ``PAR1`` magic), not their names. AWS Data Exports
("FOCUS 1.0/1.2 with AWS columns"), Microsoft Cost Management ``FocusCost`` exports and Google's
FOCUS view over the detailed billing export all produce this layout; one file may hold several
providers. One :class:`~connectors.billing.BillingBatch` per chunk of about ``chunk_rows``
records (default 20,000) of a file; see **Streaming** below.

Mapping decisions (docs/formats.md §5.4; the why of each):

* **Version** is told by the columns present — 1.1 added CapacityReservationId … SkuPriceDetails,
  1.2 added BillingAccountType … PricingCurrency*; any one of a version's added columns makes the
  file that version, logged per file. Only the columns no line can be booked without
  (:data:`REQUIRED`: the money, the currency, the charge and billing periods) refuse the whole
  file when missing, naming it; another missing *Mandatory* column is logged, and counted as
  finding ``missing_column`` on every row where the mapping reads it (:data:`READ_MANDATORY`).
* **Money**: ``BilledCost`` → ``billed_cost`` (the invoice basis), ``EffectiveCost`` →
  ``effective_cost`` (amortized, what allocation sums), ``ListCost`` → ``list_cost``, each parsed
  from the text to ``Decimal(38, 9)`` exactly. Both billed and effective are kept per line and
  never added: commitment-covered usage has ``BilledCost = 0`` and an effective cost, purchases
  have ``EffectiveCost = 0`` and a billed cost, so Σ effective and Σ billed are each right alone.
* **Provider**: ``ProviderName`` "AWS"/"Amazon Web Services" → ``aws``, "Google Cloud" → ``gcp``,
  "Microsoft" → ``azure``, "Oracle"/"Oracle Cloud Infrastructure" → ``oracle``; any other provider
  keeps its name as a key (lower-cased, ``-`` between words: FOCUS is not only the three clouds).
  An empty ``ProviderName`` is taken from ``PublisherName``, else ``InvoiceIssuerName``, else
  ``unknown`` (finding ``missing_value``).
* **Resource**: ``ResourceId`` as the metrics connectors' ``DeviceInfo.instance_id`` spells it, so
  billing joins telemetry: AWS ``i-…`` as given; GCP the numeric instance id when the id ends in
  ``/instances/<id>`` (else as given); Azure lower-cased (ARM ids are case-insensitive and exports
  vary the case). Rows of an *unused* commitment (``CommitmentDiscountStatus = Unused``) have no
  resource by the spec; one that names one is not charged to it (idle capacity is not the
  instance's cost).
* **Enums** (ChargeCategory, ChargeClass, ChargeFrequency, PricingCategory, CommitmentDiscount
  Status/Category, CapacityReservationStatus) are matched by ``billing_io.canonical``: case, spaces,
  ``-`` and ``_`` ignored (the FinOps sample's ``Usage-based`` is ``Usage-Based``, silently), plus
  :data:`PRICING_ALIASES` (On-Demand → Standard…). Another value is imported and counted as
  finding ``unknown_value``; an empty or unknown ``ChargeCategory`` books the row as
  :data:`UNKNOWN_CATEGORY` (Adjustment: its money counts, it bills no usage) with the file's text
  as ``charge_type``.
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
* **GPUs of other providers** (Oracle, Alibaba, IBM…, whose instance types the catalog may not
  know): a ``ConsumedUnit`` in GPU-hours (``GPU Hours``, any provider) makes the row a GPU SKU row;
  an OCI GPU shape named in the descriptions, ids or ``x_`` columns (``BM.GPU.H100.8``) is its
  ``instance_type`` (the catalog, or the shape's last number, gives its GPUs); a count the text
  states (``8x H100``, ``8 GPUs``) or ``SkuPriceDetails`` gives (``GpuCount`` in any spelling) is
  its ``gpu_count``; else a ``ChargeDescription``/``SkuMeter``/``ResourceType``/``SkuId``/``x_``
  text naming a GPU (``Compute - GPU - H100``) makes it a GPU SKU row. The three clouds' texts are
  not searched: their instance types are priced by the catalog.
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

Bad input: a truncated gzip/Parquet file, a missing :data:`REQUIRED` column or a header that is
not UTF-8 refuses the whole file (:class:`~connectors.billing.BillingFileError`, yielded in place
of its batch so the other files go on). A row is refused, by file, line and column, only when it
cannot be booked: non-UTF-8 bytes or fields missing, ``BilledCost``/``EffectiveCost`` not a
number or empty, an unknown currency, a charge period that cannot be read (or ends before it
starts, or lies outside 2000..2100), a billing period that cannot be one or does not hold the
charge (the ingestor replaces a billing period's lines by file), or a duplicated record (FOCUS has
no line id). Everything else is imported and counted as a finding (``Checks.flag``):
``unknown_value`` (an enum value), ``missing_value`` (ProviderName, ChargeCategory),
``negative_usage`` (a negative ``ConsumedQuantity`` on a Usage row that is not a correction),
``unreadable_value`` (``ListCost``/``ConsumedQuantity`` not a number: kept empty),
``missing_column`` (a Mandatory column the mapping reads; ``ResourceId`` on AWS/GCP/Azure rows);
the driver adds ``gpu_hours_over_capacity``. ``read == accepted + refused``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
from pydantic import Field

from connectors.billing_driver import Dialect, ExportFile, OpenedFile, Period, read_file, read_files
from connectors.billing_io import (
    BLOCK_BYTES,
    LINE,
    Checks,
    Normalized,
    any_time,
    canonical,
    require_columns,
    sane_period,
    sha1_keys,
)
from connectors.billing_stores import local_export_files, local_file
from connectors.focus_gpus import (
    AWS_INSTANCE_USAGE,
    CLOUDS,
    gpu_unit,
    text_of,
    with_gpu_facts,
)
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
#: The columns without which no line can be booked: a file lacking one is refused whole. Every
#: other missing Mandatory column is logged, and counted as finding ``missing_column`` on each row
#: where the mapping reads it (:data:`READ_MANDATORY`).
REQUIRED: tuple[str, ...] = (
    "BilledCost", "EffectiveCost", "BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd",
    "BillingPeriodStart", "BillingPeriodEnd",
)  # fmt: skip
#: Mandatory columns whose absence changes the lines booked (category, corrections, list cost,
#: provider, account) — the others (names, descriptions, pricing quantity) only make them poorer.
READ_MANDATORY: tuple[str, ...] = (
    "ChargeCategory",
    "ChargeClass",
    "ListCost",
    "ProviderName",
    "BillingAccountId",
)

#: ``ProviderName`` as a key (lower-cased, every run of other characters than letters and digits one
#: ``-``) → the ledger's provider; any other provider keeps that key as its name (FOCUS is not only
#: the three clouds: ``Oracle`` → ``oracle``, ``Alibaba Cloud`` → ``alibaba``, ``Lambda Labs`` →
#: ``lambda-labs``), cut to the ledger's 32 characters.
PROVIDERS: dict[str, str] = {
    "aws": "aws",
    "amazon-web-services": "aws",
    "amazon-web-services-inc": "aws",
    "amazon": "aws",
    "google-cloud": "gcp",
    "google-cloud-platform": "gcp",
    "google": "gcp",
    "gcp": "gcp",
    "microsoft": "azure",
    "microsoft-azure": "azure",
    "microsoft-corporation": "azure",
    "azure": "azure",
    "oracle": "oracle",
    "oracle-cloud": "oracle",
    "oracle-cloud-infrastructure": "oracle",
    "oci": "oracle",
    "alibaba-cloud": "alibaba",
    "alibaba": "alibaba",
    "aliyun": "alibaba",
    "ibm-cloud": "ibm",
    "ibm": "ibm",
    "tencent-cloud": "tencent",
    "huawei-cloud": "huawei",
}
#: The providers whose GPU instances the instance catalog knows by name (their other rows are not
#: searched for GPU words: an AWS or Azure description naming a GPU is an instance, priced by type).
#: A provider the row names nowhere (ProviderName, PublisherName and InvoiceIssuerName all empty).
UNKNOWN_PROVIDER = "unknown"
PRICING: dict[str, str] = {
    "Standard": PricingModel.ON_DEMAND.value,
    "Dynamic": PricingModel.SPOT.value,
    "Committed": PricingModel.COMMITMENT.value,
    "Other": PricingModel.OTHER.value,
}
#: The allowed values of the FOCUS enum columns, matched by :func:`connectors.billing_io.canonical`:
#: case, spaces, ``-`` and ``_`` ignored (the FinOps sample's Oracle rows write ``Usage-based``).
CHARGE_CATEGORIES: tuple[str, ...] = tuple(c.value for c in ChargeCategory)
CHARGE_CLASSES: tuple[str, ...] = ("Correction",)
CHARGE_FREQUENCIES: tuple[str, ...] = ("One-Time", "Recurring", "Usage-Based")
COMMITMENT_STATUSES: tuple[str, ...] = ("Used", "Unused")
COMMITMENT_CATEGORIES: tuple[str, ...] = ("Spend", "Usage")
CAPACITY_STATUSES: tuple[str, ...] = ("Used", "Unused")
#: Other spellings read as a ``PricingCategory`` value: the names exports and tools give the same
#: categories (on-demand = Standard, commitment-based = Committed, spot = Dynamic).
PRICING_ALIASES: dict[str, str] = {
    "On-Demand": "Standard",
    "Commitment-Based": "Committed",
    "Commitment": "Committed",
    "Spot": "Dynamic",
}
#: Column → (allowed values, aliases): an unknown value is imported and counted as ``unknown_value``.
ENUMS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "ChargeCategory": (CHARGE_CATEGORIES, {}),
    "ChargeClass": (CHARGE_CLASSES, {}),
    "ChargeFrequency": (CHARGE_FREQUENCIES, {}),
    "PricingCategory": (tuple(PRICING), PRICING_ALIASES),
    "CommitmentDiscountStatus": (COMMITMENT_STATUSES, {}),
    "CommitmentDiscountCategory": (COMMITMENT_CATEGORIES, {}),
    "CapacityReservationStatus": (CAPACITY_STATUSES, {}),
}
#: How a row whose ``ChargeCategory`` is empty or unknown is booked: its money stays in the totals
#: (they reconcile to the invoice), but it bills no usage — no GPU-hours, no pricing model, no rate
#: — and, without a resource, it is reported with the account adjustments. ``charge_type`` keeps
#: the file's own text, so the line can be found.
UNKNOWN_CATEGORY = ChargeCategory.ADJUSTMENT.value
#: ``ConsumedUnit`` spellings in hours (FOCUS UnitFormat says ``Hours``; compared lower-cased).
HOUR_UNITS: tuple[str, ...] = ("hours", "hour", "hrs", "hr", "h")
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
    """The FOCUS layout for the billing driver: the version by its columns, the columns no line can
    be booked without, the billing period and GPU resources from a first pass, the mapping of a
    chunk."""

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        return _as_text(frame)

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _FocusFile:
        del period  # a FOCUS path names none
        version = detect_version(opened.columns)
        require_columns(first, opened.label, REQUIRED)
        missing = [c for c in MANDATORY[version] if c not in opened.columns]
        if missing:
            log.warning(
                "FOCUS %s export %s lacks the Mandatory column(s) %s: its rows are imported",
                version,
                opened.label,
                ", ".join(missing),
            )
        facts = _Facts(
            x_columns=tuple(c for c in opened.columns if c.startswith("x_")),
            missing=tuple(c for c in READ_MANDATORY if c in missing),
            no_resource_column="ResourceId" not in opened.columns,
        )
        span, gpu_resources = _file_summary(opened, facts)
        return _FocusFile(opened.label, version, span, gpu_resources, facts)


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the mapping needs to know of a file's header."""

    x_columns: tuple[str, ...]  # provider extension columns (searched for GPU words and shapes)
    missing: tuple[str, ...]  # READ_MANDATORY columns the file lacks
    no_resource_column: bool


class _FocusFile:
    #: the file's spelling of the usage quantity (the driver names it in GPU-capacity findings)
    quantity_column = "ConsumedQuantity"

    def __init__(
        self, file: str, version: str, period: Period | None, gpu_resources: list[str], facts: _Facts
    ) -> None:
        self.file, self.version, self.period, self.gpu_resources = file, version, period, gpu_resources
        self.facts = facts

    def normalize(self, frame: pl.DataFrame) -> Normalized:
        frame = frame.with_columns(
            pl.lit(None, dtype=pl.String).alias(c)
            for c in (*FOCUS_1_0_COLUMNS, *FOCUS_1_1_ADDED, *_EXTENSIONS)
            if c not in frame.columns
        )
        lines, refused, findings = _normalize(frame, self.file, self.gpu_resources, self.facts)
        return Normalized(lines.with_columns(pl.lit(self.file).alias("source_file")), refused, findings)

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
#: The columns of the first pass (billing period, GPU resources), besides the file's ``x_`` columns.
_SUMMARY_COLUMNS: tuple[str, ...] = (
    "BillingPeriodStart", "BillingPeriodEnd", "ProviderName", "PublisherName", "InvoiceIssuerName",
    "ResourceId", "CommitmentDiscountStatus", "SkuPriceDetails", "SkuMeter", "x_SkuDescription",
    "ChargeDescription", "ResourceType", "ResourceName", "SkuId", "ConsumedUnit",
)  # fmt: skip


def _file_summary(opened: OpenedFile, facts: _Facts) -> tuple[Period | None, list[str]]:
    """The file's billing period (the span of its records' periods) and its GPU resources, from a
    first pass over only the columns they need (module docstring, **Streaming**)."""
    lo_hi: list[dt.datetime] = []
    gpus: set[str] = set()
    lo, hi = _timestamp("BillingPeriodStart"), _timestamp("BillingPeriodEnd")
    provider = _provider()
    marked = (pl.col("_gpu_count").fill_null(0) > 0) | pl.col("_gpu_sku")
    wanted = [*_SUMMARY_COLUMNS, *facts.x_columns]
    try:
        for block in opened.blocks(wanted):
            block = block.with_columns(
                pl.lit(None, dtype=pl.String).alias(c) for c in wanted if c not in block.columns
            )
            # records naming a period that cannot be one are refused, and must not widen the file's
            span = block.filter(sane_period(lo, hi).fill_null(False)).select(lo.min(), hi.max())
            lo_hi.extend(v for v in span.row(0) if v is not None)
            block = with_gpu_facts(block, provider, facts.x_columns)
            found = block.filter(marked).select(_resource_id(provider).alias("r")).drop_nulls()
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
    """``column`` as the checks read a timestamp (``Checks.timestamp`` with :data:`_ISO_FORMATS`, then
    every ISO 8601 form: :func:`~connectors.billing_io.flexible_time`); null where it is not one."""
    return any_time(pl.col(column).str.strip_chars(), _ISO_FORMATS)


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


#: Number text that means "no value" where a number is optional (pandas and Spark write ``NaN``).
_NAN = ("NaN", "nan", "NAN")


def _money(column: str) -> pl.Expr:
    """``column`` as Decimal(38, 9) as the checks read it (exponent forms exactly); null if not a number."""
    return pl.col(column).str.strip_chars().cast(MONEY, strict=False)


def _optional_number(checks: Checks, column: str) -> pl.Expr:
    """An optional number (``ListCost``, ``ConsumedQuantity``): one that cannot be read is kept
    empty and counted as finding ``unreadable_value`` — the row's money is elsewhere."""
    text = pl.col(column).str.strip_chars()
    text = pl.when(text.is_in(_NAN)).then(pl.lit("")).otherwise(text)
    value = text.cast(MONEY, strict=False)  # Polars reads 3.2E-05 exactly
    checks.flag(
        column, "unreadable_value", "not a number: imported without it", (text != "") & value.is_null()
    )
    return value


def _enum(checks: Checks, column: str) -> pl.Expr:
    """``column`` as one of its allowed values (:data:`ENUMS`; a case variant or an alias is that
    value, silently); any other value is imported as null and counted as ``unknown_value``."""
    values, aliases = ENUMS[column]
    text = text_of(column)
    value = canonical(text, values, aliases)
    reason = f"not one of {', '.join(values)}"
    if column == "ChargeCategory":
        reason += f": booked as {UNKNOWN_CATEGORY}"
    checks.flag(column, "unknown_value", reason, text.is_not_null() & value.is_null())
    return value


def _normalize(frame: pl.DataFrame, file: str, gpu_resources: list[str], facts: _Facts) -> Normalized:
    """One chunk → checked, normalized lines (``BILLING_SCHEMA`` columns plus ``_period_start/_end``),
    the refused rows and the findings on the lines; a repeated record is the driver's to refuse (by
    ``line_key``).

    A row is refused only when it cannot be booked: its money (``BilledCost``, ``EffectiveCost``),
    currency or charge period cannot be read, or its billing period cannot be one or does not hold
    its charge (the ingestor replaces a billing period's lines by file). Everything else is imported
    and counted as a finding (the module docstring lists them)."""
    frame = frame.with_columns(_line_keys(frame).alias("line_key"))
    provider = _provider()
    checks = Checks(file, money=_money("BilledCost"), provider=provider)
    for column in facts.missing:
        reason = "the export lacks this Mandatory column: imported without it"
        checks.flag(column, "missing_column", reason, pl.lit(True))
    if facts.no_resource_column:
        reason = "the export has no ResourceId column: AWS, Google Cloud and Azure name their resources"
        checks.flag("ResourceId", "missing_column", reason, provider.is_in(CLOUDS))
    if "ProviderName" not in facts.missing:
        reason = (
            f"empty: the provider is taken from PublisherName or InvoiceIssuerName, else {UNKNOWN_PROVIDER!r}"
        )
        checks.flag("ProviderName", "missing_value", reason, text_of("ProviderName").is_null())
    if "ChargeCategory" not in facts.missing:
        reason = f"empty where FOCUS requires a value: booked as {UNKNOWN_CATEGORY}"
        checks.flag("ChargeCategory", "missing_value", reason, text_of("ChargeCategory").is_null())
    enums = {column: _enum(checks, column) for column in ENUMS}
    parsed: dict[str, pl.Expr] = {
        "charge_start": checks.timestamp("ChargePeriodStart", *_ISO_FORMATS),
        "charge_end": checks.timestamp("ChargePeriodEnd", *_ISO_FORMATS),
        "_period_start": checks.timestamp("BillingPeriodStart", *_ISO_FORMATS),
        "_period_end": checks.timestamp("BillingPeriodEnd", *_ISO_FORMATS),
        "billed_cost": checks.decimal("BilledCost"),
        "effective_cost": checks.decimal("EffectiveCost"),
        "list_cost": _optional_number(checks, "ListCost"),
        "usage_quantity": _optional_number(checks, "ConsumedQuantity"),
        "currency": checks.currency("BillingCurrency", BILLING_CURRENCIES),
        **{f"_enum_{column}": value for column, value in enums.items()},
    }
    correction = (enums["ChargeClass"] == "Correction").fill_null(False)
    quantity = _money("ConsumedQuantity")
    checks.flag(
        "ConsumedQuantity",
        "negative_usage",
        "negative on a Usage row that is not a correction",
        (enums["ChargeCategory"] == ChargeCategory.USAGE.value) & ~correction & (quantity < 0),
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
    return Normalized(_map(good, gpu_resources, facts), refused, findings)


#: ISO 8601 as FOCUS writes it (``2025-09-01T00:00:00Z``), with fractions or an offset, and the
#: space-separated form some CSV writers use; any other ISO form (``2024-08-16T00:00Z``, as OCI
#: writes it) is read by ``flexible_time`` after these.
_ISO_FORMATS: tuple[str, ...] = (
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%:z",
    "%Y-%m-%dT%H:%M:%S%.f%:z",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S%.f",
)


def _provider_key(column: str) -> pl.Expr:
    """A provider name as a key: lower-cased, each run of characters other than letters and digits
    one ``-`` (``Amazon Web Services, Inc.`` → ``amazon-web-services-inc``)."""
    key = text_of(column).str.to_lowercase().str.replace_all(r"[\W_]+", "-").str.strip_chars("-")
    return pl.when(key == "").then(None).otherwise(key)


def _provider() -> pl.Expr:
    """The ledger's provider (:data:`PROVIDERS`): from ``ProviderName``, else ``PublisherName``, else
    ``InvoiceIssuerName``, else :data:`UNKNOWN_PROVIDER`."""
    names = []
    for column in ("ProviderName", "PublisherName", "InvoiceIssuerName"):
        key = _provider_key(column)
        names.append(key.replace_strict(PROVIDERS, default=key, return_dtype=pl.String).str.slice(0, 32))
    return pl.coalesce([*names, pl.lit(UNKNOWN_PROVIDER)])


def _unused() -> pl.Expr:
    status = canonical(text_of("CommitmentDiscountStatus"), COMMITMENT_STATUSES)
    return (status == "Unused").fill_null(False)


def _resource_id(provider: pl.Expr) -> pl.Expr:
    """``ResourceId`` as the metrics connectors spell the instance (module docstring)."""
    resource = text_of("ResourceId")
    return (
        pl.when(_unused())
        .then(None)
        .when(provider == "gcp")
        .then(pl.coalesce(resource.str.extract(r"/instances/(\d+)$"), resource))
        .when(provider == "azure")
        .then(resource.str.to_lowercase())
        .otherwise(resource)
    )


def _map(good: pl.DataFrame, gpu_resources: list[str], facts: _Facts) -> pl.DataFrame:
    """Checked rows → the contract's columns (columnar); ``gpu_resources``: the file's resources
    with a GPU count or a GPU SKU on any record (:func:`_file_summary`)."""
    provider = _provider()
    known = pl.col("_enum_ChargeCategory")
    category = pl.coalesce(known, pl.lit(UNKNOWN_CATEGORY))
    is_usage = known == ChargeCategory.USAGE.value
    unused = (pl.col("_enum_CommitmentDiscountStatus") == "Unused").fill_null(False)
    resource_id = _resource_id(pl.col("provider"))
    # the source's own type: the canonical category, or the file's text when it is not one
    own = pl.coalesce(known, text_of("ChargeCategory"), pl.lit(UNKNOWN_CATEGORY))
    charge_type = (
        pl.when(unused)
        .then(
            pl.lit("Unused")
            + pl.coalesce(text_of("CommitmentDiscountType").str.replace_all(" ", ""), pl.lit("Commitment"))
        )
        .when(pl.col("_enum_ChargeClass") == "Correction")
        .then(own + pl.lit("/Correction"))
        .otherwise(own)
        .str.slice(0, 60)
    )
    details = text_of("SkuPriceDetails")
    instance_type = pl.coalesce(
        details.str.json_path_match("$.InstanceType"),
        details.str.json_path_match("$.MachineSpec"),
        text_of("x_SkuDetails").str.json_path_match("$.ServiceType"),
        text_of("x_UsageType").str.extract(AWS_INSTANCE_USAGE),
        pl.col("_shape"),
    ).str.strip_chars()
    gpu_count = pl.col("_gpu_count")
    is_gpu_sku = pl.col("_gpu_sku")
    hours = text_of("ConsumedUnit").str.to_lowercase().is_in(HOUR_UNITS).fill_null(False) | gpu_unit()
    counts_time = is_usage.fill_null(False) & ~unused
    lines = (
        with_gpu_facts(good, provider, facts.x_columns)
        .with_columns(
            provider.alias("provider"),
            pl.col(LINE).alias("line_no"),
            text_of("BillingAccountId").alias("billing_account"),
            text_of("SubAccountId").alias("account"),
            charge_type.alias("charge_type"),
            category.alias("charge_category"),
            pl.when(is_usage)
            .then(pl.col("_enum_PricingCategory").replace_strict(PRICING, default=None))
            .alias("pricing_model"),
            text_of("CommitmentDiscountId").alias("commitment_id"),
            text_of("ResourceName").alias("resource_name"),
            text_of("ServiceName").alias("service"),
            pl.coalesce(text_of("SkuId"), text_of("SkuPriceId")).alias("sku"),
            pl.coalesce(text_of("x_SkuDescription"), text_of("SkuMeter"), text_of("ChargeDescription")).alias(
                "sku_description"
            ),
            instance_type.alias("instance_type"),
            text_of("RegionId").alias("region"),
            text_of("ConsumedUnit").alias("usage_unit"),
            gpu_count.alias("gpu_count"),
            pl.when(is_gpu_sku).then(True).otherwise(None).alias("is_gpu_sku"),
            text_of("Tags").alias("tags"),
            counts_time.alias("_counts_time"),
            hours.alias("_hours"),
        )
        .with_columns(resource_id.alias("resource_id"))
    )
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
