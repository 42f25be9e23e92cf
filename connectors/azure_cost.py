"""``azure_cost``: Azure Cost Management exports ("Cost and usage details", actual or amortized).

Source, one of:

* ``path``: a local directory (read recursively) or file holding the CSV files an export writes
  (``.csv``, optionally gzipped; a ``manifest.json`` is ignored: every CSV file is read).
* ``blob_container_url`` (+ ``blob_prefix``): the storage container the export writes to, read
  through ``azure-storage-blob`` (see *Azure Blob Storage* below).

Header variants (docs/formats.md §5.3), matched case-insensitively so MCA camelCase
(``costInBillingCurrency``, ``date``, ``resourceId``…) reads like EA PascalCase: EA/MCA
``CostInBillingCurrency``, pay-as-you-go ``PreTaxCost``/``Cost``; ``Date`` / ``UsageDate`` /
``UsageDateTime``; ``Quantity`` / ``UsageQuantity``; ``BillingCurrencyCode`` / ``BillingCurrency``
/ ``Currency``; ``ResourceId`` / ``InstanceId``; ``SubscriptionId`` / ``SubscriptionGuid``;
``ReservationId`` / ``benefitId``; MCA's older ``instanceName`` is the resource id. A localized
header (``Datum (Date)``, ``PreTaxCost (PreTaxCost)``, ``Ubicación de los recursos
(SubscriptionGuid)``) is read by the English name in its parentheses (:func:`header_map`);
refusals and findings name every column as the file spells it (``UsageDateTime``, ``Kosten (Cost)``,
never the internal ``Date``). A UTF-8 byte-order mark is dropped. Dates are ``MM/DD/YYYY`` (EA/MCA
CSV; with a time, also ``9/21/2023 12:00:00 AM`` as spreadsheets re-save them), ``YYYY-MM-DD`` or
any ISO 8601 form (legacy ``UsageDateTime`` ``2019-07-29 00:00:00``); a row covers its whole UTC
day.

Refuse or flag (docs/billing.md): a row is **refused** only when it cannot be booked — its cost
(``CostInBillingCurrency``/``PreTaxCost``/``Cost``) empty or no number, its currency no ISO 4217
code, its date no timestamp or outside 2000..2100 or more than a day outside its billing period,
a billing period that cannot be one, an unreadable record, a repeated line. Everything else is
imported with a finding: ``unknown_value`` (a ``ChargeType`` not documented: booked as an
``Adjustment`` at its cost, no pricing model; an unknown ``PricingModel``: pricing ``other``),
``negative_usage`` (a negative ``Quantity`` on a row that is no refund or rounding adjustment),
``missing_value`` (no ``Quantity`` on a usage row), ``not_a_number`` (``Quantity``, ``PayGPrice``:
read as null), ``invalid_tags`` (tags that are no JSON object even wrapped in braces: kept whole as
``{"azure:unparsed_tags": …}``); the driver adds ``gpu_hours_over_capacity`` on the file's
quantity column when a line carries its GPU count.

Mapping decisions:

* ``effective_cost`` = ``CostInBillingCurrency``. ``dataset`` (config, else the run's manifest,
  else detected per file: the file name says ``amortized``/``actual``; else the file's first
  chunk holding a commitment row decides — unused-commitment rows or priced commitment usage
  mean amortized — see *Streaming*) decides ``billed_cost``: in the amortized dataset,
  commitment-covered usage and ``UnusedReservation``/``UnusedSavingsPlan`` rows bill 0 (the
  purchase is the invoiced charge, FOCUS rule) and commitment ``Purchase`` rows have effective 0
  (already spread over usage); in the actual dataset billed = effective = the cost.
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
  are left to the ingestor's catalog (:func:`service.billing.catalog.fill_gpus`), unless the
  connector is given ``gpu_counts`` (VM size → GPUs, the operator's catalog): then a known size's
  lines carry the count and GPU-hours (usage rows in hours: quantity × GPUs; unused commitments and
  negative quantities 0), computed as the catalog would, so the driver's capacity check sees them.
* ``Tags``: JSON without the outer braces in EA/MCA exports: wrapped in ``{}``; text that is no
  JSON object even then is kept as ``{"azure:unparsed_tags": "<text>"}``.
* ``line_key``: the export has no line id: ``sha1:`` + SHA-1 of the raw line (see
  :func:`connectors.billing_io.csv_chunks` with ``keys``); a line seen twice in a file is refused
  (also across chunks, by the driver).
* The batch's billing period is the file's ``BillingPeriodStartDate``..``BillingPeriodEndDate``
  (end date inclusive) when it names one, so a re-exported month replaces the old lines.

Streaming (issue 5: bounded memory)
-----------------------------------

A file is never held whole; the billing driver (:mod:`connectors.billing_driver`) reads it, this
module being its Azure dialect and its Blob plan. A gzip file or a ZIP of one export (told by
magic bytes, whatever the name) is first decompressed to a temporary file, to its end, so a
truncated or corrupt one is refused before its first batch, never half imported; then the CSV is
read in blocks of ``block_bytes`` and cut at record ends into chunks of about ``chunk_rows`` records
(:func:`connectors.billing_io.csv_chunks`: every check of a whole-file read applies per chunk,
line numbers are the file's). One :class:`BillingBatch` per chunk; ``read``/``refused`` count
that chunk. A blob is first copied to a temporary file by the Storage SDK's chunked download
(``download_blob().readinto``; every Storage error happens before the file's first batch) and
then read as a local file. Memory: the chunk's text and frames, the read-ahead, and 16 bytes a
line (a 64-bit hash and a line number) to refuse a line repeating one of an earlier chunk.

What must be known before the first batch of a file, and how:

* Billing period: a blob in a date-range folder has the folder's. Otherwise it is taken from the
  *first chunk* (the one period its rows name, each row naming it; else none). This relies on
  Cost Management exports holding one billing period per file (an export run is for one
  billing period/date range); a later chunk naming another period is a
  :class:`BillingFileError` for the file (the importer rolls the period back) rather than lines
  filed under the wrong period. A later row without a period is tolerated.
* The window: a file of a period not overlapping ``[start, end)`` yields nothing; a file
  without a billing period (pay-as-you-go) is read when its first chunk has a line in the window
  (whole-file reads used any line: the same for a one-month file).
* Dataset: from the config, the manifest or the file name when they say; else decided by the
  first chunk holding a commitment row (reservation/savings plan pricing or an unused
  commitment), by the rule above, and kept for the rest of the file. The chunks before it hold
  no such row, and the datasets price every other row the same, so their lines do not depend on
  the decision. (A chunk whose only commitment rows are purchases decides ``actual``, as a
  whole file without unused or priced commitment usage would.)

Azure Blob Storage
------------------

Layout. A Cost Management export writes, under its directory (``blob_prefix``; point it at one
export), ``<export>/<YYYYMMDD-YYYYMMDD>/<run folder(s)>/<file>.csv[.gz]``; exports with file
partitioning (the default of the 2023+ "improved" exports) also write a ``manifest.json`` per run
whose ``blobs[].blobName`` (container-relative) lists the run's data files and whose
``exportConfig.type`` says ``AmortizedCost``/``ActualCost``. Older exports without partitioning
write each run's file directly into the date-range folder (``<export>_<guid>.csv``).

What was verified and what is assumed (research notes, Nov 2026):

* [V] the manifest fields ``exportConfig{exportName, type, dataVersion, timeFrame…}``,
  ``deliveryConfig{partitionData, dataOverwriteBehavior, fileFormat, rootFolderPath…}``,
  ``runInfo{runId, submittedTime, startDate, endDate}`` and ``blobs[{blobName, byteCount}]``, with
  ``blobName`` = ``<path>/<export-name>/<date-range>/<export-time>/<guid>/<file>.csv`` (FinOps
  toolkit docs, "About exports", API 2023-07-01-preview); a manifest comes with every partitioned
  run (Microsoft Learn, improved exports FAQ); CSV may be gzip-compressed.
* [A] the date-range folder is ``YYYYMMDD-YYYYMMDD`` with an inclusive end date (the billing month:
  ``20250901-20250930``), so the batch period is ``[start, end + 1 day)``. The same toolkit page
  also shows the date range *before* the export name; the folder is found wherever it sits in
  the path, and everything after it up to the file is the run.
* [A] runs are ordered by the blob service's ``Last-Modified`` (the newest of the run's blobs, the
  manifest included; ties by the run's path), not by ``runInfo.submittedTime``, which would cost a
  download per run. In a period folder where some run has a manifest, a run without one is taken
  to be still writing and is not read.

Which files. Billing-period folders overlapping ``[start, end)`` only; in each, only the newest
run (older runs of a daily month-to-date export are superseded: reading them would double the
month). Of that run, the files its manifest names (one that is not there, or is not CSV —
Parquet exports are not read here — is a :class:`BillingFileError`), else its ``.csv``/``.csv.gz``
files. Every file's batches (one per chunk) carry ``period_start``/``period_end`` from the
folder and ``assembly_id`` is the run folder, so the ingestor replaces the whole period and a
newer run supersedes what an older one imported. A CSV outside any date-range folder is read as a
local file is (its own billing period columns). Files are listed once and downloaded one at a
time as the batches are consumed; a file that cannot be parsed is yielded as its
:class:`BillingFileError` and the others go on. ``source_file`` is the blob URL without a query
string: a SAS token never reaches a line, a log or an error message.

Credentials: ``tenant_id``/``client_id``/``client_secret`` (``authority_host``) through
:func:`connectors.azure_auth.build_credential`, or ``sas_token`` (read + list), or, with none, the
``DefaultAzureCredential`` chain; a token is asked for the scope
``https://storage.azure.com/.default``. Errors: 403 → :class:`FatalSourceError` saying to grant
"Storage Blob Data Reader" on the container (a refused SAS or token: check the credentials); a
missing container → :class:`ConfigurationError`; 5xx and timeouts (Storage throttles with 503
``ServerBusy``) are retried by the Storage SDK's exponential retry (``max_retries``, ``backoff_s``,
``timeout_s`` per request), then :class:`RetriableError`. ``ca_file`` verifies the endpoint
(``connection_verify``: private CAs, tests).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar
from urllib.parse import quote, unquote, urlsplit

import polars as pl
from pydantic import Field, SecretStr, model_validator

from connectors.azure_auth import build_credential, call_azure
from connectors.billing_driver import (
    Dialect,
    ExportFile,
    OpenedFile,
    Period,
    SkipFile,
    planned_files,
    read_files,
)
from connectors.billing_io import (
    BLOCK_BYTES,
    LINE,
    Checks,
    Normalized,
    Split,
    canonical,
    check_explicit,
    export_files,
    file_kind,
    in_window,
    json_text,
    require_columns,
)
from connectors.billing_stores import local_file
from connectors.cloud import auth_error
from connectors.sdk import (
    BILLING_CURRENCIES,
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    ChargeCategory,
    ConfigurationError,
    PricingModel,
    RefusedRow,
    conform,
)

_D18 = pl.Decimal(38, 18)
_SUFFIXES = {".csv": "csv"}
#: Tried first, then every ISO form (``2019-07-29 00:00:00`` of legacy ``UsageDateTime``…):
#: ``MM/DD/YYYY`` (EA/MCA CSV), with a time as some exports and Excel re-saves write it.
_DATE_FORMATS = (
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %I:%M:%S %p",
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%.f",
)
VARIANTS: dict[str, list[str]] = {
    "Date": ["UsageDate", "UsageDateTime"],
    "Quantity": ["UsageQuantity", "ConsumedQuantity"],
    "CostInBillingCurrency": ["PreTaxCost", "Cost"],
    "BillingCurrencyCode": ["BillingCurrency", "Currency"],
    "SubscriptionId": ["SubscriptionGuid"],
    "ResourceId": ["InstanceId", "InstanceName"],  # MCA's older usage details: instanceName
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
#: ``ResourceId`` (or pay-as-you-go ``InstanceId``) is in every cost-details export; without it no
#: line names its VM, and the file would import as cost of nothing — so its absence fails the file.
REQUIRED = ("Date", "Quantity", "CostInBillingCurrency", "BillingCurrencyCode", "ResourceId")
_CATEGORY = {
    "usage": ChargeCategory.USAGE.value,
    "unusedreservation": ChargeCategory.USAGE.value,
    "unusedsavingsplan": ChargeCategory.USAGE.value,
    "purchase": ChargeCategory.PURCHASE.value,
    "refund": ChargeCategory.CREDIT.value,
    "roundingadjustment": ChargeCategory.ADJUSTMENT.value,
    "tax": ChargeCategory.TAX.value,
    "unknown": ChargeCategory.ADJUSTMENT.value,  # a ChargeType not documented (flagged)
}
_PRICING = {
    "ondemand": PricingModel.ON_DEMAND.value,
    "": PricingModel.ON_DEMAND.value,  # pay-as-you-go exports have no PricingModel
    "reservation": PricingModel.COMMITMENT.value,
    "savingsplan": PricingModel.COMMITMENT.value,
    "spot": PricingModel.SPOT.value,
}
_UNUSED = ("unusedreservation", "unusedsavingsplan")
#: ``ChargeType`` values as Cost Management spells them (matched ignoring case, spaces, ``-``, ``_``).
CHARGE_TYPES = (
    "Usage",
    "UnusedReservation",
    "UnusedSavingsPlan",
    "Purchase",
    "Refund",
    "RoundingAdjustment",
    "Tax",
)
#: ``PricingModel`` values as Cost Management spells them.
PRICING_MODELS = ("OnDemand", "Reservation", "SavingsPlan", "Spot")


SOURCE = "azure_cost"
#: What the connector's identity needs on the export's container.
PERMISSION = (
    'the "Storage Blob Data Reader" role on the storage container (or a sas_token with read and list '
    "permissions)"
)
_AUTH_NEXT_STEP = (
    "check sas_token (expired? signed for this container?) or tenant_id/client_id/client_secret"
    " (or run `az login` for DefaultAzureCredential)"
)
_PERIOD_DIR = re.compile(r"(?:^|/)(\d{8})-(\d{8})/")
_DATASETS: dict[str, Literal["amortized", "actual"]] = {"amortizedcost": "amortized", "actualcost": "actual"}
_T = TypeVar("_T")


class AzureCostConfig(BillingConfig):
    """``type = "azure_cost"``.

    * ``path``: a directory (read recursively) or a CSV file of a Cost Management export; or
    * ``blob_container_url`` (``https://<account>.blob.core.windows.net/<container>``, no query
      string: a SAS goes in ``sas_token``) and ``blob_prefix``: the export's directory in the
      container (``<root folder>/<export name>``).
    * Blob credentials: ``tenant_id`` + ``client_id`` + ``client_secret`` (``authority_host`` for a
      sovereign cloud), or ``sas_token``, or none of them for ``DefaultAzureCredential``.
    * ``ca_file``: PEM bundle to verify the endpoint with; ``max_retries``/``backoff_s``: the
      Storage SDK's retries of 5xx and timeouts; ``timeout_s``: per request.
    * ``dataset``: ``amortized`` or ``actual``; else the run's manifest says, else detected per file.
    * ``chunk_rows``: records per batch of a large file (default 20,000; memory per chunk grows
      with it, see the module's *Streaming*).
    """

    type: Literal["azure_cost"] = "azure_cost"
    dataset: Literal["amortized", "actual"] | None = None
    blob_container_url: str | None = Field(None, pattern=r"^https://[^/?#\s]+/[^?#\s]*[^/?#\s]/?$")
    blob_prefix: str = ""
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    authority_host: str | None = None
    sas_token: SecretStr | None = None
    ca_file: str | None = None
    max_retries: int = Field(5, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0)
    timeout_s: float = Field(60.0, gt=0)
    chunk_rows: int = Field(20_000, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> AzureCostConfig:
        if (self.path is None) == (self.blob_container_url is None):
            raise ValueError(
                'give exactly one of "path" (a local directory or file of the cost export) and'
                ' "blob_container_url" (the storage container the export writes to)'
            )
        principal = (self.tenant_id, self.client_id, self.client_secret)
        if self.sas_token is not None and any(p is not None for p in principal):
            raise ValueError(
                "give sas_token or a service principal (tenant_id/client_id/client_secret), not both"
            )
        return self


@dataclass(frozen=True, slots=True)
class _Blob:
    name: str
    last_modified: dt.datetime


@dataclass(slots=True)
class _Run:
    """One export run: the blobs under one run folder (or one file straight in the period folder)."""

    key: str
    blobs: list[_Blob] = field(default_factory=list)
    manifest: str | None = None

    @property
    def newest(self) -> dt.datetime:
        return max(b.last_modified for b in self.blobs)


@dataclass(frozen=True, slots=True)
class _Planned:
    name: str
    period_start: dt.datetime | None = None
    period_end: dt.datetime | None = None
    assembly_id: str | None = None  # the export run's id
    dataset: Literal["amortized", "actual"] | None = None


class AzureCostConnector:
    """Reads Azure cost export CSV files (local or Blob), streamed: one :class:`BillingBatch` per
    chunk of about ``chunk_rows`` records."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[AzureCostConfig]] = AzureCostConfig

    def __init__(
        self,
        config: AzureCostConfig,
        *,
        credential: Any = None,
        container_client: Any = None,
        block_bytes: int = BLOCK_BYTES,
        gpu_counts: Mapping[str, int] | None = None,
    ) -> None:
        self.config = config
        #: bytes asked of the (decompressed) stream at a time; a chunk is read in such blocks.
        self.block_bytes = block_bytes
        #: VM size → GPUs (the operator's instance catalog, when the caller passes it): lines of a
        #: known size carry their GPU count and GPU-hours, so the driver can flag GPU-hours beyond
        #: the VM's GPUs × hours. Without it both stay null for the ingestor's catalog to fill.
        self.gpu_counts = gpu_counts
        self._credential, self._client = credential, container_client
        self._owned: list[Any] = []

    def __enter__(self) -> AzureCostConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def files(self) -> list[Path]:
        return export_files(Path(str(self.config.path)), _SUFFIXES)

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        """Batches of the files whose billing period (else a line of the first chunk) overlaps
        ``[start, end)``. An unreadable file, local or in Blob storage, is a yielded
        :class:`~connectors.billing.BillingFileError`, and the next file follows."""
        if self.config.blob_container_url is None:
            explicit = Path(str(self.config.path)).is_file()
            files = [_local(path, explicit) for path in self.files()]
            return self._driven(iter(files), {}, start, end)
        return self._read_blobs(start, end)

    def _driven(
        self,
        files: Iterator[ExportFile | BillingFileError],
        datasets: dict[str, Literal["amortized", "actual"]],
        start: dt.datetime,
        end: dt.datetime,
    ) -> Iterator[BillingBatch | BillingFileError]:
        dialect = AzureCostDialect(self.config.dataset, datasets, (start, end), self.gpu_counts)
        return read_files(
            files, dialect, start, end, chunk_rows=self.config.chunk_rows, block_bytes=self.block_bytes
        )

    def close(self) -> None:
        """Closes the Blob client and the credential it built (local files are closed as read)."""
        if any(owned is self._client for owned in self._owned):
            self._client = None  # an injected client is the caller's to close
        for owned in reversed(self._owned):
            owned.close()
        self._owned.clear()

    # ---- Azure Blob Storage

    def _read_blobs(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        plan = self._plan(start, end)
        datasets = {self._label(i.name): i.dataset for i in plan if isinstance(i, _Planned) and i.dataset}
        files = planned_files(plan, lambda f: self._label(f.name), lambda f: self._blob_copy(f.name))
        yield from self._driven(files, datasets, start, end)

    @contextlib.contextmanager
    def _blob_copy(self, name: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="gpu-ledger-azure-cost-") as folder:
            path = Path(folder) / "export"
            self._download_to(name, path)
            yield path

    def _plan(self, start: dt.datetime, end: dt.datetime) -> list[_Planned | BillingFileError]:
        """The files to read, in order: the newest run of each period folder overlapping the window."""
        blobs = self._list()
        names = {b.name for b in blobs}
        periods: dict[str, tuple[dt.datetime, dt.datetime, dict[str, _Run]]] = {}
        plain: list[_Planned | BillingFileError] = []
        for blob in blobs:
            found = list(_PERIOD_DIR.finditer(blob.name))
            if not found:
                if file_kind(blob.name, _SUFFIXES):
                    plain.append(_Planned(blob.name))
                continue
            match = found[-1]
            folder, rest = blob.name[: match.end()], blob.name[match.end() :]
            if folder not in periods:
                lo = dt.datetime.strptime(match[1], "%Y%m%d").replace(tzinfo=dt.UTC)
                hi = dt.datetime.strptime(match[2], "%Y%m%d").replace(tzinfo=dt.UTC) + dt.timedelta(days=1)
                periods[folder] = (lo, hi, {})
            run_dir = rest.rpartition("/")[0]
            is_manifest = rest.rpartition("/")[2].lower() == "manifest.json"
            if not run_dir and not file_kind(rest, _SUFFIXES):
                continue  # neither a run folder nor a data file (a stray manifest of an older layout)
            run = periods[folder][2].setdefault(run_dir or rest, _Run(folder + (run_dir or rest)))
            run.blobs.append(blob)
            if is_manifest:
                run.manifest = blob.name
        plan: list[_Planned | BillingFileError] = []
        for lo, hi, runs in periods.values():
            if not (lo < end and hi > start):
                continue
            candidates = list(runs.values())
            if any(r.manifest for r in candidates):
                candidates = [r for r in candidates if r.manifest]  # the others are still being written
            newest = max(candidates, key=lambda r: (r.newest, r.key))
            run_id = newest.key.rstrip("/").rpartition("/")[2]
            if newest.manifest is None:
                for blob in sorted(newest.blobs, key=lambda b: b.name):
                    if file_kind(blob.name, _SUFFIXES):
                        plan.append(_Planned(blob.name, lo, hi, run_id))
                continue
            try:
                listed, dataset = self._manifest(newest.manifest)
            except BillingFileError as error:
                plan.append(error)
                continue
            for name in listed:
                resolved = self._resolve(name, newest.manifest, names)
                if resolved is None:
                    plan.append(
                        BillingFileError(
                            self._label(name),
                            f"named by the manifest {self._label(newest.manifest)} but not found",
                        )
                    )
                elif not file_kind(resolved, _SUFFIXES):
                    plan.append(
                        BillingFileError(
                            self._label(resolved),
                            "not a CSV export file (azure_cost reads CSV or gzip CSV exports, not Parquet)",
                        )
                    )
                else:
                    plan.append(_Planned(resolved, lo, hi, run_id, dataset))
        return plan + plain

    def _manifest(self, name: str) -> tuple[list[str], Literal["amortized", "actual"] | None]:
        label = self._label(name)
        try:
            manifest = json.loads(self._download(name))
            listed = [str(b["blobName"]) for b in manifest["blobs"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise BillingFileError(label, f"not an export manifest (no blobs[].blobName): {exc!r}") from None
        config = manifest.get("exportConfig") if isinstance(manifest.get("exportConfig"), dict) else {}
        kind = str(config.get("type") or "").replace(" ", "").lower()
        return listed, _DATASETS.get(kind)

    def _resolve(self, name: str, manifest: str, names: set[str]) -> str | None:
        """A manifest's ``blobName`` is container-relative; a URL or a name relative to the run
        folder is accepted too."""
        text = name.strip()
        if text.startswith("https://"):
            container = urlsplit(self._container_url()).path.rstrip("/") + "/"
            path = unquote(urlsplit(text).path)
            text = path[len(container) :] if path.startswith(container) else path
        text = text.lstrip("/")
        for candidate in (text, manifest.rpartition("/")[0] + "/" + text):
            if candidate in names:
                return candidate
        return None

    def _container_url(self) -> str:
        return str(self.config.blob_container_url).rstrip("/")

    def _label(self, name: str) -> str:
        return f"{self._container_url()}/{quote(name, safe='/')}"

    def _list(self) -> list[_Blob]:
        prefix = self.config.blob_prefix.strip("/")
        prefix = prefix + "/" if prefix else ""
        container = self._container()
        what = f"List Blobs {self._container_url()} (prefix {prefix!r})"
        return self._call(
            what,
            lambda: [
                _Blob(b.name, b.last_modified) for b in container.list_blobs(name_starts_with=prefix or None)
            ],
        )

    def _download(self, name: str) -> bytes:
        """A small blob (a manifest), whole."""
        container = self._container()
        return self._call(
            f"Get Blob {self._label(name)}", lambda: container.download_blob(name).readall(), name
        )

    def _download_to(self, name: str, path: Path) -> None:
        """The blob copied to ``path`` as the SDK downloads it, chunk by chunk (never whole in
        memory); every Storage error happens here, before the file's first batch."""
        container = self._container()

        def copy() -> None:
            try:
                with path.open("wb") as out:
                    container.download_blob(name).readinto(out)
            except OSError as exc:
                raise BillingFileError(
                    self._label(name), f"cannot copy to a temporary file: {exc.strerror or exc}"
                ) from None

        self._call(f"Get Blob {self._label(name)}", copy, name)

    def _call(self, what: str, request: Callable[[], _T], blob: str | None = None) -> _T:
        """:func:`call_azure`'s mapping, with the Storage cases it cannot tell: a missing container
        is a configuration error, a missing blob a file error, a refused SAS an authentication error."""
        from azure.core.exceptions import HttpResponseError

        def guarded() -> _T:
            try:
                return request()
            except HttpResponseError as exc:
                error_code = getattr(exc, "error_code", None)  # a StorageErrorCode (Storage errors only)
                code = str(getattr(error_code, "value", error_code) or "")
                detail = f"{what}: HTTP {exc.status_code}: {code}"
                if exc.status_code == 404 and blob is not None and code != "ContainerNotFound":
                    raise BillingFileError(
                        self._label(blob), f"the blob is gone ({code or 'HTTP 404'})"
                    ) from None
                if exc.status_code == 404:
                    raise ConfigurationError(
                        f"{SOURCE}: {detail}: no such container: check blob_container_url"
                    ) from exc
                if exc.status_code == 403 and code == "AuthenticationFailed":
                    raise auth_error(SOURCE, detail, _AUTH_NEXT_STEP) from exc
                raise

        return call_azure(f"{SOURCE}: {what}", PERMISSION, guarded)

    def _container(self) -> Any:
        if self._client is None:
            from azure.storage.blob import ContainerClient, ExponentialRetry

            c = self.config
            # azure-storage-blob annotates these seconds as int but computes with them as floats;
            # backoff_s is a float setting (e.g. 0.5 s) and is passed as it is.
            retry = ExponentialRetry(
                initial_backoff=c.backoff_s,  # type: ignore[arg-type]
                increment_base=3 * c.backoff_s,  # type: ignore[arg-type]
                retry_total=c.max_retries,
                random_jitter_range=min(3.0, c.backoff_s),  # type: ignore[arg-type]
            )
            kwargs: dict[str, Any] = {
                "retry_policy": retry,
                "connection_timeout": c.timeout_s,
                "read_timeout": c.timeout_s,
            }
            if c.ca_file is not None:
                kwargs["connection_verify"] = c.ca_file
            self._client = ContainerClient.from_container_url(
                self._container_url(), credential=self._cred(), **kwargs
            )
            self._owned.append(self._client)
        return self._client

    def _cred(self) -> Any:
        if self._credential is None:
            c = self.config
            if c.sas_token is not None:
                from azure.core.credentials import AzureSasCredential

                return AzureSasCredential(c.sas_token.get_secret_value())
            self._credential = build_credential(c.tenant_id, c.client_id, c.client_secret, c.authority_host)
            self._owned.append(self._credential)
        return self._credential


def _key(column: str) -> pl.Expr:
    """A type column folded for matching: ``Unused Reservation`` = ``UnusedReservation``."""
    return pl.col(column).str.strip_chars().str.replace_all(" ", "").str.to_lowercase()


def _dataset_of_name(file: str) -> Literal["amortized", "actual"] | None:
    name = Path(file).name.lower()
    if "amortized" in name or "amortised" in name:
        return "amortized"
    if "actual" in name:
        return "actual"
    return None


def _committed() -> pl.Expr:
    """A row the datasets price differently: commitment pricing or an unused commitment."""
    charge = _key("ChargeType").fill_null("usage")
    return _key("PricingModel").is_in(["reservation", "savingsplan"]) | charge.is_in(_UNUSED)


def _holds_commitment(frame: pl.DataFrame) -> bool:
    return bool(frame.select(_committed().fill_null(False).any()).item())


def _dataset_of_rows(frame: pl.DataFrame) -> Literal["amortized", "actual"]:
    """Unused-commitment rows or priced commitment usage exist only in the amortized dataset (the
    actual one bills covered usage at 0 and shows the purchase instead)."""
    charge, model = _key("ChargeType"), _key("PricingModel")
    cost = pl.col("CostInBillingCurrency").str.strip_chars().cast(MONEY, strict=False)
    priced_commitment = (charge == "usage") & model.is_in(["reservation", "savingsplan"]) & (cost != 0)
    amortized = frame.select((charge.is_in(_UNUSED) | priced_commitment).fill_null(False).any()).item()
    return "amortized" if amortized else "actual"


def _checked(
    frame: pl.DataFrame,
    file: str,
    period: tuple[dt.datetime | None, dt.datetime | None] = (None, None),
    spelled: Mapping[str, str] | None = None,
) -> Split:
    """(good rows with parsed columns, rows failing a check, findings); a repeated line is the
    driver's to refuse. A row is refused only when its cost, currency or date cannot be read (or
    its dates cannot be the bill's); everything else imports it with a finding. ``spelled``: the
    file's header for each canonical column (refusals and findings name it)."""
    cost_text = pl.col("CostInBillingCurrency").str.strip_chars()
    checks = Checks(
        file, spelled=spelled, money=cost_text.cast(MONEY, strict=False), provider=pl.lit("azure")
    )
    charge_text = pl.col("ChargeType").str.strip_chars()
    charge = canonical(charge_text, CHARGE_TYPES)
    quantity = _optional_number(checks, "Quantity")
    parsed = {
        "_cost": checks.decimal("CostInBillingCurrency"),
        "_quantity": quantity,
        "_payg": _optional_number(checks, "PayGPrice"),
        "_date": checks.timestamp("Date", *_DATE_FORMATS),
        "_period_start": checks.timestamp("BillingPeriodStartDate", *_DATE_FORMATS, required=False),
        "_period_end": checks.timestamp("BillingPeriodEndDate", *_DATE_FORMATS, required=False),
        "_currency": checks.currency("BillingCurrencyCode", BILLING_CURRENCIES),
        # no ChargeType (pay-as-you-go exports have none): usage; one AWS never documented: an
        # adjustment (its money is the bill's; what it is for is not known)
        "_charge": pl.when(charge_text.is_null() | (charge_text == ""))
        .then(pl.lit("usage"))
        .otherwise(charge.str.to_lowercase().fill_null("unknown")),
    }
    checks.flag(
        "ChargeType",
        "unknown_value",
        "unknown ChargeType: booked as an adjustment at its cost",
        (charge_text != "") & charge.is_null(),
    )
    model_text = pl.col("PricingModel").str.strip_chars()
    checks.flag(
        "PricingModel",
        "unknown_value",
        "unknown PricingModel: booked as pricing model other",
        (model_text != "") & canonical(model_text, PRICING_MODELS).is_null(),
    )
    usage = parsed["_charge"] == "usage"
    checks.flag(
        "Quantity", "missing_value", "empty Quantity on a usage row", usage & _empty(pl.col("Quantity"))
    )
    # refunds and rounding adjustments give back usage: a negative quantity is theirs to have
    negative_ok = parsed["_charge"].is_in(["refund", "roundingadjustment"])
    checks.flag(
        "Quantity",
        "negative_usage",
        "negative Quantity on a row that is no refund",
        (quantity < 0) & ~negative_ok,
    )
    tags = pl.col("Tags").str.strip_chars()
    checks.flag(
        "Tags",
        "invalid_tags",
        "not a JSON object of tags: kept whole as azure:unparsed_tags",
        ~_empty(tags) & ~_tags_object(tags),
    )
    # A row covers its UTC day; the billing period's end date is inclusive.
    day, day_end = parsed["_date"], parsed["_date"].dt.truncate("1d") + pl.duration(days=1)
    checks.dates("Date", day, "Date", day_end)
    row_period = (parsed["_period_start"], parsed["_period_end"] + pl.duration(days=1))
    checks.period("BillingPeriodStartDate", *row_period)
    if period[0] is not None and period[1] is not None:
        bounds = (pl.lit(period[0]).cast(UTC_TIME), pl.lit(period[1]).cast(UTC_TIME))
        what = f"the file's billing period {period[0]:%Y-%m-%d}..{period[1]:%Y-%m-%d}"
    else:
        bounds, what = row_period, "the row's billing period"
    checks.within("Date", day, "Date", day_end, bounds, what)
    return checks.split(frame, parsed)


def _empty(text: pl.Expr) -> pl.Expr:
    return (text.str.strip_chars() == "").fill_null(True)


def _optional_number(checks: Checks, column: str) -> pl.Expr:
    """``column`` (no money of the row) as Decimal; empty or ``NaN`` = null; text that is no number
    imports the row with a null and the finding ``not_a_number``."""
    text = pl.col(column).str.strip_chars()
    text = pl.when(text.is_in(["NaN", "nan", "NAN"])).then(pl.lit("")).otherwise(text)
    value = checks.value(text.cast(MONEY, strict=False))
    checks.flag(column, "not_a_number", "not a number: read as no value", ~_empty(text) & value.is_null())
    return value


def _tags_object(tags: pl.Expr) -> pl.Expr:
    """EA/MCA write tags as a JSON object without its braces: an object once wrapped."""
    wrapped = (
        pl.when(tags.str.starts_with("{")).then(tags).otherwise(pl.concat_str(pl.lit("{"), tags, pl.lit("}")))
    )
    return wrapped.str.json_path_match("$").str.starts_with("{").fill_null(False)


def _period(good: pl.DataFrame) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The billing period the rows name (end date inclusive → exclusive), when they name exactly
    one and every row names it; else none."""
    starts = good["_period_start"].drop_nulls().unique()
    ends = good["_period_end"].drop_nulls().unique()
    if starts.len() != 1 or ends.len() != 1 or good["_period_start"].null_count():
        return None, None
    return starts.item(), ends.item() + dt.timedelta(days=1)


def _same_period(
    good: pl.DataFrame,
    file: str,
    period: tuple[dt.datetime | None, dt.datetime | None],
    spelled: Mapping[str, str],
) -> None:
    """A later chunk naming another billing period than the first one: the file breaks the one
    period per export file the batches were labelled by, so it fails (the importer rolls the
    period back) rather than lines landing under the wrong period."""
    assert period[0] is not None and period[1] is not None
    other = good.filter(
        (pl.col("_period_start") != period[0]) | (pl.col("_period_end") != period[1] - dt.timedelta(days=1))
    )
    if other.height:
        row = other.row(0, named=True)
        raise BillingFileError(
            file,
            f"a second billing period ({row['BillingPeriodStartDate']}..{row['BillingPeriodEndDate']}) after "
            f"{period[0]:%Y-%m-%d}..{period[1] - dt.timedelta(days=1):%Y-%m-%d}: an export file holds one",
            line=row[LINE],
            column=spelled.get("BillingPeriodStartDate", "BillingPeriodStartDate"),
        )


def _local(path: Path, explicit: bool) -> ExportFile | BillingFileError:
    """A local export file; one given explicitly that is no CSV export (nor a .zip of one) is refused."""
    if explicit:
        try:
            check_explicit(path, _SUFFIXES, "Azure cost")
        except BillingFileError as error:
            return error
    return local_file(path)


#: A localized header carries the English column name in parentheses: ``Datum (Date)``,
#: ``PreTaxCost (PreTaxCost)``, ``Ubicación de los recursos (SubscriptionGuid)``.
_LOCALIZED = re.compile(r"^.*\(\s*([A-Za-z][A-Za-z0-9]*)\s*\)\s*$")


def header_map(columns: list[str]) -> dict[str, str]:
    """The file's columns → the names this module reads them by (only those renamed): a localized
    header by the English name inside its parentheses, then a variant (:data:`VARIANTS`: EA, MCA
    camelCase, pay-as-you-go) by its canonical name, matched case-insensitively, the first present
    winning. A name another column already has is not taken twice."""
    english = {c: (m[1] if (m := _LOCALIZED.match(c)) else c) for c in columns if c not in (LINE, "line_key")}
    by_lower: dict[str, str] = {}
    for column, name in english.items():
        by_lower.setdefault(name.lower(), column)
    renamed: dict[str, str] = {}
    for canonical_name, options in VARIANTS.items():
        for option in (canonical_name, *options):
            found = by_lower.get(option.lower())
            if found is not None and found not in renamed:
                renamed[found] = canonical_name
                break
    targets = set(renamed.values())
    for column, name in english.items():  # other localized columns: their English name
        if column not in renamed and name != column and name not in targets and name not in english:
            renamed[column] = name
            targets.add(name)
    return {c: n for c, n in renamed.items() if c != n}


class AzureCostDialect(Dialect):
    """The Azure cost-details layout for the billing driver: header variants (localized ones by
    the English name they carry) and required columns, the billing period (the folder's, else the
    first chunk's), the dataset (config, manifest, file name, else the first chunk holding a
    commitment row) and the mapping of a chunk."""

    raw_keys = True  # no line id: the key is the line as written

    def __init__(
        self,
        dataset: Literal["amortized", "actual"] | None,
        datasets: dict[str, Literal["amortized", "actual"]],
        window: tuple[dt.datetime, dt.datetime],
        gpu_counts: Mapping[str, int] | None = None,
    ) -> None:
        self.dataset, self.datasets, self.window = dataset, datasets, window
        self.gpu_counts = {k.strip().lower(): v for k, v in (gpu_counts or {}).items()}

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(pl.exclude(LINE).cast(pl.String))

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _AzureFile:
        file = opened.label
        if opened.parquet:
            raise BillingFileError(
                file, "not a CSV export file (azure_cost reads CSV or gzip CSV exports, not Parquet)"
            )
        renamed = header_map(first.columns)
        require_columns(first.rename(renamed), file, REQUIRED)
        dataset = self.dataset or self.datasets.get(file) or _dataset_of_name(file)
        reader = _AzureFile(file, dataset, period, renamed, self.gpu_counts)
        if period is None:
            # the first chunk names the file's period; without one, a line of it must be in the window
            good = _checked(reader.prepared(first), file, spelled=reader.spelled).rows
            lo, hi = _period(good)
            reader.period = None if lo is None or hi is None else (lo, hi)
            if reader.period is None:
                lines = _to_lines(good, file, "actual")
                if not in_window(BillingBatch(lines=lines, read=lines.height), *self.window):
                    raise SkipFile
        return reader


class _AzureFile:
    def __init__(
        self,
        file: str,
        dataset: Literal["amortized", "actual"] | None,
        period: Period | None,
        renamed: dict[str, str],
        gpu_counts: Mapping[str, int],
    ) -> None:
        self.file, self.dataset, self.period = file, dataset, period
        self.renamed, self.gpu_counts = renamed, gpu_counts
        #: canonical column → the file's header (refusals and findings name the file's)
        self.spelled = {name: column for column, name in renamed.items()}
        #: the quantity as the file spells it: the driver names it in GPU-hour findings
        self.quantity_column = self.spelled.get("Quantity", "Quantity")
        self._from_content, self._first = period is None, True

    def prepared(self, frame: pl.DataFrame) -> pl.DataFrame:
        frame = frame.rename(self.renamed)
        return frame.with_columns(
            pl.lit(None, pl.String).alias(c) for c in VARIANTS if c not in frame.columns
        )

    def normalize(self, frame: pl.DataFrame) -> Normalized:
        frame = self.prepared(frame)
        if self.dataset is None and _holds_commitment(frame):
            self.dataset = _dataset_of_rows(frame)  # the first chunk holding a commitment row decides
        # usage dates are held to the file's period once known (folder, else the first chunk's)
        held = (None, None) if self.period is None or (self._from_content and self._first) else self.period
        good, bad, findings = _checked(frame, self.file, held, self.spelled)
        if self._from_content and not self._first and self.period is not None:
            _same_period(good, self.file, self.period, self.spelled)
        self._first = False
        # no commitment row yet: both datasets price the rows alike
        lines = _to_lines(good, self.file, self.dataset or "actual", self.gpu_counts)
        return Split(lines, bad, findings)

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        return RefusedRow(self.file, line, None, f"duplicated line: the same as line {first}", key)

    def finish(self, read: int, accepted: int, refused: int) -> None:
        """Nothing to log: the ingestor records the run's counts."""


def _vm_size_from_meter() -> pl.Expr:
    """``ND96isrH100v5`` / ``NC24ads A100 v4`` (``… Spot``) → ``Standard_ND96isr_H100_v5`` …"""
    name = pl.col("MeterName").str.strip_chars().str.replace(r"(?i)\s+(spot|low priority)$", "")
    name = name.str.replace_all(r"\s+", "_").str.replace_all(r"([a-z])([A-Z]\d+)", "${1}_${2}")
    return pl.lit("Standard_") + name.str.replace(r"(\d)(v\d+)$", "${1}_${2}")


def _to_lines(
    good: pl.DataFrame, file: str, dataset: str, gpu_counts: Mapping[str, int] | None = None
) -> pl.DataFrame:
    charge = pl.col("_charge")
    category = charge.replace_strict(_CATEGORY, return_dtype=pl.String)
    model_text = pl.col("PricingModel").str.strip_chars().fill_null("")
    model = (
        pl.when(model_text == "")
        .then(pl.lit(""))
        .otherwise(canonical(model_text, PRICING_MODELS).str.to_lowercase().fill_null("other"))
    )
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
        pl.when(_empty(pl.col("ChargeType")))
        .then(pl.lit("Usage"))
        .otherwise(
            pl.coalesce(canonical(pl.col("ChargeType"), CHARGE_TYPES), pl.col("ChargeType").str.strip_chars())
        )
        .alias("charge_type"),
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
    return conform(_with_gpus(lines, gpu_counts or {}))


def _with_gpus(lines: pl.DataFrame, gpu_counts: Mapping[str, int]) -> pl.DataFrame:
    """``gpu_count`` of a VM size ``gpu_counts`` knows (lower-cased), and ``gpu_hours`` as the
    catalog computes them (``service.billing.catalog.fill_gpus``): usage rows in hours bill
    quantity × GPUs, except unused commitments and a negative quantity (flagged: no GPU-hours);
    other rows of the VM 0; a usage row without a readable quantity null."""
    if not gpu_counts or lines.is_empty():
        return lines
    count = (
        pl.col("instance_type")
        .str.strip_chars()
        .str.to_lowercase()
        .replace_strict(dict(gpu_counts), default=None, return_dtype=pl.Int32)
    )
    hours = (
        pl.col("usage_unit").str.strip_chars().str.to_lowercase().is_in(["hour", "hours", "hrs", "hr", "h"])
    )
    charge = pl.col("charge_type").str.to_lowercase()
    instance_time = (
        (pl.col("charge_category") == ChargeCategory.USAGE.value) & hours & ~charge.is_in(_UNUSED)
    ).fill_null(False)
    quantity = pl.col("usage_quantity")
    gpu_hours = (
        pl.when(count.is_null() | (instance_time & quantity.is_null()))
        .then(pl.lit(None, dtype=MONEY))
        .when(instance_time & (quantity >= 0))
        .then(quantity * count)
        .otherwise(pl.lit(0))
        .cast(MONEY)
    )
    return lines.with_columns(count.alias("gpu_count"), gpu_hours.alias("gpu_hours"))
