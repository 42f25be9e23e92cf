"""``aws_cur``: AWS Cost and Usage Reports — CUR 2.0 (Data Exports) and legacy CUR — as billing lines.

**Source.** The report files, from a local directory/file (``path``) or an S3 bucket
(``s3_uri = "s3://bucket/prefix"``, read through boto3): CSV, gzip'ed CSV (``.csv.gz``), ZIP'ed
CSV (legacy ``.csv.zip``) and Parquet. Two header layouts, told apart by the header:

* CUR 2.0: fixed snake_case columns (``line_item_usage_start_date``); ``product``,
  ``resource_tags``, ``cost_category`` and ``discount`` are maps — JSON text in CSV, maps/structs in
  Parquet (turned into the same JSON text first, so a CSV and a Parquet export give equal lines).
* Legacy CUR: ``category/Name`` headers (``lineItem/UsageStartDate``, ``product/instanceType``),
  read by converting the name to CUR 2.0 spelling (``savingsPlan/SavingsPlanEffectiveCost`` →
  ``savings_plan_savings_plan_effective_cost``, ``reservation/ReservationARN`` →
  ``reservation_reservation_a_r_n``); one column per tag, ``resourceTags/user:cost-center`` → tag
  key ``user:cost-center`` (legacy Parquet's ``resource_tags_user_team`` columns → ``user_team``).
  Refusals name the column as the file spells it.

**Which files.** Report deliveries are replaced, not appended, so only the current delivery of a
billing period is read:

* Legacy CUR: ``<prefix>/<report>/<YYYYMMDD-YYYYMMDD>/<report>-Manifest.json`` names the current
  assembly (``assemblyId``) and its files (``reportKeys``: object keys in the bucket); earlier
  assemblies in sibling ``<assemblyId>/`` folders are superseded and not read. [T: manifest keys
  ``assemblyId``/``reportKeys``/``billingPeriod {"start": "20250101T000000.000Z", …}`` as used by
  project-koku's downloader and other third-party readers; the folder layout as AWS documents it]
* CUR 2.0: ``<prefix>/<export>/metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json`` with
  ``executionId`` and ``dataFiles`` (full ``s3://`` URIs) naming the current execution's files under
  ``<prefix>/<export>/data/BILLING_PERIOD=YYYY-MM/``. [V: AWS Data Exports "manifest file
  reference" (fields ``executionId``, ``exportArn``, ``columns``, ``dataFiles``,
  ``additionalOutputFiles``) and "export delivery" (both paths). Assumed [A]: the manifest carries
  no billing period of its own, so the period is the ``BILLING_PERIOD=`` partition.]
* Files under a period that has a manifest are read only when the manifest names them. Other data
  files (a plain directory of exported CSVs, as an operator copies them) are read as they are.
* Only billing periods overlapping ``[start, end)`` are read. The period comes from the path
  (``YYYYMMDD-YYYYMMDD``, ``BILLING_PERIOD=``) or, for a plain file, from its
  ``bill_billing_period_start_date``/``_end_date``; each batch carries it (``period_start``,
  ``period_end``, ``assembly_id``: the assembly/execution id) so the ingestor replaces the
  period's lines as a whole and a newer assembly supersedes the old one.

**Mapping** (docs/formats.md §5.1, docs/billing.md). Every row is kept; nothing is
skipped. ``billed_cost`` = ``line_item_unblended_cost`` on every row, so Σ billed = the cash on the
invoice. ``effective_cost`` (amortized):

===========================  ==========  ==========  =============================================
line_item_line_item_type     category    pricing     effective_cost
===========================  ==========  ==========  =============================================
Usage                        Usage       on_demand   unblended (``spot`` for ``SpotUsage:`` types)
SavingsPlanCoveredUsage      Usage       commitment  ``savings_plan_savings_plan_effective_cost``
SavingsPlanNegation          Usage       commitment  0 (it cancels the covered row's on-demand
                                                     unblended; its unblended stays in billed)
DiscountedUsage (RI)         Usage       commitment  ``reservation_effective_cost``
SavingsPlanRecurringFee      Purchase    –           unused commitment (``total_commitment_to_date``
                                                     − ``used_commitment``; 0 when fully used): the
                                                     used part is already in covered rows
SavingsPlanUpfrontFee        Purchase    –           0 (amortized into covered rows)
RIFee                        Purchase    –           unused RI fees (``reservation_unused_amortized_
                                                     upfront_fee_for_billing_period`` +
                                                     ``reservation_unused_recurring_fee``)
Fee                          Purchase    –           0 for an RI upfront fee (it names a
                                                     reservation ARN; amortized into
                                                     DiscountedUsage), else unblended
Credit, *Discount            Credit      –           unblended (negative)
Refund                       Adjustment  –           unblended
Tax                          Tax         –           unblended
===========================  ==========  ==========  =============================================

The Savings Plan trap: a covered row's unblended is the on-demand price, cancelled by a negation;
adding covered effective cost *and* the recurring fee double-counts. Here covered rows carry the
accrual, the fee only the unused part, the negation 0 — Σ effective = Σ billed for a No Upfront
plan. ``list_cost`` = ``pricing_public_on_demand_cost`` (null on a usage line without one; 0 on
other lines without one). Line item types are matched ignoring case, spaces, ``-`` and ``_``. Any
other type is imported as an ``Adjustment`` at its unblended cost (billed = effective, no pricing
model, no GPU-hours) and flagged ``unknown_value``: its money is on the invoice, so dropping it would
leave the ledger short of the bill, and what it is for is not known, so it prices nothing.

``instance_type``: ``product_instance_type``, else the ``product`` map's ``instance_type``, else the
usage type (``BoxUsage:p5.48xlarge``, ``USE2-BoxUsage:…``, ``SpotUsage:…``, ``DedicatedUsage:…``:
the region prefix dropped). ``gpu_count``: the bill's own ``product`` attribute ``gpu`` (CUR 2.0
map key / legacy ``product/gpu``) when it is a whole number, else null (the ingestor's catalog
fills it); ``gpu_hours`` with a count: ``usage_quantity × gpu_count`` on usage lines in hours
(``pricing_unit`` ``Hrs``) except negations, 0 on the GPU instance's other lines — the catalog's
rule (``service.billing.catalog.fill_gpus``). ``line_key`` = ``<identity_line_item_id>:<usage
start, ISO>`` (a line item id repeats across the hours of one resource); a repeated key within a
file is refused. ``resource_id`` = ``line_item_resource_id``; ``region`` =
``product_region_code`` (legacy ``product/region``); ``account`` = ``line_item_usage_account_id``;
``billing_account`` = ``bill_payer_account_id``; ``tags`` = the tag map as canonical JSON (keys
sorted, empty values dropped).

**Bad input** (``connectors.billing_io``: one way of reporting for every parser; docs/billing.md,
"Refuse or flag"). The file is refused (:class:`BillingFileError`, yielded in place of its batch
so the other files go on) for a missing column (``line_item_resource_id``/``lineItem/ResourceId``
included: a CUR without resource ids would import as cost of nothing), an unreadable or truncated
gzip/Parquet file, a non-UTF-8 header, a ZIP without one CSV, a file given as ``path`` whose name is
no report file, a folder naming no billing period. A row is **refused** only when it cannot be
booked, naming file, line and column as the file spells it (and carrying its unblended cost where
that is readable): an unreadable record (cut short by more than its trailing empty field, too long,
an unbalanced quote, non-UTF-8 bytes), an unblended cost that is no number or empty, an unknown
currency, a Savings Plan/RI effective cost that is empty or no number on the line it prices, a usage
start or end that is no timestamp, an end before its start, a usage date outside 2000..2100 or more
than a day outside the billing period (the folder's, else the row's ``bill_billing_period_*``), a
billing period that is no timestamp or no month, a repeated line key. Every other flaw **imports**
the row and counts a finding (rule, column, first lines and values): ``unknown_value`` (line item
type), ``negative_usage`` (a negative usage amount on a usage line: money kept, no GPU-hours),
``missing_value`` (no line item id: keyed ``sha1:`` of the record's fields; no usage amount on a
usage line: quantity and GPU-hours null), ``not_a_number`` (a usage amount, a public on-demand cost
or a commitment column that is not the row's money: read as null), ``invalid_tags`` (a tag map that
is no JSON object: tags dropped); the driver adds ``gpu_hours_over_capacity`` on the file's usage
amount column. Timestamps: ``2025-09-01T00:00:00Z`` and every other ISO form writers of CUR files
use (``2022-07-01 00:00:00.000``, ``2025-09-01 00:00:00+00:00``, no zone = UTC), for usage and
billing period alike.

**Memory.** Columnar (Polars expressions; Python steps per file, chunk, refused row or *distinct*
tag/product map, never per row). A file is streamed, never held whole, by the billing driver
(:mod:`connectors.billing_driver`; this module is its CUR dialect and its S3 plan): an S3 object
is copied to a temporary file block by block (``GetObject``'s body, 1 MiB at a time; every S3
error happens before the file's first batch); ZIP and gzip are undone by magic bytes, whatever the
name, decompressed to a temporary file first — which checks the stream to its end (CRC,
end-of-stream marker), so a truncated or corrupt file is refused before its first batch, never
half imported; a CSV is read in blocks and cut at record ends into chunks of about ``chunk_rows``
records (default 20,000; the mean record length of the first MiB times ``chunk_rows``), each
parsed with the header in front and its line numbers shifted to the file's
(``billing_io.csv_chunks``: the same cuts, refusals and lines as cutting the whole file); a
Parquet file is decoded ``chunk_rows`` records at a time (``billing_io.parquet_chunks``). One
batch per chunk. Memory: about ten times one chunk's text while it is parsed (Polars frames of the
chunk, the checks), the read-ahead block, plus 16 bytes per line for the line-key hashes that find
repeated ids across chunks — independent of the file's size otherwise.
Measured (2 cores, ``bench/billing_import.py --rows 1000000``, a 821 MB CUR
2.0 CSV, parse only): 22 s and 0.46 GB peak RSS at 20,000 rows a chunk, 26 s and 0.72 GB at 50,000
(reading the file whole at 50,000: 28 s and 1.5 GB); gzip'ed (82 MB): 25 s and 0.46 GB at 20,000,
30 s and 0.72 GB at 50,000 (whole: 26 s and 1.8 GB). A tenth of that file (82 MB) peaks at 0.36 GB
at 20,000: what grows with the file is the line-key hashes and allocator slack, not its text.
Since the mapping computes each intermediate once, and what depends on one low-cardinality column
once per distinct value (docs/billing.md, "Where an import's CPU goes"), it costs about 0.45 s
of CPU per 100k lines, a third of what it did; a whole 1 M-line import, 23 s instead of 35 s.

**S3 credentials** as the ``cloudwatch`` connector: the default chain, ``profile``, or static
``aws_access_key_id``/``aws_secret_access_key``; ``role_arn`` (+ ``external_id``) assumed through
STS. botocore's standard retries (``max_retries``, ``timeout_s``) handle throttling and 5xx;
refused credentials and missing ``s3:ListBucket``/``s3:GetObject`` are ``FatalSourceError`` saying
what to do, what still fails after retries a ``RetriableError``.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import polars as pl
from pydantic import Field, SecretStr, field_validator, model_validator

from connectors.billing_driver import Dialect, EveryColumn, OpenedFile, Period, planned_files, read_files
from connectors.billing_io import (
    BLOCK_BYTES,
    LINE,
    Checks,
    Normalized,
    Split,
    any_time,
    by_distinct,
    canonical,
    check_explicit,
    require_columns,
    sane_period,
    sha1_keys,
)
from connectors.billing_stores import LocalTree, S3Prefix
from connectors.cloud import auth_error, permission_error
from connectors.sdk import (
    BILLING_CURRENCIES,
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    ChargeCategory,
    ConfigurationError,
    ConnectorConfig,
    ConnectorError,
    FatalSourceError,
    PricingModel,
    RefusedRow,
    RetriableError,
)

if TYPE_CHECKING:
    import boto3

# boto3 is needed for S3 only: a directory of CUR files imports without the `aws` extra.


def _boto_errors() -> tuple[type[Exception], ...]:
    """botocore's client and transport errors (``except _boto_errors():``; imported when one flies)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


SOURCE = "aws_cur"
PERMISSIONS = "s3:ListBucket and s3:GetObject on the report bucket and prefix"
_AUTH_NEXT_STEP = (
    "check the connector's AWS credentials (profile, access keys or role_arn/external_id) and "
    f"that its identity has {PERMISSIONS}"
)
_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "ServiceUnavailable",
               "InternalError", "RequestTimeout"}  # fmt: skip
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
         "TokenRefreshRequired", "InvalidClientTokenId", "UnrecognizedClientException", "AuthFailure",
         "MissingAuthenticationToken"}  # fmt: skip
_DENIED = {"AccessDenied", "AccessDeniedException", "AllAccessDisabled"}

# ---- line item types → charge category

USAGE, COVERED, NEGATION, DISCOUNTED = (
    "Usage",
    "SavingsPlanCoveredUsage",
    "SavingsPlanNegation",
    "DiscountedUsage",
)
SP_RECURRING, SP_UPFRONT, RI_FEE, FEE = "SavingsPlanRecurringFee", "SavingsPlanUpfrontFee", "RIFee", "Fee"
CREDIT, REFUND, TAX = "Credit", "Refund", "Tax"
DISCOUNTS = ("BundledDiscount", "EdpDiscount", "PrivateRateDiscount", "DistributorDiscount", "Discount",
             "SppDiscount", "SavingsPlanDiscount")  # fmt: skip
CATEGORY: dict[str, str] = {
    USAGE: ChargeCategory.USAGE,
    COVERED: ChargeCategory.USAGE,
    NEGATION: ChargeCategory.USAGE,
    DISCOUNTED: ChargeCategory.USAGE,
    SP_RECURRING: ChargeCategory.PURCHASE,
    SP_UPFRONT: ChargeCategory.PURCHASE,
    RI_FEE: ChargeCategory.PURCHASE,
    FEE: ChargeCategory.PURCHASE,
    CREDIT: ChargeCategory.CREDIT,
    REFUND: ChargeCategory.ADJUSTMENT,
    TAX: ChargeCategory.TAX,
    **{d: ChargeCategory.CREDIT for d in DISCOUNTS},
}
#: Line item types whose usage amount is instance time (never negative).
_USAGE_TYPES = (USAGE, COVERED, DISCOUNTED)

# ---- columns: CUR 2.0 name → legacy spelling (for messages about missing required columns)

REQUIRED = {
    "identity_line_item_id": "identity/LineItemId",
    "line_item_line_item_type": "lineItem/LineItemType",
    "line_item_usage_start_date": "lineItem/UsageStartDate",
    "line_item_usage_end_date": "lineItem/UsageEndDate",
    "line_item_usage_account_id": "lineItem/UsageAccountId",
    "line_item_usage_type": "lineItem/UsageType",
    "line_item_usage_amount": "lineItem/UsageAmount",
    "line_item_currency_code": "lineItem/CurrencyCode",
    "line_item_unblended_cost": "lineItem/UnblendedCost",
    # Without it no line names its instance: the file would import as cost of nothing (a CUR
    # exported without "include resource IDs"), so it is refused, naming the setting's column.
    "line_item_resource_id": "lineItem/ResourceId",
}
OPTIONAL = (
    "bill_payer_account_id",
    "bill_billing_period_start_date",
    "bill_billing_period_end_date",
    "line_item_product_code",
    "line_item_line_item_description",
    "product",
    "product_instance_type",
    "product_region_code",
    "product_region",
    "product_sku",
    "product_gpu",
    "pricing_unit",
    "pricing_public_on_demand_cost",
    "reservation_effective_cost",
    "reservation_reservation_a_r_n",
    "reservation_unused_amortized_upfront_fee_for_billing_period",
    "reservation_unused_recurring_fee",
    "savings_plan_savings_plan_a_r_n",
    "savings_plan_savings_plan_effective_cost",
    "savings_plan_total_commitment_to_date",
    "savings_plan_used_commitment",
    "resource_tags",
)
_PERIOD_COLUMNS = ("bill_billing_period_start_date", "bill_billing_period_end_date")
_TIME_FORMATS = ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%.fZ", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S")
_ISO = "%Y-%m-%dT%H:%M:%SZ"
_INSTANCE_USAGE = r"^(?:BoxUsage|SpotUsage|DedicatedUsage|HostUsage|UnusedBox|UnusedDed|HeavyUsage):"
_REGION_PREFIX = r"^[A-Z]{2,5}[0-9]{0,2}-"
_DATA_SUFFIXES = (".csv", ".csv.gz", ".csv.zip", ".zip", ".parquet", ".gz")
_LEGACY_MANIFEST = re.compile(r"^(?P<dir>(?:.*/)?(?P<s>\d{8})-(?P<e>\d{8})/)[^/]+-Manifest\.json$")
_CUR2_MANIFEST = re.compile(
    r"^(?P<base>(?:.*/)?)metadata/BILLING_PERIOD=(?P<y>\d{4})-(?P<m>\d{2})/[^/]+-Manifest\.json$"
)
_LEGACY_DIR = re.compile(r"(?:^|/)(\d{8})-(\d{8})/")
_CUR2_DIR = re.compile(r"(?:^|/)BILLING_PERIOD=(\d{4})-(\d{2})/")


class AwsCurConfig(BillingConfig):
    """``type = "aws_cur"``: AWS Cost and Usage Report files (CUR 2.0 or legacy).

    * ``path`` (a local directory, read recursively, or one file) or ``s3_uri``
      (``s3://bucket/prefix``): exactly one.
    * S3: ``region`` (the bucket's, default ``us-east-1``), ``endpoint_url`` (a VPC endpoint, a test
      server), credentials — the default chain, ``profile``, or ``aws_access_key_id`` +
      ``aws_secret_access_key`` (secrets); ``role_arn`` (+ ``external_id``,
      ``role_session_name``) assumed through STS; ``max_retries``, ``timeout_s`` (botocore's
      standard retry mode).
    * ``chunk_rows``: records per batch of a large file (memory per chunk: roughly 15-20 KB a record
      of a CUR 2.0 CSV while it is parsed; default 20,000).
    """

    type: str = "aws_cur"
    s3_uri: str | None = Field(None, pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$")
    region: str = "us-east-1"
    endpoint_url: str | None = None
    profile: str | None = None
    role_arn: str | None = None
    external_id: str | None = None
    role_session_name: str = Field("gpu-ledger", min_length=2, max_length=64)
    aws_access_key_id: SecretStr | None = None
    aws_secret_access_key: SecretStr | None = None
    max_retries: int = Field(5, ge=0, le=20)
    timeout_s: float = Field(60.0, gt=0)
    chunk_rows: int = Field(20_000, ge=1)

    @field_validator("region")
    @classmethod
    def _region_name(cls, region: str) -> str:
        if not re.match(r"^[a-z]{2}(-[a-z]+)+-\d+$", region):
            raise ValueError(f"{region!r} is not an AWS region name such as us-east-1")
        return region

    @model_validator(mode="after")
    def _one_source(self) -> AwsCurConfig:
        if (self.path is None) == (self.s3_uri is None):
            raise ValueError("give exactly one of path (a local directory or file) and s3_uri")
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValueError("aws_access_key_id and aws_secret_access_key go together")
        if self.profile is not None and self.aws_access_key_id is not None:
            raise ValueError("give profile or static access keys, not both")
        if self.external_id is not None and self.role_arn is None:
            raise ValueError("external_id needs role_arn")
        return self


@dataclass(frozen=True, slots=True)
class _File:
    key: str
    period_start: dt.datetime | None = None
    period_end: dt.datetime | None = None
    assembly_id: str | None = None


def _day(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y%m%d").replace(tzinfo=dt.UTC)


def _month(year: str, month: str) -> tuple[dt.datetime, dt.datetime]:
    first = dt.datetime(int(year), int(month), 1, tzinfo=dt.UTC)
    return first, (first + dt.timedelta(days=32)).replace(day=1)


def _is_data(key: str) -> bool:
    name = key.rsplit("/", 1)[-1].lower()
    return name.endswith(_DATA_SUFFIXES) and not name.endswith("-manifest.json")


class AwsCurConnector:
    """AWS CUR 2.0 / legacy CUR report files → billing lines; see the module docstring."""

    kind: ClassVar[Literal["billing"]] = "billing"
    type: ClassVar[str] = "aws_cur"
    config_model: ClassVar[builtins.type[ConnectorConfig]] = AwsCurConfig

    def __init__(
        self,
        config: AwsCurConfig,
        *,
        s3_client: Any | None = None,
        session: boto3.Session | None = None,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.config = config
        #: bytes asked of the (decompressed) stream at a time; a chunk is read in such blocks.
        self.block_bytes = block_bytes
        self._client = s3_client
        self._own_client = s3_client is None
        self._session = session

    def close(self) -> None:
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> AwsCurConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the contract

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        """Batches of every current report file whose billing period overlaps ``[start, end)``; a
        file that cannot be read is yielded as its :class:`BillingFileError` (the others go on)."""
        store: LocalTree | S3Prefix
        if self.config.path is not None:
            if not Path(self.config.path).exists():
                raise ConfigurationError(f"{SOURCE}: path {self.config.path!r} does not exist")
            store = LocalTree(self.config.path)
        else:
            store = S3Prefix(
                self.config.s3_uri or "",
                self.s3,
                _boto_errors,
                lambda exc, what: _mapped(exc, what, self.config),
            )
        files = planned_files(
            self._plan(store, start, end), lambda f: store.label(f.key), lambda f: store.open(f.key)
        )
        yield from read_files(
            files, CurDialect(), start, end, chunk_rows=self.config.chunk_rows, block_bytes=self.block_bytes
        )

    # ---- which files

    def _plan(
        self, store: LocalTree | S3Prefix, start: dt.datetime, end: dt.datetime
    ) -> list[_File | BillingFileError]:
        keys = store.keys()
        keyset = set(keys)
        managed: list[str] = []  # folders whose files only a manifest may name
        plan: list[_File | BillingFileError] = []
        for key in keys:
            legacy, cur2 = _LEGACY_MANIFEST.match(key), _CUR2_MANIFEST.match(key)
            try:
                if legacy:
                    folder, lo, hi = legacy["dir"], _day(legacy["s"]), _day(legacy["e"])
                    names_field, id_field = "reportKeys", "assemblyId"
                elif cur2:
                    folder = f"{cur2['base']}data/BILLING_PERIOD={cur2['y']}-{cur2['m']}/"
                    lo, hi = _month(cur2["y"], cur2["m"])
                    names_field, id_field = "dataFiles", "executionId"
                else:
                    continue
                _sane(lo, hi)
            except ValueError as exc:
                plan.append(BillingFileError(store.label(key), f"the folder names no billing period: {exc}"))
                continue
            managed.append(folder)
            if not (lo < end and hi > start):
                continue
            try:
                manifest = json.loads(store.raw(key))
                names = manifest[names_field]
                if not isinstance(names, list):
                    raise TypeError(f"{names_field} is not a list")
            except (ValueError, KeyError, TypeError) as exc:
                plan.append(BillingFileError(store.label(key), f"not a report manifest: {exc!r}"))
                continue
            for name in names:
                found = store.resolve(str(name), keyset)
                if found is None:
                    plan.append(
                        BillingFileError(str(name), f"named by the manifest {store.label(key)} but not found")
                    )
                else:
                    plan.append(_File(found, lo, hi, str(manifest.get(id_field) or "") or None))
        for key in keys:
            if store.explicit and not _is_data(key):
                try:
                    check_explicit(Path(store.label(key)), (".csv", ".parquet"), "CUR")
                except BillingFileError as error:
                    plan.append(error)
                continue
            if not _is_data(key) or any(key.startswith(folder) for folder in managed):
                continue
            try:
                lo_hi = _path_period(key)
                if lo_hi is not None:
                    _sane(*lo_hi)
            except ValueError as exc:
                plan.append(BillingFileError(store.label(key), f"the folder names no billing period: {exc}"))
                continue
            if lo_hi is not None:
                if not (lo_hi[0] < end and lo_hi[1] > start):
                    continue
                plan.append(_File(key, *lo_hi))
            else:
                plan.append(_File(key))
        return plan

    # ---- S3 client

    def s3(self) -> Any:
        if self._client is None:
            cfg = self.config
            from connectors.aws_session import boto_config

            boto = boto_config(cfg)
            session = self._base_session()
            if cfg.role_arn is not None:
                session = self._assume(session, boto)
            self._client = session.client(
                "s3", region_name=cfg.region, endpoint_url=cfg.endpoint_url, config=boto
            )
        return self._client

    def _base_session(self) -> boto3.Session:
        if self._session is None:
            from connectors.aws_session import base_session

            self._session = base_session(self.config, SOURCE)
        return self._session

    def _assume(self, session: boto3.Session, boto: Any) -> boto3.Session:
        from connectors.aws_session import assume_role_request, session_of

        cfg = self.config
        sts = session.client("sts", region_name=cfg.region, endpoint_url=cfg.endpoint_url, config=boto)
        try:
            creds = sts.assume_role(**assume_role_request(cfg))["Credentials"]
        except _boto_errors() as exc:
            raise _mapped(exc, f"sts:AssumeRole {cfg.role_arn}", cfg) from exc
        finally:
            sts.close()
        return session_of(creds)


def _mapped(exc: Exception, what: str, cfg: AwsCurConfig) -> ConnectorError:
    from botocore.exceptions import (
        ClientError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    tries = cfg.max_retries + 1
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        detail = f"{what}: {code}: {exc.response.get('Error', {}).get('Message', '')}"[:300]
        if code in _DENIED or status == 403:
            return permission_error(SOURCE, detail, PERMISSIONS)
        if code in _AUTH:
            return auth_error(SOURCE, detail, _AUTH_NEXT_STEP)
        if code in _THROTTLING or status == 429 or status >= 500:
            return RetriableError(f"{SOURCE}: {detail} (after {tries} tries)")
        if code in ("NoSuchBucket", "NoSuchKey"):
            return ConfigurationError(f"{SOURCE}: {detail}: check s3_uri")
        return FatalSourceError(f"{SOURCE}: {detail}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return auth_error(SOURCE, f"{what}: {exc}", "configure AWS credentials: " + _AUTH_NEXT_STEP)
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return RetriableError(f"{SOURCE}: {what}: {exc} (after {tries} tries)")
    return FatalSourceError(f"{SOURCE}: {what}: {type(exc).__name__}: {exc}")


def _sane(lo: dt.datetime, hi: dt.datetime) -> None:
    """A folder's period must be one (``sane_period``): ``00010101-99991231`` would make the import
    replace and re-price every hour between."""
    if not pl.select(sane_period(pl.lit(lo), pl.lit(hi))).item():
        raise ValueError(f"{lo:%Y-%m-%d}..{hi:%Y-%m-%d} is not a month within 2000..2100")


def _path_period(key: str) -> tuple[dt.datetime, dt.datetime] | None:
    if m := _CUR2_DIR.search(key):
        return _month(m[1], m[2])
    if m := _LEGACY_DIR.search(key):
        return _day(m[1]), _day(m[2])
    return None


# ---- the dialect: what a CUR file holds


class CurDialect(Dialect):
    """CUR 2.0 and legacy CUR for the billing driver: the header layout (and its required
    columns), the billing period of a file its path does not name, the mapping of a chunk."""

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        return _parquet_text(frame)

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _CurFile:
        layout = _Layout(opened.columns, opened.label)
        if period is None:
            lo, hi = _content_period(first, layout)
            period = None if lo is None or hi is None else (lo, hi)
        return _CurFile(opened.label, layout, period, opened.columns)


class _CurFile:
    def __init__(self, file: str, layout: _Layout, period: Period | None, columns: list[str]) -> None:
        self.file, self.layout, self.period = file, layout, period
        #: the usage amount as the file spells it: the driver names it in GPU-hour findings
        self.quantity_column = layout.spelled("line_item_usage_amount")
        self._columns = set(columns)
        #: the columns the mapping reads (the driver parses CSV chunks with only these): a CUR 2.0
        #: file has 60 or more, the mapping reads 28
        self.read_columns = layout.read_columns()

    def normalize(self, chunk: pl.DataFrame) -> Normalized:
        split = _normalize(chunk, self.layout, self.file, self.period or (None, None))
        if not self._columns <= set(chunk.columns) and (
            split.refused or split.rows["line_key"].str.starts_with("sha1:").any()
        ):
            # a refused row's raw text, and the key of a row without a line item id, are made of
            # every column of its record (a line item id starting "sha1:" only costs the re-parse)
            raise EveryColumn
        return split

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        column = self.layout.spelled("identity_line_item_id")
        if key.startswith("sha1:"):  # a record without a line item id, keyed by its fields
            return RefusedRow(self.file, line, None, f"duplicated line: the same as line {first}", key)
        return RefusedRow(self.file, line, column, f"repeated line item id and usage start: {key!r}", key)

    def finish(self, read: int, accepted: int, refused: int) -> None:
        """Nothing to log: the ingestor records the run's counts."""


# ---- header layouts


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower().lstrip("_")


class _Layout:
    """The file's header: CUR 2.0 name → the column as the file spells it, and the tag columns."""

    def __init__(self, columns: list[str], file: str) -> None:
        self.legacy = any("/" in c for c in columns)
        self.names: dict[str, str] = {}
        self.tags: dict[str, str] = {}  # column → tag key
        for column in columns:
            if column == LINE:
                continue
            if self.legacy and "/" in column:
                category, _, name = column.partition("/")
                if category == "resourceTags":
                    self.tags[column] = name
                    continue
                self.names.setdefault(f"{_snake(category)}_{_snake(name)}", column)
            elif column.startswith("resource_tags_"):
                self.tags[column] = column.removeprefix("resource_tags_")  # legacy Parquet/Athena
            else:
                self.names.setdefault(column, column)
        missing = [c for c in REQUIRED if c not in self.names]
        if missing:
            spelled = [REQUIRED[c] if self.legacy else c for c in missing]
            require_columns(pl.DataFrame(schema=dict.fromkeys(columns, pl.String)), file, spelled)

    def col(self, name: str) -> pl.Expr:
        return pl.col(self.names[name]) if name in self.names else pl.lit(None, dtype=pl.String)

    def read_columns(self) -> list[str]:
        """The file's columns the mapping reads (as the file spells them): the required and
        optional ones it has, and the legacy per-tag columns."""
        mapped = [self.names[c] for c in (*REQUIRED, *OPTIONAL) if c in self.names]
        return [*mapped, *self.tags]

    def spelled(self, name: str) -> str:
        return self.names.get(name, REQUIRED.get(name, name) if self.legacy else name)


def _text(expr: pl.Expr) -> pl.Expr:
    """Trimmed text, null when empty."""
    trimmed = expr.str.strip_chars()
    return pl.when(trimmed != "").then(trimmed)


def _content_period(chunk: pl.DataFrame, layout: _Layout) -> tuple[dt.datetime | None, dt.datetime | None]:
    """A plain file's billing period, from its bill columns (one period per CUR file)."""
    if (
        "bill_billing_period_start_date" not in layout.names
        or "bill_billing_period_end_date" not in layout.names
    ):
        return None, None
    parsed = chunk.select(
        *(
            _time(_text(layout.col(c))).alias(c)
            for c in ("bill_billing_period_start_date", "bill_billing_period_end_date")
        )
    )
    # only bounds that can be a billing period: a row naming 0001..9999 is refused, and must not
    # widen what the import replaces and re-prices
    parsed = parsed.filter(sane_period(pl.col(_PERIOD_COLUMNS[0]), pl.col(_PERIOD_COLUMNS[1])))
    lo, hi = parsed["bill_billing_period_start_date"].min(), parsed["bill_billing_period_end_date"].max()
    if not isinstance(lo, dt.datetime) or not isinstance(hi, dt.datetime):
        return None, None
    return lo, hi


# ---- Parquet: typed columns → the text a CSV export holds


def _parquet_text(frame: pl.DataFrame) -> pl.DataFrame:
    """Every column as text: maps (``list<struct<key, value>>``) and structs as JSON objects,
    times as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC), numbers in their shortest exact text."""
    exprs = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if name == LINE or dtype == pl.String:
            continue
        if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct):
            pairs = column.list.eval(pl.element().struct.json_encode()).list.join(",")
            exprs.append(("[" + pairs + "]").alias(name))
        elif isinstance(dtype, pl.Struct):
            exprs.append(column.struct.json_encode().alias(name))
        elif isinstance(dtype, pl.Datetime):
            utc = column.dt.convert_time_zone("UTC") if dtype.time_zone else column
            exprs.append(utc.dt.strftime(_ISO).alias(name))
        elif isinstance(dtype, pl.Date):
            exprs.append(column.dt.strftime("%Y-%m-%d").alias(name))
        else:
            exprs.append(column.cast(pl.String).alias(name))
    return frame.with_columns(exprs) if exprs else frame


# ---- tags: canonical JSON text, one Python step per distinct map


def _canonical_tags(texts: pl.Series) -> dict[str, str | None]:
    """Distinct tag texts → canonical JSON (``None``: not a JSON object). Accepts a JSON object
    and the key/value pair list a Parquet map becomes; drops null and empty values."""
    out: dict[str, str | None] = {}
    for text in texts.drop_nulls().unique().to_list():
        try:
            value = json.loads(text) if text.strip() else {}
        except ValueError:
            out[text] = None
            continue
        if isinstance(value, list) and all(isinstance(p, dict) and "key" in p for p in value):
            value = {p["key"]: p.get("value") for p in value}
        if not isinstance(value, dict):
            out[text] = None
            continue
        kept = {str(k): str(v) for k, v in sorted(value.items()) if v is not None and v != ""}
        out[text] = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    return out


# ---- one chunk → billing lines

#: Money columns that make the effective cost of some line item types (and of no other): an
#: unreadable value refuses those rows only; on any other row it is a finding.
_EFFECTIVE_INPUTS: dict[str, tuple[str, ...]] = {
    "reservation_effective_cost": (DISCOUNTED,),
    "reservation_unused_amortized_upfront_fee_for_billing_period": (RI_FEE,),
    "reservation_unused_recurring_fee": (RI_FEE,),
    "savings_plan_savings_plan_effective_cost": (COVERED,),
    "savings_plan_total_commitment_to_date": (SP_RECURRING,),
    "savings_plan_used_commitment": (SP_RECURRING,),
}


def _time(text: pl.Expr) -> pl.Expr:
    """A CUR timestamp in any form it is written (``_TIME_FORMATS`` first, then every ISO form:
    ``2022-07-01 00:00:00.000``, ``2025-09-01 00:00:00+00:00``…), as UTC."""
    return any_time(text, _TIME_FORMATS)


def _number(text: pl.Expr) -> pl.Expr:
    """Decimal money from its text (exponent forms exact); null when it is none."""
    return text.str.strip_chars().cast(MONEY, strict=False)  # Polars reads 3.2E-05 exactly


def _kind(text: pl.Expr) -> pl.Expr:
    """The line item type as AWS spells it (matched ignoring case, spaces, ``-`` and ``_``); null
    when it is none AWS documents."""
    return canonical(text, CATEGORY)


def _optional_number(checks: Checks, column: str, refuse: pl.Expr | None) -> pl.Expr:
    """``column`` as Decimal, empty (or ``NaN``) = null. Text that is no number refuses the row where
    ``refuse`` holds (the row's money is made of it); elsewhere the row is kept, the value null, and
    the finding ``not_a_number`` counted."""
    text = pl.col(column).str.strip_chars()
    # the trimmed text is computed once (a column), not again in each rule that reads it
    text = checks.value(pl.when(text.is_in(["NaN", "nan", "NAN"])).then(pl.lit("")).otherwise(text))
    value = checks.value(_number(text))
    bad = (text != "") & text.is_not_null() & value.is_null()
    kept = bad
    if refuse is not None:
        checks.add(column, "not a number", bad & refuse)
        kept = bad & ~refuse
    checks.flag(column, "not_a_number", "not a number: read as no value", kept)
    return value


def _with_keys(good: pl.DataFrame, line_id: pl.Expr, columns: list[str]) -> pl.DataFrame:
    """``good`` with ``_key``: ``<line item id>:<usage start>``; a row without a line item id is
    keyed by ``sha1:`` of its fields (the same record gives the same key in every import, and a
    record repeated in the file is still refused as a duplicate). Python per such row only."""
    # the start as text once per distinct hour (strftime per row was a tenth of the mapping's time)
    keyed = by_distinct(good, "_start", {"_start_text": pl.col("_start").dt.strftime(_ISO)})
    keyed = keyed.with_columns((line_id + ":" + pl.col("_start_text")).alias("_key")).drop("_start_text")
    without = keyed.filter(pl.col("_key").is_null())
    if without.is_empty():
        return keyed
    content = without.select(pl.struct(columns).struct.json_encode()).to_series()
    keys = pl.DataFrame({LINE: without[LINE], "_content_key": sha1_keys(content)})
    keyed = keyed.join(keys, on=LINE, how="left", maintain_order="left")
    return keyed.with_columns(pl.coalesce("_key", "_content_key").alias("_key")).drop("_content_key")


def _normalize(
    frame: pl.DataFrame,
    layout: _Layout,
    file: str,
    period: tuple[dt.datetime | None, dt.datetime | None] = (None, None),
) -> Normalized:
    """A text chunk → (normalized lines, refused rows, findings); a repeated line key is the
    driver's to refuse.
    ``period``: the file's billing period when its path or manifest names one; else each row's
    ``bill_billing_period_*`` bounds its usage dates."""
    file_columns = [x for x in frame.columns if x != LINE]
    for optional in OPTIONAL:  # absent optional columns: null text under their CUR 2.0 name
        if optional not in layout.names and optional not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(optional))
    names = {**{c: c for c in OPTIONAL}, **layout.names}
    c = pl.col
    n = names.__getitem__

    checks = Checks(file, money=_number(c(n("line_item_unblended_cost"))), provider=pl.lit("aws"))
    kind_column = n("line_item_line_item_type")
    # A function of the column alone, with a handful of values: computed once per distinct type and
    # read as a column by every rule and mapping below (each inline copy cost a regex pass per row).
    kind = checks.value(_kind(c(kind_column)), of=kind_column)
    checks.flag(
        kind_column,
        "unknown_value",
        "unknown line item type: booked as an adjustment at its unblended cost",
        kind.is_null(),
    )
    line_id = n("identity_line_item_id")
    checks.flag(
        line_id,
        "missing_value",
        "empty line item id: keyed by the record's content",
        _text(c(line_id)).is_null(),
    )
    start = checks.timestamp(n("line_item_usage_start_date"), *_TIME_FORMATS)
    end = checks.timestamp(n("line_item_usage_end_date"), *_TIME_FORMATS)
    checks.add(n("line_item_usage_end_date"), "usage end before its start", end < start)
    checks.dates(n("line_item_usage_start_date"), start, n("line_item_usage_end_date"), end)
    has_period = all(c in layout.names for c in _PERIOD_COLUMNS)
    row_lo, row_hi = (checks.timestamp(n(c), *_TIME_FORMATS, required=has_period) for c in _PERIOD_COLUMNS)
    checks.period(n(_PERIOD_COLUMNS[0]), row_lo, row_hi)
    if period[0] is not None and period[1] is not None:
        bounds = (pl.lit(period[0]).cast(UTC_TIME), pl.lit(period[1]).cast(UTC_TIME))
        what = f"the file's billing period {period[0]:%Y-%m-%d}..{period[1]:%Y-%m-%d}"
    else:
        bounds, what = (row_lo, row_hi), "the row's billing period"
    checks.within(n("line_item_usage_start_date"), start, n("line_item_usage_end_date"), end, bounds, what)
    # The usage amount is no money: an unreadable one leaves the line without a quantity (and GPU-hours).
    amount = _optional_number(checks, n("line_item_usage_amount"), None)
    usage_line = kind.is_in(_USAGE_TYPES).fill_null(False)
    checks.flag(
        n("line_item_usage_amount"),
        "missing_value",
        "empty usage amount on a usage line",
        usage_line & _text(c(n("line_item_usage_amount"))).is_null(),
    )
    checks.flag(
        n("line_item_usage_amount"),
        "negative_usage",
        "negative usage amount on a usage line",
        usage_line & (amount < 0),
    )
    currency = checks.currency(n("line_item_currency_code"), BILLING_CURRENCIES)
    unblended = checks.decimal(n("line_item_unblended_cost"))
    public = _optional_number(checks, n("pricing_public_on_demand_cost"), None)
    money: dict[str, pl.Expr] = {
        # a row whose effective cost is made of the column cannot be booked without it
        column: _optional_number(checks, n(column), kind.is_in(used_by).fill_null(False))
        for column, used_by in _EFFECTIVE_INPUTS.items()
    }
    for needed, when in (
        ("savings_plan_savings_plan_effective_cost", COVERED),
        ("reservation_effective_cost", DISCOUNTED),
    ):
        checks.add(
            n(needed),
            f"empty where a number is required on a {when} line",
            (kind == when) & _text(c(n(needed))).is_null(),
        )
    # Tags: a CUR 2.0 map column (JSON text), or legacy one-column-per-tag.
    if layout.tags:
        tag_text = pl.struct(
            [_text(c(col_)).alias(key) for col_, key in layout.tags.items()]
        ).struct.json_encode()
        tag_column = None
    else:
        tag_text = c(n("resource_tags"))
        tag_column = n("resource_tags")
    distinct = _canonical_tags(frame.select(tag_text.alias("t")).to_series())
    tags = tag_text.replace_strict(
        {k: v for k, v in distinct.items() if v is not None}, default=None, return_dtype=pl.String
    ).fill_null("{}")
    if tag_column is not None:
        bad_tags = [k for k, v in distinct.items() if v is None]
        checks.flag(
            tag_column,
            "invalid_tags",
            "not a JSON object of tags: tags dropped",
            c(tag_column).is_in(bad_tags),
        )

    parsed = {
        "_start": start,
        "_end": end,
        "_amount": amount,
        "_currency": currency,
        "_unblended": unblended,
        "_public": public,
        "_tags": tags,
        "_kind": kind,
        **{f"_{k}": v for k, v in money.items()},
    }
    good, refused, findings = checks.split(frame, parsed)
    return Split(_lines(good, layout, file, file_columns, kind_column), refused, findings)


def _lines(
    good: pl.DataFrame, layout: _Layout, file: str, file_columns: list[str], kind_column: str
) -> pl.DataFrame:
    """The rows that passed the checks (``_kind``, ``_start``… computed) → billing lines.

    Every intermediate a mapping reads more than once is a column first (computed once), and what
    depends on one low-cardinality column (usage type, product map) once per distinct value."""
    col = layout.col
    c = pl.col
    kind = c("_kind")
    usage_name = layout.names.get("line_item_usage_type", "line_item_usage_type")
    product_name = layout.names.get("product", "product")
    usage_type = _text(c(usage_name))
    base_type = usage_type.str.replace(_REGION_PREFIX, "")
    good = by_distinct(
        good,
        usage_name,
        {
            "_from_usage": base_type.str.extract(_INSTANCE_USAGE + r"([a-z0-9][a-z0-9\-]*\.[a-z0-9\-]+)$", 1),
            "_spot": base_type.str.starts_with("SpotUsage:"),
        },
    )
    from_usage, spot = c("_from_usage"), c("_spot")
    # The product map as a JSON object (a Parquet map arrives as key/value pairs); its fields are
    # read once per distinct map (every value of a canonical map is text).
    product_text = good.select(c(product_name).alias("p")).to_series()
    products = {k: json.loads(v) for k, v in _canonical_tags(product_text).items() if v is not None}

    def product_field(key: str) -> pl.Expr:
        values = {text: fields[key] for text, fields in products.items() if key in fields}
        return c(product_name).replace_strict(values, default=None, return_dtype=pl.String)

    good = good.with_columns(
        pl.coalesce(
            _text(col("product_instance_type")),
            product_field("instance_type"),
            from_usage,
        ).alias("_instance_type"),
        pl.coalesce(_text(col("product_gpu")), product_field("gpu"))
        .cast(pl.Int32, strict=False)
        .alias("_gpus"),
    )
    instance_type, gpus = c("_instance_type"), c("_gpus")
    good = good.with_columns(pl.when(instance_type.is_not_null() & (gpus > 0)).then(gpus).alias("_gpu_count"))
    gpu_count = c("_gpu_count")
    # an unknown line item type is booked as an adjustment: its money is on the invoice, and its
    # meaning (usage? a fee?) is not known, so it prices no GPU-hour and no commitment
    category = kind.replace_strict(CATEGORY, default=None, return_dtype=pl.String).fill_null(
        ChargeCategory.ADJUSTMENT.value
    )
    pricing = (
        pl.when((kind == USAGE) & spot.fill_null(False))
        .then(pl.lit(PricingModel.SPOT.value))
        .when(kind == USAGE)
        .then(pl.lit(PricingModel.ON_DEMAND.value))
        .when(kind.is_in([COVERED, NEGATION, DISCOUNTED]))
        .then(pl.lit(PricingModel.COMMITMENT.value))
    )
    zero = pl.lit(0).cast(MONEY)
    sp_unused = (c("_savings_plan_total_commitment_to_date") - c("_savings_plan_used_commitment")).fill_null(
        zero
    )
    ri_unused = c("_reservation_unused_amortized_upfront_fee_for_billing_period").fill_null(zero) + c(
        "_reservation_unused_recurring_fee"
    ).fill_null(zero)
    ri_arn = _text(col("reservation_reservation_a_r_n"))
    effective = (
        pl.when(kind == COVERED)
        .then(c("_savings_plan_savings_plan_effective_cost"))
        .when(kind == DISCOUNTED)
        .then(c("_reservation_effective_cost"))
        .when(kind.is_in([NEGATION, SP_UPFRONT]))
        .then(zero)
        .when(kind == SP_RECURRING)
        .then(sp_unused)
        .when(kind == RI_FEE)
        .then(ri_unused)
        .when((kind == FEE) & ri_arn.is_not_null())
        .then(zero)
        .otherwise(c("_unblended"))
        .cast(MONEY)
    )
    usage_line = kind.is_in(_USAGE_TYPES).fill_null(False)
    listed = pl.when(c("_public").is_not_null()).then(c("_public")).when(~usage_line).then(zero).cast(MONEY)
    unit = _text(col("pricing_unit"))
    in_hours = unit.str.to_lowercase().is_in(["hrs", "hr", "hours", "hour"]).fill_null(False)
    instance_time = ((category == ChargeCategory.USAGE.value) & in_hours & (kind != NEGATION)).fill_null(
        False
    )
    gpu_hours = (
        pl.when(gpu_count.is_null() | (instance_time & c("_amount").is_null()))
        .then(pl.lit(None, dtype=MONEY))  # not known: no count, or no readable amount
        .when(instance_time & (c("_amount") >= 0))  # a negative amount (flagged) bills no GPU-hours
        .then(c("_amount") * gpu_count)
        .otherwise(zero)
        .cast(MONEY)
    )
    good = _with_keys(good, _text(col("identity_line_item_id")), file_columns)
    lines = good.select(
        pl.lit(file).alias("source_file"),
        c(LINE).alias("line_no"),
        c("_key").alias("line_key"),
        pl.lit("aws").alias("provider"),
        _text(col("bill_payer_account_id")).alias("billing_account"),
        _text(col("line_item_usage_account_id")).alias("account"),
        c("_start").alias("charge_start"),
        c("_end").alias("charge_end"),
        category.alias("charge_category"),
        pl.coalesce(kind, _text(c(kind_column))).alias("charge_type"),
        pricing.alias("pricing_model"),
        pl.coalesce(_text(col("savings_plan_savings_plan_a_r_n")), ri_arn).alias("commitment_id"),
        _text(col("line_item_resource_id")).alias("resource_id"),
        _text(col("line_item_product_code")).alias("service"),
        _text(col("product_sku")).alias("sku"),
        _text(col("line_item_line_item_description")).alias("sku_description"),
        instance_type.alias("instance_type"),
        pl.coalesce(_text(col("product_region_code")), _text(col("product_region"))).alias("region"),
        c("_amount").alias("usage_quantity"),
        unit.alias("usage_unit"),
        gpu_count.alias("gpu_count"),
        gpu_hours.alias("gpu_hours"),
        c("_unblended").alias("billed_cost"),
        effective.alias("effective_cost"),
        listed.alias("list_cost"),
        c("_currency").alias("currency"),
        c("_tags").alias("tags"),
    )
    return lines
