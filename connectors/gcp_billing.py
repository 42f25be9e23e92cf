"""``gcp_billing``: the Google Cloud Billing export to BigQuery, from exported files or BigQuery.

Sources (exactly one):

* ``path``: a local directory (read recursively) or file holding the standard or resource-level
  (detailed) export table as BigQuery writes it out: JSON Lines with the nested records
  (``service{id,description}``, ``sku``, ``project``, ``labels[]``, ``system_labels[]``,
  ``location``, ``resource``, ``usage``, ``credits[]``, ``invoice``), Parquet with the same nested
  columns, or a flat CSV (a query's output or a tool's: ``service.id`` / ``service_id`` style names;
  every nested column as text in a cell — ``credits`` / ``credits_json``, ``labels`` /
  ``labels_json``, ``system_labels`` / ``system_labels_json``, a whole record such as ``resource``
  or ``usage`` — written as JSON or, as pandas and koku-nise write them, as a Python literal
  (``[{'amount': -3.2e-05, 'full_name': None}]``): :func:`from_flat`). ``.gz`` is undone whatever
  the name.
* ``bigquery_table``: the export table itself, queried with ``google-cloud-bigquery`` (the ``gcp``
  extra); see :meth:`GcpBillingConnector.read_bigquery` for the query, money, keys and
  re-exported rows. Its rows are mapped to the same nested records as a JSONL export, so both
  paths share every normalization below.

Mapping decisions (docs/formats.md §5.2, docs/design.md §4):

* Money: JSON numbers are read as their own text (``json.loads(parse_float=str)``), CSV cells are
  text, and both become ``Decimal(38, 9)`` without a binary float. Parquet stores IEEE doubles:
  those are rendered to their shortest text first (the export itself is the float then).
* ``billed_cost`` = ``effective_cost`` = ``cost + Σ credits[].amount`` (credits are negative and
  reduce the invoice); ``list_cost`` = ``cost_at_list`` when present, else ``cost`` (gross, before
  credits). Credits per type are kept in ``tags`` as ``"gcp:credit:<TYPE>": "<sum>"``, the
  project's labels (``project.labels``) as ``"gcp:project_label:<key>"`` after the resource's own
  ``labels`` (service.billing.tags makes them ``cloud.project_label:<key>`` facts).
* GCE bills a GPU VM as separate SKU rows (GPU, core, RAM, local SSD), tied by
  ``resource.global_name``. A GPU SKU row (``…GPU…`` in the SKU description) has
  ``is_gpu_sku = true`` and ``gpu_hours`` = its usage in hours (``amount_in_pricing_units`` when
  the pricing unit is ``hour``, else ``usage.amount`` seconds / 3600); ``gpu_count`` = GPU-hours
  per hour of the row's window when that is a whole number. The resource's other rows get
  ``is_gpu_sku = false``, ``gpu_hours = 0`` (they bill no GPU-hours: a catalog must not multiply
  208 core-hours by 8 GPUs) and the resource's ``gpu_count``.
* ``resource_id`` = the numeric instance id ending ``resource.global_name``
  (``…/instances/<id>``), which joins the Monitoring ``instance_id``; another resource keeps its
  global name; ``resource_name`` = ``resource.name``.
* ``instance_type`` = the ``compute.googleapis.com/machine_spec`` system label; without it the
  family from a core/RAM SKU of the same resource (``A3 Instance Core …`` → ``a3``), which names no
  GPU count (the catalog will not know it: reported, never priced at 0).
* ``cost_type`` regular → Usage (a ``Commitment …`` SKU → Purchase), tax → Tax, adjustment and
  rounding error → Adjustment (matched ignoring case, ``_`` and spaces; empty or absent, as in
  exports older than the column: regular). Any other value is booked as Adjustment — the money is
  the invoice's, but a charge the export does not call usage must not feed GPU-hour rates — and
  counted as finding ``unknown_value``. Pricing: ``Spot``/``Preemptible`` SKUs → spot, a
  committed-use credit → commitment, else on demand.
* Refused (the row cannot be booked): ``cost`` or a credit amount (or ``credits_total``) that is
  not a number, credits that cannot be decoded (the effective cost would be wrong), an unknown
  currency, a usage period that cannot be read or cannot be one (end not after start, outside
  2000..2100, outside its invoice month by more than a day), an invoice month that is not
  ``YYYYMM``. Imported with a finding: negative usage on a regular row (``negative_usage``), a
  usage amount or ``cost_at_list`` that is not a number (``unreadable_number``: no quantity, or
  the list cost is the cost), labels, system labels or a record cell that cannot be decoded
  (``unreadable_json``: dropped). Refusals and findings name the column as the file spells it.
* ``line_key``: the export has no row id, so it is ``sha1:`` + the SHA-1 of the raw line (JSONL,
  CSV) or of the record's JSON (Parquet). Polars' own hash is not stable across versions, so
  hashlib runs once per line; a line seen twice in a chunk is refused as a duplicate (a repeat in
  another chunk of the file is refused by the ingestor, which checks keys against the database).

Memory: a file is streamed in batches of ``chunk_rows`` records by the billing driver
(:mod:`connectors.billing_driver`; this module is its GCP export dialect): gzip and a ZIP of one
export are decompressed to a temporary file first (checked to their end), JSON Lines cut at line
ends (``billing_io.jsonl_chunks``), CSV by ``billing_io.csv_chunks`` (RFC 4180 records; keys
hashed from each record's raw bytes), Parquet by ``billing_io.parquet_chunks``. Every batch of a
file has its ``source_file`` and no period (daily files must not replace each other: the ingestor
replaces a file's old lines once, when the run first meets it, and appends its later batches). A
file is read twice: first for the facts its lines take from the whole file (per resource: a GPU
SKU row, the GPU count, the machine type — one row per resource), whether a good line is in the
window and its required fields; so its lines equal those of reading it whole, and it fails before
its first batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import polars as pl
from pydantic import Field, model_validator

from connectors.billing_driver import (
    Dialect,
    Format,
    OpenedFile,
    Period,
    SkipFile,
    capacity_findings,
    read_file,
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
    json_text,
    refuse_duplicates,
    require_columns,
    sha1_keys,
    zip_member_name,
)
from connectors.billing_stores import local_file
from connectors.gcp_bigquery import (
    BIGQUERY_SCOPE,
    BQ_COLUMNS,
    CONNECTOR_ERRORS,
    PROJECT,
    TABLE,
    bigquery_error,
    bigquery_module,
    bigquery_record,
    build_query,
    iso,
    retriable,
    table_parts,
)
from connectors.gcp_flat import (
    CREDITS,
    JSON_CELLS,
    LABELS,
    NESTED,
    PROJECT_LABEL_TAG,
    RECORD_CELLS,
    REQUIRED,
    from_flat,
    machine_spec,
    no_global_name,
)
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
    merge_findings,
)

_D18 = pl.Decimal(38, 18)  # products and quotients are taken at 18 decimals, then rounded to 9
# tried first (the forms BigQuery writes), then every ISO 8601 form (billing_io.flexible_time):
# koku-nise's ``2025-09-01T00:00:00`` (no zone: UTC), pandas' ``2020-11-09 23:00:00+00:00``, …
_TIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S%.f UTC",  # BigQuery's JSON and CSV rendering
    "%Y-%m-%d %H:%M:%S%.f%:z",  # a Parquet TIMESTAMP cast to text
)
_CATEGORY = {
    "regular": ChargeCategory.USAGE,
    "tax": ChargeCategory.TAX,
    "adjustment": ChargeCategory.ADJUSTMENT,
    "rounding error": ChargeCategory.ADJUSTMENT,
}
_SUFFIXES: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}


def _struct(*names: str) -> pl.Struct:
    return pl.Struct({n: pl.String() for n in names})


# the nested frame a query's rows become: the JSONL export's shape, every leaf text
_BQ_FRAME: dict[str, pl.DataType] = {
    LINE: pl.Int64(),
    **{
        c: (LABELS if c in ("labels", "system_labels") else _struct(*f) if f else pl.String())
        for c, f in BQ_COLUMNS.items()
    },
    "credits": CREDITS,
    "project_labels": LABELS,
}


class GcpBillingConfig(BillingConfig):
    """Exactly one source:

    * ``path``: a directory (read recursively) or a file of the BigQuery billing export
      (``.jsonl``/``.json``/``.ndjson``, ``.csv``, ``.parquet``, each optionally ``.gz``);
    * ``bigquery_table``: ``project.dataset.gcp_billing_export[_resource]_v1_<ACCOUNT>``, read
      with a query. ``bigquery_project``: the project that runs (and pays for) the query, default
      the table's; ``credentials_file``: a service-account key file, else Application Default
      Credentials; ``api_endpoint``: another BigQuery endpoint (tests, Private Service Connect);
      ``page_size``: rows per page, one batch each (bounds memory); ``max_retries``,
      ``backoff_s``, ``timeout_s``: about ``max_retries`` retries of throttling/5xx with
      exponential backoff from ``backoff_s`` (the client's deadline-based retry: the deadline is
      ``timeout_s`` plus the backoffs), ``timeout_s`` per request.

    ``chunk_rows``: records per batch of an exported file (a large file is streamed in chunks of
    this many records; default 20,000).
    """

    type: Literal["gcp_billing"] = "gcp_billing"
    bigquery_table: str | None = None
    bigquery_project: str | None = None
    credentials_file: str | None = None
    api_endpoint: str | None = None
    page_size: int = Field(5000, ge=1, le=100_000)
    max_retries: int = Field(5, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0)
    timeout_s: float = Field(60.0, gt=0)
    chunk_rows: int = Field(20_000, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> GcpBillingConfig:
        if self.path and self.bigquery_table:
            raise ValueError('"path" and "bigquery_table" are exclusive: name one source')
        if not self.path and not self.bigquery_table:
            raise ValueError(
                '"path" (the directory or file of the exported billing table) or "bigquery_table" is required'
            )
        if self.bigquery_table is not None and not TABLE.fullmatch(self.bigquery_table):
            raise ValueError(f'"bigquery_table" must be "project.dataset.table", not {self.bigquery_table!r}')
        if self.bigquery_project is not None and not PROJECT.fullmatch(self.bigquery_project):
            raise ValueError(f'"bigquery_project" is not a project id: {self.bigquery_project!r}')
        bigquery_only = ("bigquery_project", "credentials_file", "api_endpoint")
        stray = [k for k in bigquery_only if getattr(self, k) is not None and not self.bigquery_table]
        if stray:
            raise ValueError(f'"{stray[0]}" applies to "bigquery_table" only')
        return self


class GcpBillingConnector:
    """Reads the GCP billing export: one :class:`BillingBatch` per chunk of a file, or per page of a
    query."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[GcpBillingConfig]] = GcpBillingConfig

    def __init__(
        self,
        config: GcpBillingConfig,
        *,
        client: Any = None,
        credentials: Any = None,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        """``client``: a ``google.cloud.bigquery.Client`` to use (not closed here); ``credentials``:
        ``google.auth`` credentials for the client built from the config (tests pass
        ``AnonymousCredentials`` with ``api_endpoint``); ``block_bytes``: bytes asked of a
        (decompressed) file at a time."""
        self.config = config
        self.block_bytes = block_bytes
        self._client, self._credentials, self._own_client = client, credentials, client is None

    def files(self) -> list[Path]:
        return export_files(Path(str(self.config.path)), _SUFFIXES)

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        """Batches of the files with a line charged in ``[start, end)`` (or with no good line:
        their refusals must be seen), one per chunk of ``chunk_rows`` records. A whole unreadable
        file is a yielded :class:`BillingFileError`, before any of its batches; the next file
        follows. With ``bigquery_table``: :meth:`read_bigquery`."""
        if self.config.bigquery_table:
            return self.read_bigquery(start, end)
        files = [local_file(path) for path in self.files()]
        dialect = GcpExportDialect(self.config.chunk_rows, (start, end))
        return read_files(
            iter(files),
            dialect,
            start,
            end,
            chunk_rows=self.config.chunk_rows,
            block_bytes=self.block_bytes,
        )

    def read_file(self, path: Path, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        """One file's batches (none when no good line is charged in ``[start, end)``).

        A file is read twice: first for what its normalization needs from the whole file — the
        facts per resource (:func:`resource_facts`: its GPU SKU rows, GPU count, machine type; a
        table of resources, not rows), whether a good line falls in the window, that the required
        columns are there — then chunk by chunk into batches joined with those facts. So the lines
        are those of reading the file whole, and a file that fails does so before its first batch.
        """
        dialect = GcpExportDialect(self.config.chunk_rows, (start, end))
        yield from read_file(
            local_file(path),
            dialect,
            start,
            end,
            chunk_rows=self.config.chunk_rows,
            block_bytes=self.block_bytes,
        )

    # --- BigQuery --------------------------------------------------------------------------------

    def read_bigquery(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        """The export table's rows whose usage starts in ``[start, end)``, one batch per page.

        **The query.** One standard-SQL query, the window as ``TIMESTAMP`` parameters ``@start``
        and ``@end`` (no user value is formatted into the SQL; the table name, checked against
        ``project.dataset.table`` by the config, is backquoted). It selects only the columns the
        normalization reads (BigQuery bills by the columns scanned), picked from the table's
        schema (``tables.get`` first: the standard export has no ``resource``, older tables no
        ``cost_at_list``), and the rows with ``usage_start_time >= @start AND usage_start_time <
        @end`` — the same scope in which the ingestor replaces lines (``charge_start`` in the
        batch's period), so adjacent windows neither miss nor read twice a row that straddles
        their boundary. The export is partitioned by export day (``_PARTITIONTIME``, or a
        partitioning column): a row is exported after its usage, so ``partition >= @start − 1
        day`` prunes every older partition without losing a row (one day of margin for the
        partition's day boundary); later partitions are read, they hold late and corrected rows.

        **Re-exported rows.** The export has no row id and never rewrites a row: late usage and
        corrections arrive as *more* rows (later ``export_time``) whose costs add to the earlier
        ones — Google's own cost queries ``SUM(cost)`` over all rows. So every row is kept; keeping
        only the newest ``export_time`` per (SKU, resource, hour) would drop real charges. A read
        of a window replaces the connector's lines charged in it (``period_start``/``period_end``
        = the window), so re-reading a window after late rows arrived is exact. Two rows equal in
        every selected column *including* ``export_time`` are refused as duplicates.

        **Money exact.** The REST API sends every cell as text, but the Python client turns a
        ``FLOAT64`` cell into a ``float``. The query therefore returns every FLOAT64 (``cost``,
        ``cost_at_list``, ``usage.amount``, ``usage.amount_in_pricing_units``,
        ``credits[].amount``) as ``CAST(CAST(x AS NUMERIC) AS STRING)``: ``NUMERIC`` rounds the
        double to 9 decimals (half away from zero, from its exact binary value — the ledger's money
        quantum, so nothing the ledger keeps is lost) and its ``STRING`` form is plain decimal text
        (never ``1e-05``, which ``CAST(float AS STRING)`` can give), which reaches ``Decimal(38, 9)``
        without a float. The one possible difference from a JSONL file of the same rows (whose
        shortest float text is rounded half to even at the 9th decimal) is 1e-9 on a value whose
        text has a 5 at the 10th decimal and nothing after — none in the fixtures.

        **Keys and lines.** ``source_file`` = ``bigquery://project.dataset.table?window=<start>/<end>``:
        the window is part of it because the ingestor also replaces a batch's whole
        ``source_file`` — one name for the table would delete the lines of every other window.
        ``line_no`` = the row's number in this query's result (1-based, across pages; BigQuery
        gives no stable order without a costly ``ORDER BY``, so it locates a row for this run
        only). ``line_key`` = ``sha1:`` + SHA-1 of the row's selected columns as canonical JSON
        (sorted keys, text values): stable for the same row in every later read, but not the
        key a JSONL file of the same row gets (that one hashes the file's raw line, whose exact
        bytes — every column, BigQuery's float and timestamp rendering — a query cannot
        reproduce); the normalized lines are otherwise identical.

        Errors: a missing table or dataset → :class:`ConfigurationError` naming the table; a
        query the table cannot answer (400) → :class:`ConfigurationError`; refused (403) →
        :class:`FatalSourceError` naming ``roles/bigquery.dataViewer`` on the dataset and
        ``roles/bigquery.jobUser`` on the query project; 401 or no credentials →
        :class:`FatalSourceError` with the next step; throttling (429, 403 ``rateLimitExceeded``)
        and 5xx are retried by the client, then :class:`RetriableError`.
        """
        table_id = str(self.config.bigquery_table)
        window = f"{iso(start)}/{iso(end)}"
        file = f"bigquery://{table_id}?window={window}"
        try:
            client = self._bigquery_client()
            retry = self._retry()
            timeout = self.config.timeout_s
            table = client.get_table(table_id, retry=retry, timeout=timeout)
            sql = build_query(table_id, table.schema, table.time_partitioning)
            bigquery = bigquery_module()
            job_config = bigquery.QueryJobConfig(
                query_parameters=[
                    bigquery.ScalarQueryParameter("start", "TIMESTAMP", start.astimezone(dt.UTC)),
                    bigquery.ScalarQueryParameter("end", "TIMESTAMP", end.astimezone(dt.UTC)),
                ],
                use_legacy_sql=False,
            )
            job = client.query(
                sql, job_config=job_config, project=self._query_project(), retry=retry, timeout=timeout
            )
            rows = job.result(page_size=self.config.page_size, retry=retry, job_retry=self._job_retry())
            line = 0
            for page in rows.pages:
                records = []
                for row in page:
                    line += 1
                    records.append(bigquery_record(row, line))
                if records:
                    yield self._bigquery_batch(records, file, start, end)
        except CONNECTOR_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to the connector's error classes below
            mapped = bigquery_error(exc, table_id, self._query_project())
            if mapped is exc:
                raise
            raise mapped from exc

    def _bigquery_batch(
        self, records: list[dict[str, Any]], file: str, start: dt.datetime, end: dt.datetime
    ) -> BillingBatch:
        keys = pl.DataFrame(
            {LINE: [r[LINE] for r in records], "line_key": [r.pop("_key") for r in records]},
            schema={LINE: pl.Int64, "line_key": pl.String},
        )
        nested = pl.DataFrame(records, schema=_BQ_FRAME)
        frame = _from_nested(nested, file).join(keys, on=LINE, how="left")
        lines, refused, findings = normalize(frame, file)
        # what the driver adds to a file's batch: GPU-hours beyond the resource's GPUs × hours
        quantity = _quantity_column(_NESTED_SPELLED)
        findings = merge_findings([*findings, *capacity_findings(lines, file, quantity)])
        return BillingBatch(
            lines=lines,
            source_file=file,
            refused=refused,
            findings=findings,
            quantity_column=quantity,
            read=len(records),
            period_start=start.astimezone(dt.UTC),
            period_end=end.astimezone(dt.UTC),
        )

    def _query_project(self) -> str:
        return self.config.bigquery_project or table_parts(str(self.config.bigquery_table))[0]

    def _bigquery_client(self) -> Any:
        if self._client is not None:
            return self._client
        bigquery = bigquery_module()
        credentials = self._credentials
        if credentials is None and self.config.credentials_file:
            from google.oauth2 import service_account

            try:
                credentials = service_account.Credentials.from_service_account_file(
                    self.config.credentials_file, scopes=[BIGQUERY_SCOPE]
                )
            except (OSError, ValueError, KeyError) as exc:
                raise ConfigurationError(
                    f"gcp_billing: credentials_file {self.config.credentials_file!r} is not a readable"
                    f" service-account key file ({type(exc).__name__})"
                ) from None
        options = {"api_endpoint": self.config.api_endpoint} if self.config.api_endpoint else None
        self._client = bigquery.Client(
            project=self._query_project(), credentials=credentials, client_options=options
        )
        return self._client

    def _retry(self) -> Any:
        """The client's retry, predicate widened to every 429/5xx, deadline from the config."""
        if self.config.max_retries == 0:
            return None
        from google.api_core import retry as api_retry

        return api_retry.Retry(
            predicate=retriable,
            initial=self.config.backoff_s,
            maximum=max(self.config.backoff_s, 60.0),
            multiplier=2.0,
            timeout=self._deadline(),
        )

    def _job_retry(self) -> Any:
        """Re-running a query job that failed for a retriable reason, within the same deadline."""
        if self.config.max_retries == 0:
            return None
        from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY

        return DEFAULT_JOB_RETRY.with_timeout(self._deadline())

    def _deadline(self) -> float:
        c = self.config
        backoffs = sum(min(c.backoff_s * 2**i, 60.0) for i in range(c.max_retries))
        return c.timeout_s + backoffs

    def close(self) -> None:
        """Closes the BigQuery client this connector built (files are closed after each read)."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None


def _kind(path: Path) -> Format:
    """``jsonl``, ``csv`` or ``parquet`` by the file's name (a ``.zip``: by its member's); a file
    named otherwise — given explicitly as ``path`` — is refused."""
    name = str(path)
    if name.lower().endswith(".zip"):
        name = zip_member_name(path) or name
    kind = file_kind(name, _SUFFIXES)
    if kind is None:
        check_explicit(Path(name), _SUFFIXES, "GCP billing")
        raise BillingFileError(str(path), f"not a GCP billing export file by its name: {Path(name).name}")
    return kind


def _record_keys(frame: pl.DataFrame) -> pl.DataFrame:
    encoded = frame.select(pl.struct(pl.exclude(LINE)).struct.json_encode()).to_series()
    return pl.DataFrame({LINE: frame[LINE], "line_key": sha1_keys(encoded)})


# --- streaming the exported files ------------------------------------------------------------

_REQUIRED_TOP = [NESTED[c][0] for c in REQUIRED]


class GcpExportDialect(Dialect):
    """The exported files for the billing driver: JSON Lines, flat CSV or Parquet by the file's
    name; a first pass over the whole file for the per-resource facts, the window and the
    required fields; a repeat of a line in another chunk is left to the ingestor."""

    raw_keys = True  # no row id: the key is the line as written (Parquet: the record's JSON)
    duplicates_in = "chunk"

    def __init__(self, chunk_rows: int, window: tuple[dt.datetime, dt.datetime]) -> None:
        self.chunk_rows, self.window = chunk_rows, window

    def file_format(self, label: str, head: bytes) -> Format:
        del head  # by the name, as the export writes them
        return _kind(Path(label))

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame  # nested and typed: flattened by _flat

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _GcpFile:
        del first, period  # the first pass reads every chunk; the export names no period
        facts: tuple[pl.DataFrame, bool, bool] | None = None
        columns: set[str] = set()
        spelled: dict[str, str] = {}
        for frame, _refused, _whole in opened.chunks(self.chunk_rows):
            columns.update(c for c in frame.columns if c not in (LINE, "line_key"))
            flat, spelled = _flat(frame, opened.label, opened.format)
            good = _checks(flat, opened.label, spelled).rows
            chunk_facts = _file_facts(good, *self.window)
            facts = chunk_facts if facts is None else _merge_facts(facts, chunk_facts)
        if opened.format == "jsonl":
            # a JSONL chunk may lack a field other records have: required is what the file lacks
            require_columns(pl.DataFrame(schema=dict.fromkeys(columns, pl.Null)), opened.label, _REQUIRED_TOP)
        assert facts is not None  # every reader yields at least one chunk
        resources, hit, good_any = facts
        if good_any and not hit:
            raise SkipFile
        return _GcpFile(opened.label, opened.format, resources, _quantity_column(spelled))


def _quantity_column(spelled: dict[str, str]) -> str:
    """The file's name of the column ``usage_quantity`` comes from (the driver's GPU-hours finding
    names it): the amount in pricing units, else the amount."""
    priced = "usage_amount_in_pricing_units"
    return spelled.get(priced) or spelled.get("usage_amount") or ".".join(NESTED[priced])


class _GcpFile:
    period: Period | None = None  # daily files must not replace each other: lines are replaced by file

    def __init__(self, file: str, form: Format, facts: pl.DataFrame, quantity_column: str) -> None:
        self.file, self.format, self.facts = file, form, facts
        self.quantity_column = quantity_column

    def normalize(self, chunk: pl.DataFrame) -> Normalized:
        flat, spelled = _flat(chunk, self.file, self.format)
        good, refused, findings = _checks(flat, self.file, spelled)
        return Normalized(_to_lines(good, self.file, self.facts), refused, findings)

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        return RefusedRow(self.file, line, None, f"duplicated line: the same as line {first}", key)

    def finish(self, read: int, accepted: int, refused: int) -> None:
        """Nothing to log: the ingestor records the run's counts."""


#: How the nested export spells the flat frame's columns (refusals and findings name these).
_NESTED_SPELLED = {
    **{c: ".".join(p) for c, p in NESTED.items()},
    **{c: c for c in ("credits", "labels", "system_labels")},
    "project_labels": "project.labels",
}


def _flat(frame: pl.DataFrame, file: str, form: Format) -> tuple[pl.DataFrame, dict[str, str]]:
    """A chunk as the flat text frame the checks read (with its ``line_key``), and how the file
    spells its columns."""
    if form == "csv":
        return from_flat(frame, file)
    if form == "jsonl":
        nested = _from_nested(frame.drop("line_key"), file, require=False)
        return nested.join(frame.select(LINE, "line_key"), on=LINE, how="left"), _NESTED_SPELLED
    if "sku" in frame.columns:
        flat, spelled = _from_nested(frame, file), _NESTED_SPELLED
    else:
        flat, spelled = from_flat(frame, file)
    return flat.join(_record_keys(frame), on=LINE, how="left"), spelled


def _file_facts(good: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> tuple[pl.DataFrame, bool, bool]:
    """(:func:`resource_facts`, a good row charged in ``[start, end)``, any good row) of a chunk."""
    hit = good.height > 0 and bool(
        good.select(((pl.col("_start") < end) & (pl.col("_end") > start)).any()).item()
    )
    return resource_facts(good), hit, good.height > 0


def _merge_facts(
    a: tuple[pl.DataFrame, bool, bool], b: tuple[pl.DataFrame, bool, bool]
) -> tuple[pl.DataFrame, bool, bool]:
    facts = (
        pl.concat([a[0], b[0]])
        .group_by("resource_global_name")
        .agg(
            pl.col("_r_gpu").any(),
            pl.col("_r_count").max(),
            pl.col("_r_spec").max(),
            pl.col("_r_family").max(),
        )
    )
    return facts, a[1] or b[1], a[2] or b[2]


def _path(frame: pl.DataFrame, path: tuple[str, ...]) -> pl.Expr:
    """The nested field ``path`` as text, null when the export has no such field."""
    dtype: object = frame.schema.get(path[0])  # a DataType instance, or a bare class for some nested fields
    expr = pl.col(path[0])
    for name in path[1:]:
        fields = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if name not in fields:
            return pl.lit(None, pl.String)
        dtype, expr = fields[name], expr.struct.field(name)
    if dtype is None or isinstance(dtype, pl.Struct | pl.List):
        return pl.lit(None, pl.String)
    return expr.cast(pl.String)


def _typed_list(frame: pl.DataFrame, column: str, dtype: pl.DataType) -> pl.Expr:
    """The repeated record ``column`` as ``dtype`` (a list of text structs); a single record where
    a list belongs (koku-nise writes one credit as an object) is a list of one."""
    target = dtype.inner if isinstance(dtype, pl.List) else None
    assert isinstance(target, pl.Struct), f"{column}: the target type is a list of structs"
    kind = frame.schema.get(column)
    if isinstance(kind, pl.Struct):
        names = {f.name for f in kind.fields}
        fields = [
            (pl.col(column).struct.field(f) if f in names else pl.lit(None)).cast(pl.String).alias(f)
            for f in (fl.name for fl in target.fields)
        ]
        return pl.when(pl.col(column).is_not_null()).then(pl.concat_list(pl.struct(fields)))
    if not isinstance(kind, pl.List) or not isinstance(kind.inner, pl.Struct):
        return pl.lit(None, dtype)
    names = {f.name for f in kind.inner.fields}
    fields = [
        (pl.element().struct.field(f) if f in names else pl.lit(None)).cast(pl.String).alias(f)
        for f in (fl.name for fl in target.fields)
    ]
    return pl.col(column).list.eval(pl.struct(fields))


def _from_nested(frame: pl.DataFrame, file: str, *, require: bool = True) -> pl.DataFrame:
    """The nested export (JSONL records, Parquet) as the flat text frame ``normalize`` reads
    (``require=False``: a field it lacks is null, for a JSONL chunk checked file-wide)."""
    if require:
        require_columns(frame, file, _REQUIRED_TOP)
    resource = frame.schema.get("resource")
    if isinstance(resource, pl.Struct) and "global_name" not in {f.name for f in resource.fields}:
        no_global_name(file, "resource.global_name")
    project = frame.schema.get("project")
    if isinstance(project, pl.Struct) and "labels" in {f.name for f in project.fields}:
        frame = frame.with_columns(pl.col("project").struct.field("labels").alias("project_labels"))
    return frame.select(
        pl.col(LINE).cast(pl.Int64),
        *(_path(frame, p).alias(c) for c, p in NESTED.items()),
        machine_spec(_typed_list(frame, "system_labels", LABELS)).alias("machine_spec"),
        _typed_list(frame, "labels", LABELS).alias("_labels"),
        _typed_list(frame, "project_labels", LABELS).alias("_project_labels"),
        _typed_list(frame, "credits", CREDITS).alias("_credits"),
        pl.lit(None, pl.String).alias("credits_total"),
        *(pl.lit(False).alias(f"_{c}_bad") for c in JSON_CELLS),
    )


def _credit_parts(frame: pl.DataFrame) -> pl.DataFrame:
    """Per line: Σ credits, the credits per type as tag fragments, committed-use flag, bad amount.
    An empty placeholder credit (no name, no type, amount 0: koku-nise's JSONL) is no credit."""
    long = (
        frame.select(LINE, "_credits")
        .explode("_credits")
        .filter(pl.col("_credits").is_not_null())
        .select(
            LINE,
            amount_text=pl.col("_credits").struct.field("amount").str.strip_chars(),
            name=pl.col("_credits").struct.field("name"),
            type=pl.col("_credits").struct.field("type"),
        )
        .with_columns(amount=pl.col("amount_text").cast(MONEY, strict=False))  # 3.2e-05 exactly
    )
    unnamed = pl.col("name").fill_null("").str.strip_chars() == ""
    untyped = pl.col("type").fill_null("").str.strip_chars() == ""
    long = long.filter(~(unnamed & untyped & (pl.col("amount") == 0).fill_null(False)))
    long = long.with_columns(pl.when(untyped).then(pl.lit("UNKNOWN")).otherwise(pl.col("type")).alias("type"))
    by_type = long.group_by(LINE, "type").agg(
        pl.col("amount").sum(), pl.col("amount").is_null().any().alias("bad")
    )
    return by_type.group_by(LINE).agg(
        pl.col("amount").sum().alias("_credit_sum"),
        pl.format(
            "{}:{}",
            json_text(pl.lit("gcp:credit:") + pl.col("type")),
            json_text(pl.col("amount").cast(pl.String)),
        )
        .sort()
        .str.join(",")
        .alias("_credit_tags"),
        pl.col("type").str.starts_with("COMMITTED_USAGE_DISCOUNT").any().alias("_cud"),
        pl.col("bad").any().alias("_credit_amount_bad"),
    )


def normalize(frame: pl.DataFrame, file: str) -> Normalized:
    """The flat text frame of the nested export → (``BILLING_SCHEMA`` lines, refused rows,
    findings), its rows' resources seen in it alone (a query's page)."""
    good, refused, findings = check(frame, file)
    return Normalized(_to_lines(good, file, resource_facts(good)), refused, findings)


def check(frame: pl.DataFrame, file: str) -> Split:
    """:func:`_checks` (columns named as the nested export spells them), then a line seen twice in
    the frame is refused (a query's page; a file's chunk has the driver refuse them)."""
    good, refused, findings = _checks(frame, file, _NESTED_SPELLED)
    good, duplicates = refuse_duplicates(good, file)
    return Split(good, [*refused, *duplicates], findings)


_NAN = ("NaN", "nan", "NAN")


def _optional_number(checks: Checks, column: str, instead: str) -> pl.Expr:
    """``column`` as Decimal(38, 9), or null; a cell that is not a number is imported as no value
    and counted as finding ``unreadable_number`` (``instead`` says what the line uses then)."""
    text = pl.col(column).str.strip_chars()
    text = pl.when(text.is_in(_NAN)).then(pl.lit("")).otherwise(text)
    value = checks.value(text.cast(MONEY, strict=False))  # exponent forms exactly
    bad = text.is_not_null() & (text != "") & value.is_null()
    checks.flag(column, "unreadable_number", f"not a number: {instead}", bad)
    return value


def _checks(frame: pl.DataFrame, file: str, spelled: dict[str, str]) -> Split:
    """The flat text frame → (good rows with their parsed values, refused rows, findings).

    Refused: what makes the row's money, currency or usage period unreadable. Flagged: the rest."""
    parts = _credit_parts(frame)
    frame = frame.join(parts, on=LINE, how="left")
    checks = Checks(file, spelled=spelled, provider=pl.lit("gcp"))
    cost = checks.decimal("cost")
    checks.money = cost  # a refused row keeps its cost, for the run's refused-cost share
    typed = pl.col("cost_type").str.strip_chars()
    known = canonical(typed, list(_CATEGORY))
    untyped = typed.is_null() | (typed == "")
    cost_type = pl.when(untyped).then(pl.lit("regular")).otherwise(known)  # null: unknown
    checks.flag(
        "cost_type",
        "unknown_value",
        f"not a cost_type of the export ({', '.join(_CATEGORY)}): booked as Adjustment",
        ~untyped & known.is_null(),
    )
    start = checks.timestamp("usage_start_time", *_TIME_FORMATS)
    end = checks.timestamp("usage_end_time", *_TIME_FORMATS)
    checks.add("usage_end_time", "usage_end_time is not after usage_start_time", end <= start)
    checks.dates("usage_start_time", start, "usage_end_time", end)
    # The billing period of a row is its invoice month; usage more than a day outside it is not
    # this bill's (a 0001-01-01 start would make re-pricing walk two thousand years).
    month = pl.col("invoice_month").str.strip_chars()
    invoice = (month + "01").str.to_datetime("%Y%m%d", time_zone="UTC", strict=False, time_unit="us")
    invoice = checks.value(pl.when(month.str.contains(r"^\d{6}$")).then(invoice).cast(UTC_TIME))
    has_month = month.is_not_null() & (month != "")
    checks.add("invoice_month", "not an invoice month (YYYYMM)", has_month & invoice.is_null())
    invoice_end = checks.value(invoice.dt.offset_by("1mo"))
    checks.period("invoice_month", invoice, invoice_end)
    checks.within(
        "usage_start_time", start, "usage_end_time", end, (invoice, invoice_end), "its invoice month"
    )
    currency = checks.currency("currency", BILLING_CURRENCIES)
    regular = cost_type == "regular"
    amount = _optional_number(checks, "usage_amount", "no usage quantity")
    priced = _optional_number(checks, "usage_amount_in_pricing_units", "the usage amount is the quantity")
    negative = "negative usage on a regular row (imported: the money is the bill's)"
    checks.flag("usage_amount", "negative_usage", negative, regular & (amount < 0))
    checks.flag("usage_amount_in_pricing_units", "negative_usage", negative, regular & (priced < 0))
    total = checks.decimal("credits_total", required=False)
    checks.add("credits", "credits are not a list of {name, amount, type} (JSON)", pl.col("_credits_bad"))
    bad_amount = pl.col("_credit_amount_bad").fill_null(False)
    checks.add("credits", "a credit amount that is not a number", bad_amount)
    for name, what in (
        ("labels", "labels"),
        ("system_labels", "system labels: no machine type"),
        ("project_labels", "project labels"),
    ):
        reason = f"not a list of {{key, value}} (JSON): the {what} dropped"
        checks.flag(name, "unreadable_json", reason, pl.col(f"_{name}_bad"))
    for record in RECORD_CELLS:
        if f"_{record}_bad" in frame.columns:
            reason = f"not a {record} record (JSON): its fields are empty"
            checks.flag(record, "unreadable_json", reason, pl.col(f"_{record}_bad"))
    at_list = _optional_number(checks, "cost_at_list", "the list cost is the cost")
    parsed = {
        "_cost": cost,
        "_start": start,
        "_end": end,
        "_currency": currency,
        "_amount": amount,
        "_priced": priced,
        "_credits_sum": pl.coalesce(pl.col("_credit_sum"), total, pl.lit(0).cast(MONEY)),
        "_at_list": at_list,
        "_cost_type": cost_type.fill_null(""),
    }
    return checks.split(frame, parsed)


_SKU = pl.col("sku_description")
_RESOURCE = pl.col("resource_global_name")
_HAS_RESOURCE = _RESOURCE.is_not_null() & (_RESOURCE != "")
_COMMITMENT_SKU = _SKU.str.starts_with("Commitment")
_IS_GPU = _SKU.str.contains(r"(?i)\bgpu\b") & ~_COMMITMENT_SKU
_UNIT = pl.col("usage_pricing_unit").str.strip_chars().str.to_lowercase()
_SECONDS = pl.col("usage_unit").str.strip_chars().str.to_lowercase().is_in(["seconds", "second", "s"])
_HOURS_OF_USE = (
    pl.when(_UNIT == "hour")
    .then(pl.col("_priced"))
    .when(_SECONDS)
    .then((pl.col("_amount").cast(_D18) / pl.lit(3600).cast(_D18)).round(9).cast(MONEY))
)
_WINDOW_H = (pl.col("_end") - pl.col("_start")).dt.total_seconds() / 3600.0
_RATIO = _HOURS_OF_USE.cast(pl.Float64) / _WINDOW_H  # a whole number or nothing: floats are exact here
# GPUs of a GPU SKU row: its GPU-hours per hour of its window, when a whole number
_OWN_COUNT = pl.when(_IS_GPU & (_RATIO > 0) & (_RATIO.round(0) == _RATIO)).then(
    _RATIO.round(0).cast(pl.Int32)
)
_FAMILY = _SKU.str.extract(
    r"^(?:Spot Preemptible )?([A-Z]\d+[A-Z]?) (?:Predefined |Custom )?Instance (?:Core|Ram)"
).str.to_lowercase()


def resource_facts(good: pl.DataFrame) -> pl.DataFrame:
    """What a resource's lines take from all its rows (a GPU VM is billed as several SKU rows), per
    ``resource_global_name`` of the good rows: ``_r_gpu`` (a GPU SKU row), ``_r_count`` (the
    largest whole GPU count of one), ``_r_spec`` (``machine_spec`` label), ``_r_family`` (family of
    a core/RAM SKU). Any/max, so the facts of a file's chunks merge into the file's
    (:func:`_merge_facts`); one row per resource, however many rows."""
    return (
        good.filter(_HAS_RESOURCE)
        .group_by("resource_global_name")
        .agg(
            _IS_GPU.any().alias("_r_gpu"),
            _OWN_COUNT.max().alias("_r_count"),
            pl.col("machine_spec").max().alias("_r_spec"),
            _FAMILY.max().alias("_r_family"),
        )
    )


def _to_lines(good: pl.DataFrame, file: str, facts: pl.DataFrame) -> pl.DataFrame:
    """Good rows → lines; ``facts``: :func:`resource_facts` of every good row of their file."""
    good = good.join(facts, on="resource_global_name", how="left", maintain_order="left")
    # an empty CSV cell is no value, as a field the JSONL record lacks (or holds as null)
    text = [c for c, t in good.schema.items() if t == pl.String and not c.startswith("_") and c != "line_key"]
    good = good.with_columns(pl.when(pl.col(c) != "").then(pl.col(c)).alias(c) for c in text)
    sku, resource, has_resource, is_gpu = _SKU, _RESOURCE, _HAS_RESOURCE, _IS_GPU

    def per_resource(fact: str, own: pl.Expr) -> pl.Expr:
        return pl.when(has_resource).then(pl.col(fact)).otherwise(own)

    commitment_sku = _COMMITMENT_SKU
    category = (
        pl.when(pl.col("_cost_type") != "regular")
        .then(
            pl.col("_cost_type")
            .fill_null("")
            .replace_strict(_CATEGORY, default=ChargeCategory.ADJUSTMENT.value, return_dtype=pl.String)
        )
        .when(commitment_sku)
        .then(pl.lit(ChargeCategory.PURCHASE.value))
        .otherwise(pl.lit(ChargeCategory.USAGE.value))
    )
    pricing = (
        pl.when(category != ChargeCategory.USAGE.value)
        .then(pl.lit(None, pl.String))
        .when(sku.str.contains(r"(?i)\bspot\b|preemptible"))
        .then(pl.lit(PricingModel.SPOT.value))
        .when(pl.col("_cud").fill_null(False))
        .then(pl.lit(PricingModel.COMMITMENT.value))
        .otherwise(pl.lit(PricingModel.ON_DEMAND.value))
    )
    hours_of_use = _HOURS_OF_USE
    resource_gpu = per_resource("_r_gpu", is_gpu)
    gpu_count = per_resource("_r_count", _OWN_COUNT)
    instance_type = pl.coalesce(
        per_resource("_r_spec", pl.col("machine_spec")), per_resource("_r_family", _FAMILY)
    )
    effective = (pl.col("_cost") + pl.col("_credits_sum")).cast(MONEY)
    labels = pl.col("_labels").list.eval(
        pl.format(
            "{}:{}",
            json_text(pl.element().struct.field("key")),
            json_text(pl.element().struct.field("value")),
        )
    )
    # The project's labels beside the resource's, marked so that a key both carry stays two facts
    # (service.billing.tags: cloud.project_label:<key>).
    project_labels = pl.col("_project_labels").list.eval(
        pl.format(
            "{}:{}",
            json_text(pl.lit(PROJECT_LABEL_TAG) + pl.element().struct.field("key")),
            json_text(pl.element().struct.field("value")),
        )
    )
    no_text = pl.lit([], pl.List(pl.String))
    fragments = pl.concat_list(
        labels.fill_null(no_text), project_labels.fill_null(no_text), pl.col("_credit_tags").fill_null("")
    )
    tag_text = fragments.list.eval(pl.element().filter(pl.element() != "")).list.join(",")
    lines = good.select(
        pl.lit(file).alias("source_file"),
        pl.col(LINE).alias("line_no"),
        "line_key",
        pl.lit("gcp").alias("provider"),
        pl.col("billing_account_id").alias("billing_account"),
        pl.col("project_id").alias("account"),
        pl.col("_start").alias("charge_start"),
        pl.col("_end").alias("charge_end"),
        category.alias("charge_category"),
        pl.col("cost_type").alias("charge_type"),
        pricing.alias("pricing_model"),
        pl.coalesce(resource.str.extract(r"/instances/(\d+)$"), pl.when(has_resource).then(resource)).alias(
            "resource_id"
        ),
        pl.col("resource_name"),
        pl.col("service_description").alias("service"),
        pl.col("sku_id").alias("sku"),
        sku.alias("sku_description"),
        instance_type.alias("instance_type"),
        pl.coalesce(pl.col("location_region"), pl.col("location_zone").str.replace(r"-[a-z]$", "")).alias(
            "region"
        ),
        pl.coalesce(pl.col("_priced"), pl.col("_amount")).alias("usage_quantity"),
        pl.when(pl.col("_priced").is_not_null())
        .then(pl.col("usage_pricing_unit"))
        .otherwise(pl.col("usage_unit"))
        .alias("usage_unit"),
        pl.when(resource_gpu).then(gpu_count).alias("gpu_count"),
        pl.when(is_gpu).then(hours_of_use).when(resource_gpu).then(pl.lit(0).cast(MONEY)).alias("gpu_hours"),
        is_gpu.alias("is_gpu_sku"),
        effective.alias("billed_cost"),
        effective.alias("effective_cost"),
        pl.coalesce(pl.col("_at_list"), pl.col("_cost")).alias("list_cost"),
        pl.col("_currency").alias("currency"),
        pl.when(tag_text != "").then(pl.concat_str(pl.lit("{"), tag_text, pl.lit("}"))).alias("tags"),
    )
    return conform(lines)
