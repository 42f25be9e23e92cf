"""Importing a billing connector's export files into ``billing_line`` (issue 5).

``ingest_billing`` reads the connector's :class:`~connectors.billing.BillingBatch` objects for a
window and, for each:

1. completes GPU counts and GPU-hours from the instance catalog (:func:`catalog.fill_gpus`); an
   instance type that looks like a GPU family but is unknown is named in the result (and logged),
   its lines keep a null GPU count — they are never priced as 0 GPUs silently;
2. checks what the database relies on, so one bad line cannot abort a whole file: required
   values present, the currency an ISO 4217 code, the file name and line key within their
   columns' length (other text too long is cut to fit and flagged ``value_too_long``: a long
   description is no reason to lose a cost line), money within NUMERIC(24, 9), and ``line_key``
   unique per source — a repeated key (a duplicated line item id, in the same file, another file
   of the run, or a file imported earlier that is not being replaced) is refused, naming file,
   line and column ``line_key`` and where the first one is;
3. replaces what the batch says it replaces (``BillingBatch`` docstring): with a billing period,
   all the source's lines charged in it (and the lines of the batch's files) — so a newer AWS
   assembly supersedes the old one and a re-import is exact; without one, the file's lines. The
   delete, the inserts and the ``billing_file`` rows of one period (or file) are ONE transaction.
   Batches of one period are expected one after another (a CUR in parts): a period that shows up
   again later in the same run is appended to, not replaced a second time.

Streaming, in bounded memory: the transaction of a replacement unit opens on its first batch
(deleting the old lines and ``billing_file`` rows of the period — and of each file the first time
the run meets it), stays open while its batches come — each is checked, inserted and dropped —
and commits when the next unit starts or the input ends. Nothing of a batch outlives it: a
``line_key`` is checked against ``billing_line`` itself (one query per batch), where the lines of
the run's earlier batches already are — committed, or inserted earlier in the open transaction,
which the same connection sees; a stored line of a file the run has met is "first on" that line,
any other is "already imported". What grows with the run is a summary per file. On SQLite the
open unit holds the database's write lock (readers go on, under WAL) until it commits.

Refused rows (the parser's and the ingestor's) go to the ``rejection`` table with the run id. A
file that cannot be read at all (:class:`~connectors.billing.BillingFileError`, yielded in place
of a batch — the SDK's contract, which every bundled connector keeps through the billing driver)
gets a ``billing_file`` row with its error and a rejection; the other files go on (the open unit
is committed first, as at any unit's end). A third-party iterator that raises one instead is
tolerated: it is recorded the same way and the iterator asked for more (a plain generator that
raised is finished, so its remaining files are not read, which the failed status makes visible).

A connector error (or any other) while a unit is open rolls that unit back: the batches read of it
may not be all of it (a CUR part or a chunk missing), and replacing a period with part of it
would lose lines — so its old lines, ``billing_file`` rows and the run's rejections for it stay as
they were, and its files are not in the run's counts. The units completed before are stored.

Data-quality findings (rows imported although they break a rule: ``BillingBatch.findings``) are
merged per file and written with the file's ``billing_file`` row, in its unit's transaction; a
file met again replaces its findings as it replaces its lines (``service.billing.findings``).

The run is recorded like a metrics window (``service.run_recorder``): status ``OK``;
``MISSING_DATA`` when the source had no file for the window; ``PARSE_ERROR`` when a file failed;
``DEGRADED`` when every file was read but too much was refused (``service.billing.health``: a
share of rows or of cost above the connector's ``max_refused_rows_pct``/``max_refused_cost_pct``,
or a file with rows and none accepted); when reading raised, the status
``service.failures.classify`` gives the error (a connector error's own, ``INTERNAL_ERROR`` for a
bug). The watermark moves to the window's end on ``OK`` and on ``DEGRADED`` — what was accepted
is in and a re-run would read the same refusals; the status and error keep the run visible.

Afterwards the ``after_import`` hook re-prices the ledger over the charge periods touched (by
default ``service.billing.rates.reprice``, with the config's ``gpu_cost_share`` and catalog).

Money: columns are ``Decimal(38, 9)``; the database keeps 1e-9 exactly (``service.money``).
Rounding to 1e-9 is half-even — what Polars does when a parser casts the export's text to
``Decimal(38, 9)`` (``"1617.803491945205"`` → ``1617.803491945``) and what ``Money`` does on bind —
so a parser only needs ``pl.col(x).str.strip_chars().cast(MONEY)``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import polars as pl
from sqlalchemy import Connection, Engine

from connectors.billing import BILLING_SCHEMA, MONEY, BillingBatch, BillingFileError, RefusedRow, conform
from connectors.billing_driver import capacity_findings
from connectors.prefetch import Prefetched
from connectors.sdk import BillingSource, ConnectorStatus
from connectors.sdk.billing import Finding, merge_findings
from service.attribution.rules import AttributionRule
from service.billing import currency_mix, health, store
from service.billing import findings as quality
from service.billing.catalog import InstanceCatalog, bundled_catalog, fill_gpus, unknown_gpu_types
from service.billing.currencies import BILLING_CURRENCIES
from service.billing.keyhashes import KeyHashes
from service.billing.unit_tables import UnitLoader
from service.dbtypes import table_of
from service.ledger import version as ledger_version
from service.models import BillingLine
from service.run_recorder import RunRecorder

log = logging.getLogger(__name__)

Period = tuple[dt.datetime, dt.datetime]
AfterImport = Callable[[Engine, list[Period]], None]

#: Columns ``billing_line`` requires (NOT NULL beyond the ones the ingestor sets).
REQUIRED = (
    "source_file",
    "line_no",
    "line_key",
    "provider",
    "charge_start",
    "charge_end",
    "charge_category",
    "billed_cost",
    "effective_cost",
    "currency",
)
#: The largest amount a money column holds: NUMERIC(24, 9) on PostgreSQL has 15 integer digits;
#: SQLite keeps a 64-bit count of nanos (about 9.2 billion units).
MONEY_LIMITS = {"postgresql": Decimal("1e15"), "sqlite": Decimal(2**63 - 1).scaleb(-9)}
_MONEY_COLUMNS = [c for c, t in BILLING_SCHEMA.items() if t == MONEY]
# String, or sqlmodel's AutoString (a TypeDecorator passing attributes through to its String).
_LENGTHS = {
    c.name: length
    for c in table_of(BillingLine).columns
    if isinstance(length := getattr(c.type, "length", None), int) and length and c.name in BILLING_SCHEMA
}
#: Too long, these refuse the row (they identify it; a currency is checked as ISO 4217); any other
#: text is cut to its column's length and flagged (``findings.cut_long_text``).
_IDENTIFYING = ("source_file", "line_key", "currency")
_CUT = {c: n for c, n in _LENGTHS.items() if c not in _IDENTIFYING}


@dataclass(slots=True)
class FileSummary:
    """One export file: ``read == accepted + refused + skipped``; ``error`` when unreadable.

    ``findings``: rows imported although they break a rule (the sum of ``finding_list``'s counts);
    ``refused_cost``: the refused rows' cost where it could be read (signed, as the export wrote
    it); ``refused_magnitude``/``billed_magnitude``: Σ |cost| of refused rows and of the accepted
    lines' billed cost, for the run's refused-cost share (``service.billing.health``)."""

    source_file: str
    read: int = 0
    accepted: int = 0
    refused: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    period_start: dt.datetime | None = None
    assembly_id: str | None = None
    error: str | None = None
    currencies: dict[str, int] = field(default_factory=dict)  # accepted lines per currency
    notice: str | None = None  # imported, but the operator should know (currency_mix)
    period_end: dt.datetime | None = None
    findings: int = 0
    finding_list: list[Finding] = field(default_factory=list)
    refused_cost: Decimal = Decimal(0)
    refused_magnitude: Decimal = Decimal(0)
    billed_magnitude: Decimal = Decimal(0)
    providers: set[str] = field(default_factory=set)  # of the accepted lines (a finding's default)


@dataclass(frozen=True, slots=True)
class BillingImportResult:
    """What one ``ingest_billing`` did; ``read == accepted + refused + skipped``."""

    connector: str
    start: dt.datetime
    end: dt.datetime
    status: ConnectorStatus
    run_id: int
    files: tuple[FileSummary, ...]
    read: int
    accepted: int
    refused: int
    skipped: int
    unknown_types: tuple[str, ...]
    lines_replaced: int
    notice: str | None = None  # the run's currencies lacking FX rates (currency_mix.notice)
    findings: int = 0  # rows imported although they break a rule (every file's)
    refused_cost: Decimal = Decimal(0)  # cost of the refused rows where readable (signed)
    error: str | None = None  # why the run is PARSE_ERROR or DEGRADED (connector_run.error)

    @property
    def failed_files(self) -> tuple[FileSummary, ...]:
        return tuple(f for f in self.files if f.error is not None)

    @property
    def finding_list(self) -> tuple[Finding, ...]:
        """Every file's findings, most rows first."""
        return tuple(
            sorted(
                (x for f in self.files for x in f.finding_list),
                key=lambda x: (-x.count, x.file, x.rule, x.column or ""),
            )
        )


def ingest_billing(
    engine: Engine,
    name: str,
    connector: BillingSource,
    start: dt.datetime,
    end: dt.datetime,
    *,
    catalog: InstanceCatalog | None = None,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    on_file: Callable[[FileSummary], None] | None = None,
    after_import: AfterImport | None = None,
    gpu_cost_share: Decimal = Decimal(1),
    limits: health.QualityLimits | None = None,
    attribution_rules: Sequence[AttributionRule] = (),
) -> BillingImportResult:
    """Import the export files of billing connector ``name`` whose periods overlap ``[start, end)``.

    ``attribution_rules`` name the owners of the unmonitored spend the re-pricing writes, from the
    bill's tags (:mod:`service.billing.tags`).

    ``limits``: when the run is ``DEGRADED``; by default the connector config's
    ``max_refused_rows_pct``/``max_refused_cost_pct`` (``connector.config``), else 1 % and 0.5 %.
    """
    if end <= start:
        raise ValueError(
            f"billing window is empty: end {end.isoformat()} is not after start {start.isoformat()}"
        )
    catalog = catalog or bundled_catalog()
    limits = limits or health.QualityLimits.of(getattr(connector, "config", None))
    hook = (
        after_import if after_import is not None else reprice_hook(gpu_cost_share, catalog, attribution_rules)
    )
    with RunRecorder(engine, name, type(connector).__name__, start, end, clock) as run:
        importer = _Importer(engine, name, run, catalog, on_file, clock, (start, end))
        try:
            # the next batch is parsed while this one is checked and stored (connectors.prefetch)
            with Prefetched(_items(connector.read(start, end))) as items:
                for item in items:
                    if isinstance(item, BillingFileError):
                        importer.failed(item)
                    else:
                        importer.add(item)
            importer.commit()
            if hook is not None and importer.periods:
                hook(engine, merge_periods(importer.periods))
        finally:
            importer.abort()  # a unit still open here did not end normally (nothing to do otherwise)
        files = tuple(importer.files)
        failed = [f for f in files if f.error]
        unknown = tuple(sorted(importer.unknown))
        if failed:
            status = ConnectorStatus.PARSE_ERROR
            error: str | None = f"{len(failed)} file(s) could not be read: " + "; ".join(
                str(f.error) for f in failed
            )
        elif not files:
            status, error = ConnectorStatus.MISSING_DATA, None
        else:
            error = health.degraded_reason(health.outcome_of(files), limits)
            status = ConnectorStatus.DEGRADED if error else ConnectorStatus.OK
        # The window is in only when every file of it is: a failed or missing file leaves the
        # watermark where it was, so the next run reads the window again. A DEGRADED run read
        # every file; reading them again would refuse the same rows.
        now = clock()
        landed = status in (ConnectorStatus.OK, ConnectorStatus.DEGRADED)
        watermark = min(end, max(start, now)) if landed else None
        run.finish(status, now=now, watermark=watermark, error=error)
    currencies: dict[str, int] = {}
    for f in files:
        for currency, n in f.currencies.items():
            currencies[currency] = currencies.get(currency, 0) + n
    with engine.begin() as conn:
        notice = currency_mix.notice(currencies, currency_mix.fx_pairs(conn))
        currency_mix.set_connector_notice(conn, name, notice)
        ledger_version.bump(conn)
    if notice:
        log.warning("billing %s: %s", name, notice)
    if status == ConnectorStatus.DEGRADED:
        log.warning("billing %s: DEGRADED: %s", name, error)
    result = BillingImportResult(
        connector=name,
        start=start,
        end=end,
        status=status,
        run_id=run.run_id,
        files=files,
        read=sum(f.read for f in files),
        accepted=sum(f.accepted for f in files),
        refused=sum(f.refused for f in files),
        skipped=sum(f.skipped for f in files),
        unknown_types=unknown,
        lines_replaced=importer.replaced,
        notice=notice,
        findings=sum(f.findings for f in files),
        refused_cost=sum((f.refused_cost for f in files), Decimal(0)),
        error=error,
    )
    return result


def _items(
    batches: Iterator[BillingBatch | BillingFileError],
) -> Iterator[BillingBatch | BillingFileError]:
    """The connector's batches; a ``BillingFileError`` raised by its iterator becomes an item, and
    the iterator is asked for the next file (a generator that raised is finished: that ends it)."""
    iterator = iter(batches)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except BillingFileError as error:
            item = error
        yield item


@dataclass(slots=True)
class _Unit:
    """The replacement unit being imported (a billing period, or a file without one): its
    transaction stays open across its batches, so a reader sees the old lines until it commits."""

    key: tuple[object, ...]
    period: Period | None
    conn: Connection
    cache: int | None = None
    files: dict[str, FileSummary] = field(default_factory=dict)
    written: int = 0
    first_start: dt.datetime | None = None
    last_end: dt.datetime | None = None
    #: PostgreSQL, a unit with a billing period: its own tables (service.billing.unit_tables), and
    #: the hashes of the keys written to them (across its files: the driver checks within a file)
    tables: UnitLoader | None = None
    hashes: KeyHashes | None = None

    @property
    def sparing(self) -> tuple[int, ...]:
        """Tables the unit's deletes and key probes of ``billing_line`` leave alone: those it
        replaces (its own are not ``billing_line``'s until it commits)."""
        return () if self.tables is None else self.tables.sparing


class _Importer:
    """Streams batches into the database: each batch is checked, inserted into its unit's open
    transaction and dropped. What grows with the run is one summary per file, the names of the
    files seen and the spans to re-price — never the lines or their keys: a key is looked up in
    ``billing_line`` itself, where the lines of earlier batches (committed, or inserted earlier in
    the open transaction, which the same connection sees) already are."""

    def __init__(
        self,
        engine: Engine,
        source: str,
        run: RunRecorder,
        catalog: InstanceCatalog,
        on_file: Callable[[FileSummary], None] | None,
        clock: Callable[[], dt.datetime],
        window: Period,
    ) -> None:
        self.engine, self.source, self.run, self.catalog = engine, source, run, catalog
        self.on_file, self.clock, self.window = on_file, clock, window
        self.files: list[FileSummary] = []
        self.unit: _Unit | None = None
        self.done: set[tuple[object, ...]] = set()
        self.run_files: set[str] = set()  # every source_file of the run (a line's own and its batch's)
        self.periods: list[Period] = []
        self.unknown: set[str] = set()
        self.replaced = 0
        limit = MONEY_LIMITS.get(engine.dialect.name, MONEY_LIMITS["postgresql"])
        self.limit = min(limit, Decimal("1e15") - Decimal("1e-9"))

    # --- batches ---------------------------------------------------------------------------------

    def add(self, batch: BillingBatch) -> None:
        period = (batch.period_start, batch.period_end) if batch.period_start and batch.period_end else None
        key: tuple[object, ...] = ("period", *period) if period else ("file", batch.source_file)
        if self.unit is None or key != self.unit.key:
            self.commit()
            self.unit = self._begin(key, period)
        unit = self.unit
        given = conform(batch.lines)
        lines = fill_gpus(given, self.catalog)
        # GPU-hours beyond capacity where the count came from the catalog (the driver checked the
        # lines whose count the source gave): an Azure VM size, a CUR without product/gpu
        from_catalog = lines.filter(given["gpu_count"].is_null())
        batch.findings = merge_findings(
            [*batch.findings, *capacity_findings(from_catalog, batch.source_file, batch.quantity_column)]
        )
        unknown = unknown_gpu_types(lines, self.catalog)
        if unknown:
            log.warning(
                "billing %s: instance types with no known GPU count (add [[instance_types]]): %s",
                self.source,
                ", ".join(unknown),
            )
            self.unknown.update(unknown)
        if batch.source_file:
            lines = lines.with_columns(pl.col("source_file").fill_null(batch.source_file))
        name = batch.source_file or (str(lines["source_file"][0]) if lines.height else "")
        summary = unit.files.setdefault(name, FileSummary(name))
        # A file met for the first time in this run: its earlier import's lines go (those outside
        # the period too), before its keys are checked against what is stored.
        named = {name, *lines["source_file"].drop_nulls().unique().to_list()}
        named.update(f.file for f in batch.findings)
        new_files = sorted(named - self.run_files)
        if new_files:
            self._delete(unit, period=None, files=new_files)
            quality.delete_files(unit.conn, self.source, new_files)
            self.run_files.update(new_files)
        lines, cut = quality.cut_long_text(lines, _CUT, name)
        lines, refused = self._check(unit, lines)
        summary.read += batch.read
        summary.skipped += batch.skipped
        for reason, n in batch.skipped_reasons.items():
            summary.skipped_reasons[reason] = summary.skipped_reasons.get(reason, 0) + n
        summary.period_start, summary.assembly_id = batch.period_start, batch.assembly_id
        summary.period_end = batch.period_end
        # Counted against the batch's file: refusals are counted where the rows were read.
        summary.refused += len(batch.refused) + len(refused)
        summary.accepted += lines.height
        _count_costs(summary, lines, [*batch.refused, *refused])
        if batch.findings or cut:
            summary.finding_list = merge_findings([*summary.finding_list, *batch.findings, *cut])
        currency_mix.count(lines, summary.currencies)
        store.insert_rejections(unit.conn, self.run.run_id, self.source, [*batch.refused, *refused])
        if unit.tables is not None:
            if lines.height:
                # in the writer thread, while this one goes on with the next batch
                unit.tables.copy(lines)
            unit.written += lines.height
            assert unit.hashes is not None, "a unit table has its key hashes"
            unit.hashes.add(KeyHashes.of(lines["line_key"]))
        else:
            unit.written += store.insert_lines(unit.conn, self.source, lines)
        if lines.height:
            start, end = lines["charge_start"].min(), lines["charge_end"].max()
            assert isinstance(start, dt.datetime) and isinstance(end, dt.datetime), "required columns"
            unit.first_start = start if unit.first_start is None else min(unit.first_start, start)
            unit.last_end = end if unit.last_end is None else max(unit.last_end, end)

    def _begin(self, key: tuple[object, ...], period: Period | None) -> _Unit:
        conn = self.engine.connect()
        try:
            conn.begin()
            unit = _Unit(key, period, conn, store.begin_import(conn))
            # A period met again later in the run (not one after another) is appended to: its
            # first run of batches already replaced it.
            if period is not None and key not in self.done and conn.dialect.name == "postgresql":
                unit.tables = UnitLoader.begin(self.engine, conn, self.source, period)
                unit.hashes = KeyHashes()
                self._replaced(unit.tables.replaced_lines())
            if period is not None and key not in self.done:
                self._delete(unit, period=period, files=())
                quality.delete_period_files(conn, self.source, period[0])
                store.delete_period_files(conn, self.source, period[0])
        except BaseException:
            conn.close()
            raise
        return unit

    def _delete(self, unit: _Unit, *, period: Period | None, files: Sequence[str]) -> None:
        self._replaced(
            store.delete_lines(unit.conn, self.source, period=period, files=files, sparing=unit.sparing)
        )

    def _replaced(self, deleted: store.Deleted) -> None:
        self.replaced += deleted.lines
        if deleted.first_start and deleted.last_end:
            self.periods.append((deleted.first_start, deleted.last_end))

    def _check(self, unit: _Unit, lines: pl.DataFrame) -> tuple[pl.DataFrame, list[RefusedRow]]:
        rules: list[tuple[str, str, pl.Expr]] = [
            (c, "a required value is missing", pl.col(c).is_null()) for c in REQUIRED
        ]
        rules.append(
            (
                "currency",
                "not an ISO 4217 currency code",
                ~pl.col("currency").is_in(sorted(BILLING_CURRENCIES)),
            )
        )
        rules += [
            (c, f"longer than {n} characters", pl.col(c).str.len_chars() > n)
            for c, n in _LENGTHS.items()
            if c in _IDENTIFYING
        ]
        rules += [
            (c, f"amount out of range (the database holds up to {self.limit})", pl.col(c).abs() > self.limit)
            for c in _MONEY_COLUMNS
        ]
        first = pl.col("line_no").first().over("line_key")
        first_file = pl.col("source_file").first().over("line_key")
        rules.append(("line_key", "duplicated line item id", ~pl.col("line_key").is_first_distinct()))
        code = pl.lit(None, dtype=pl.Int32)
        for index in reversed(range(len(rules))):
            code = (
                pl.when(rules[index][2].fill_null(False)).then(pl.lit(index, dtype=pl.Int32)).otherwise(code)
            )
        tagged = lines.with_columns(
            code.alias("_bad"), first.alias("_first_line"), first_file.alias("_first_file")
        )
        # A key some stored line already has: one of this run (an earlier batch, committed or in
        # this transaction) — "first on" it — or one outside what this run replaces.
        keys = tagged.filter(pl.col("line_key").is_not_null())["line_key"].unique()
        stored = store.existing_keys(unit.conn, self.source, keys, sparing=unit.sparing)
        if unit.tables is not None and unit.hashes is not None and unit.hashes.count:
            # earlier batches of the unit are in its tables, not in billing_line
            candidates = keys.filter(pl.Series(unit.hashes.seen(KeyHashes.of(keys))))
            found = unit.tables.keys(candidates)
            stored = pl.concat([stored, found]).unique("line_key", keep="first", maintain_order=True)
        stored = stored.rename({"source_file": "_seen_file", "line_no": "_seen_line"}).with_columns(
            pl.col("_seen_file").is_in(sorted(self.run_files)).alias("_in_run")
        )
        dup_index = len(rules) - 1
        checked = tagged.join(stored, on="line_key", how="left", maintain_order="left")
        in_run = pl.col("_in_run").fill_null(False)
        checked = checked.with_columns(
            pl.when(pl.col("_bad").is_null() & pl.col("_seen_file").is_not_null())
            .then(pl.lit(dup_index, dtype=pl.Int32))
            .otherwise(pl.col("_bad"))
            .alias("_bad"),
            pl.when(in_run).then(pl.col("_seen_file")).otherwise(pl.col("_first_file")).alias("_first_file"),
            pl.when(in_run).then(pl.col("_seen_line")).otherwise(pl.col("_first_line")).alias("_first_line"),
            # Outside the run, only the key's first line in the batch names the stored one; a
            # repeat within the batch names that first line, as any repeat does.
            (pl.col("_seen_file").is_not_null() & ~in_run & pl.col("line_key").is_first_distinct()).alias(
                "_outside"
            ),
        )
        bad = checked.filter(pl.col("_bad").is_not_null())
        refused = []
        for row in bad.iter_rows(named=True):
            column, reason, _ = rules[row["_bad"]]
            duplicate = row["_bad"] == dup_index
            if duplicate and row["_outside"]:
                where = f"line {row['_seen_line']} of {row['_seen_file']}"
                reason = f"{reason} {row['line_key']!r}: already imported from {where}"
            elif duplicate:
                where = f"line {row['_first_line']} of {row['_first_file']}"
                reason = f"{reason} {row['line_key']!r}: first on {where}"
            elif row.get(column) is not None:
                reason = f"{reason}: {row[column]!r}"
            # A duplicate's cost is in the ledger once already: it is no cost refused.
            cost = None if duplicate else row["billed_cost"]
            refused.append(
                RefusedRow(row["source_file"] or "", row["line_no"], column, reason, _raw(row), cost)
            )
        good = checked.filter(pl.col("_bad").is_null()).select(list(BILLING_SCHEMA))
        return good, refused

    def failed(self, error: BillingFileError) -> None:
        # A file that fails after some of its batches were stored in the open unit would leave
        # the period replaced by part of it: roll the unit back instead (its old lines stay).
        if self.unit is not None and error.row.file in self.unit.files:
            self.abort()
        else:
            self.commit()
        summary = FileSummary(error.row.file, error=str(error))
        with self.engine.begin() as conn:
            store.replace_file_rows(conn, self.source, [_file_row(summary, self.clock())])
            store.insert_rejections(conn, self.run.run_id, self.source, [error.row])
            ledger_version.bump(conn)
        self.files.append(summary)
        if self.on_file is not None:
            self.on_file(summary)

    # --- ending a unit ---------------------------------------------------------------------------

    def commit(self) -> None:
        """Finish the open unit: its ``billing_file`` rows, then commit; its files are reported."""
        unit, self.unit = self.unit, None
        if unit is None:
            return
        try:
            now = self.clock()
            pairs = currency_mix.fx_pairs(unit.conn)
            for summary in unit.files.values():
                summary.notice = currency_mix.notice(summary.currencies, pairs)
                summary.finding_list = quality.with_file_provider(summary.finding_list, summary.providers)
                period = (summary.period_start, summary.period_end)
                summary.findings = quality.write(
                    unit.conn,
                    self.source,
                    self.run.run_id,
                    summary.finding_list,
                    period if period[0] and period[1] else self.window,  # type: ignore[arg-type]
                    now,
                )
            store.replace_file_rows(unit.conn, self.source, [_file_row(f, now) for f in unit.files.values()])
            if unit.tables is not None:
                unit.tables.finish()  # indexed, and billing_line's children from this commit on
            ledger_version.bump(unit.conn)  # lines, findings and files change answers
            unit.conn.commit()
        except BaseException:
            _roll_back(unit)
            raise
        finally:
            _close(unit)
        self.done.add(unit.key)
        # connector_run keeps read == accepted + rejected: rows skipped by a documented rule are
        # counted per file (billing_file.rows_skipped), not in the run.
        self.run.counts.add(
            accepted=sum(f.accepted for f in unit.files.values()),
            rejected=sum(f.refused for f in unit.files.values()),
            ledger_rows=unit.written,
            findings=sum(f.findings for f in unit.files.values()),
        )
        if unit.period is not None:
            self.periods.append(unit.period)
        if unit.first_start is not None and unit.last_end is not None:
            self.periods.append((unit.first_start, unit.last_end))
        for summary in unit.files.values():
            self.files.append(summary)
            if self.on_file is not None:
                self.on_file(summary)

    def abort(self) -> None:
        """Roll the open unit back: its old lines stay as they were, none of its files counts.

        The connector failed while the unit was being read, so it may be incomplete (a CUR part
        or a chunk of a file missing): replacing the period with part of it would lose lines.
        The re-pricing spans of its deletes are harmless (re-pricing an unchanged span is a no-op).
        """
        unit, self.unit = self.unit, None
        if unit is None:
            return
        try:
            _roll_back(unit)
        finally:
            _close(unit)


def _roll_back(unit: _Unit) -> None:
    """Roll ``unit``'s transaction back, then drop the unit tables it staged (after: its
    transaction may hold locks on them). Errors are logged: the one that stopped the import is
    the one to report."""
    try:
        unit.conn.rollback()
    except Exception:  # noqa: BLE001
        log.exception("billing: rolling back the unfinished import failed")
    if unit.tables is not None:
        unit.tables.abort()


def _close(unit: _Unit) -> None:
    try:
        store.end_import(unit.conn, unit.cache)
    except Exception:  # noqa: BLE001  (a pragma on a connection that failed: it is discarded anyway)
        log.debug("billing: restoring the connection's cache size failed", exc_info=True)
    finally:
        unit.conn.close()  # rolls back what was not committed
        if unit.tables is not None:
            unit.tables.close()


def _count_costs(summary: FileSummary, lines: pl.DataFrame, refused: Sequence[RefusedRow]) -> None:
    """Add the refused rows' readable cost and the accepted lines' billed cost to ``summary``."""
    costs = [r.cost for r in refused if r.cost is not None]
    summary.refused_cost += sum(costs, Decimal(0))
    summary.refused_magnitude += sum((abs(c) for c in costs), Decimal(0))
    if lines.height:
        billed = lines["billed_cost"].abs().sum()
        summary.billed_magnitude += billed if isinstance(billed, Decimal) else Decimal(0)
        summary.providers.update(p for p in lines["provider"].unique().to_list() if p is not None)


def _file_row(summary: FileSummary, now: dt.datetime) -> dict[str, object]:
    return {
        "source_file": summary.source_file,
        "billing_period_start": summary.period_start,
        "assembly_id": summary.assembly_id,
        "rows_read": summary.read,
        "rows_accepted": summary.accepted,
        "rows_refused": summary.refused,
        "rows_skipped": summary.skipped,
        "error": summary.error,
        "notice": summary.notice,
        "imported_at": now,
    }


def _raw(row: dict[str, object]) -> str:
    shown = {k: v for k, v in row.items() if not k.startswith("_") and v is not None}
    return json.dumps(shown, default=str, ensure_ascii=False)[:2000]


def merge_periods(periods: Sequence[Period]) -> list[Period]:
    """Overlapping or touching ``[start, end)`` spans merged, sorted."""
    merged: list[Period] = []
    for start, end in sorted(periods):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def reprice_hook(
    gpu_cost_share: Decimal, catalog: InstanceCatalog, attribution_rules: Sequence[AttributionRule] = ()
) -> AfterImport:
    """Re-price the ledger from the bill over each touched span (``service.billing.rates``)."""
    from service.billing.rates import reprice

    def hook(engine: Engine, periods: list[Period]) -> None:
        for start, end in periods:
            reprice(
                engine,
                start,
                end,
                gpu_cost_share=gpu_cost_share,
                catalog=catalog,
                attribution_rules=attribution_rules,
            )

    return hook
