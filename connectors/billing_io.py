"""Reading export files for the billing connectors: a stream → frames of text columns → checked values.

The billing driver (:mod:`connectors.billing_driver`) and the parsers go through the same steps,
so every one reports bad input the same way:

1. :func:`open_stream` — a local file (or a remote object copied to one) with a ZIP of one export
   and gzip undone by their magic bytes, whatever the name; a truncated or corrupt stream is a
   :class:`BillingFileError`.
2. :func:`csv_chunks` / :func:`parquet_chunks` / :func:`ndjson_records` — every column as text
   plus ``_line`` (the physical line a CSV record starts on: the header is line 1; a Parquet
   record's number; a JSONL record's line) and the rows that cannot be read at all. CSV is cut
   into RFC 4180 records first (:mod:`connectors.csv_records`: a quoted newline is one record; an
   unbalanced quote, a record with more or fewer fields than the header, misquoting, bytes that
   are not UTF-8 → that record alone is refused and reading goes on).
3. :func:`require_columns` — a missing column refuses the whole file, naming it.
4. :class:`Checks` — per-column conversions as Polars expressions (decimal money, timestamps,
   currency codes, usage dates within 2000..2100 and within their billing period ± 1 day, billing
   periods that can be one), collecting for every row the first column that failed and why;
   refused rows leave the frame with a :class:`RefusedRow` each, the good rows go on.

A file named explicitly as a connector's ``path`` is read when it is an export by its name or a
``.zip`` holding one (:func:`check_explicit`, :func:`zip_member`); anything else is refused with a
message, never skipped in silence.

Money is parsed from text straight to ``Decimal(38, 9)`` (Polars rounds half to even at the
9th decimal), never through a float.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import hashlib
import io
import json
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple, TypeVar, cast

import polars as pl

from connectors.csv_records import MAX_RECORD_BYTES, Records, scan
from connectors.sdk import (
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingFileError,
    Finding,
    RefusedRow,
    merge_findings,
)
from connectors.sdk.billing import FINDING_EXAMPLES

LINE = "_line"
_K = TypeVar("_K")
_REPLACEMENT = "\ufffd"
_GZIP_MAGIC = b"\x1f\x8b"


def csv_frame(data: bytes, file: str, *, separator: str = ",") -> tuple[pl.DataFrame, list[RefusedRow]]:
    """A whole CSV file: all columns as text (empty fields ``''``) plus ``_line``, and the refused
    records (:func:`csv_chunks` with the file as one chunk)."""
    chunks = list(csv_chunks(_reader(data), file, 1 << 62, separator=separator))
    frames = [f for f, _ in chunks]
    return pl.concat(frames) if len(frames) > 1 else frames[0], [r for _, rs in chunks for r in rs]


def _reader(data: bytes) -> Callable[[int], bytes]:
    stream = io.BytesIO(data)
    return stream.read


def header_columns(header: bytes, file: str, separator: str = ",") -> list[str]:
    """The column names of a header line (a byte-order mark dropped); an unreadable header (empty,
    not UTF-8, a quote left open) refuses the file, naming line 1."""
    if header.startswith(b"\xef\xbb\xbf"):
        header = header[3:]
    if not header.strip():
        raise BillingFileError(file, "the file is empty", line=1)
    try:
        header.decode("utf-8")
    except UnicodeDecodeError:
        raise BillingFileError(file, "the header holds bytes that are not UTF-8", line=1) from None
    if header.count(b'"') % 2:
        raise BillingFileError(file, "the header has an unbalanced quote", line=1)
    try:
        return pl.read_csv(io.BytesIO(header), separator=separator, infer_schema=False, n_rows=0).columns
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as exc:
        raise BillingFileError(file, f"not a readable CSV file: {str(exc).splitlines()[0]}", line=1) from None


def _parse_records(
    header: bytes,
    records: Records,
    columns: list[str],
    file: str,
    separator: str,
    wanted: list[str] | None,
) -> tuple[pl.DataFrame, list[RefusedRow]]:
    """:class:`Records` of a chunk → the text frame (``_line`` = each record's first physical line)
    and the refusals (the scan's, and records holding bytes that are not UTF-8)."""
    names = wanted or columns
    try:
        frame = pl.read_csv(
            io.BytesIO(header + records.body),
            separator=separator,
            infer_schema=False,
            # bytes that are not UTF-8 are in the body only when the scan found some (each such
            # record is refused below); else the strict decoder, a full pass over the chunk less
            encoding="utf8-lossy" if records.undecodable else "utf8",
            empty_string_is_null=False,
            truncate_ragged_lines=True,
            columns=[columns.index(c) for c in wanted] if wanted else None,
        )
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as exc:
        first = records.lines[0] if records.lines else None
        raise BillingFileError(
            file, f"not a readable CSV file: {str(exc).splitlines()[0]}", line=first
        ) from None
    if frame.height != len(records.lines):  # the scan and Polars disagree: never mis-number a line
        raise BillingFileError(
            file, f"CSV records from line {records.lines[0]} on cannot be told apart", line=records.lines[0]
        )
    frame = frame.with_columns(pl.Series(LINE, records.lines, dtype=pl.Int64))
    if records.multi:
        index = [columns.index(c) for c in names]
        multi = pl.DataFrame(
            {
                **{frame.columns[n]: [fields[i] for _, fields in records.multi] for n, i in enumerate(index)},
                LINE: [line for line, _ in records.multi],
            },
            schema={**dict.fromkeys(frame.columns[: len(index)], pl.String), LINE: pl.Int64},
        )
        frame = pl.concat([frame, multi]).sort(LINE)
    if records.keys is not None:
        keys = pl.DataFrame(
            {LINE: list(records.keys), "line_key": list(records.keys.values())},
            schema={LINE: pl.Int64, "line_key": pl.String},
        )
        frame = frame.join(keys, on=LINE, how="left", maintain_order="left")
    refused = list(records.refused)
    if records.undecodable:
        is_bad = pl.col(LINE).is_in(sorted(records.undecodable))
        for row in frame.filter(is_bad).iter_rows(named=True):
            column = next((c for c, v in row.items() if isinstance(v, str) and _REPLACEMENT in v), None)
            refused.append(RefusedRow(file, row[LINE], column, "bytes that are not UTF-8", _raw(row)))
        frame = frame.filter(~is_bad)
    return frame, sorted(refused, key=lambda r: r.line or 0)


def require_columns(frame: pl.DataFrame, file: str, required: Iterable[str]) -> None:
    """Refuse the whole file when a column the parser needs is missing (naming it)."""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        names = ", ".join(f'"{c}"' for c in missing)
        raise BillingFileError(
            file, f"missing column {names} (the header is line 1)", line=1, column=missing[0]
        )


#: No billing line is charged before EARLIEST or from LATEST on: a date outside (``0001-01-01``,
#: year 9999) is a broken export, and one such row would make re-pricing walk every hour between it
#: and the rest of the bill.
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
#: A usage line may start or end this far outside its billing period (hour-of-day boundaries, time
#: zones of the invoice); further out it belongs to another bill.
PERIOD_MARGIN = dt.timedelta(days=1)
#: A billing period is a calendar month at most (AWS, Google Cloud, Azure and FOCUS exports alike).
LONGEST_PERIOD = dt.timedelta(days=31)


def sane_period(start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """A billing period ``[start, end)`` that can be one: between EARLIEST and LATEST, not empty, a
    month at most."""
    return (start >= EARLIEST) & (end <= LATEST) & (end > start) & ((end - start) <= LONGEST_PERIOD)


class Split(NamedTuple):
    """What :meth:`Checks.split` (and a dialect's ``normalize``) gives: the rows kept, the rows
    refused, and the findings on the rows kept."""

    rows: pl.DataFrame
    refused: list[RefusedRow]
    findings: list[Finding]


#: A dialect's ``normalize``: (lines, refused rows, findings on the lines).
Normalized = Split

#: Literals that exports write for "no value" (SQL engines' ``NULL``, Hive/MySQL dumps' ``\N``):
#: read as an empty field in every text column, before any check.
NULL_LITERALS = ("NULL", "null", "Null", "\\N")
#: Also "no value" where a *number* is optional (pandas and Spark write ``NaN`` for a missing one);
#: where a number is required, it is "not a number".
_NAN_LITERALS = ("NaN", "nan", "NAN")


def null_literals(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text cell that is a null literal (:data:`NULL_LITERALS`) made empty."""
    text = [c for c, t in frame.schema.items() if t == pl.String and c not in (LINE, "line_key")]
    if not text or frame.is_empty():
        return frame
    # rewritten only where one is (most columns of most chunks hold none): a rewrite copies the column
    hits = frame.select(pl.col(text).is_in(NULL_LITERALS).any()).row(0)
    text = [c for c, hit in zip(text, hits, strict=True) if hit]
    if not text:
        return frame
    return frame.with_columns(
        pl.when(pl.col(c).is_in(NULL_LITERALS)).then(pl.lit("")).otherwise(pl.col(c)).alias(c) for c in text
    )


def flexible_time(text: pl.Expr) -> pl.Expr:
    """``text`` as a UTC datetime, for every form billing exports write: a ``T`` or a space between
    date and time; minute, second or fractional precision; ``Z``, ``+00:00``, ``+0000`` or no zone
    (no zone is UTC, as the CUR, FOCUS and Azure specs say); a date alone (midnight UTC). Null when
    it is none of these."""
    t = text.str.strip_chars()
    t = t.str.replace(r"^(\d{4}-\d{2}-\d{2})$", "${1}T00:00:00")
    t = t.str.replace(r"^(\d{4}-\d{2}-\d{2})[ T]", "${1}T")
    t = t.str.replace(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})($|[^:\d])", "${1}:00${2}")
    t = t.str.replace(r"\s*(?:[Zz]|UTC|GMT)$", "+00:00")
    t = t.str.replace(r"([+-]\d{2})(\d{2})$", "${1}:${2}")
    t = t.str.replace(r"([+-]\d{2})$", "${1}:00")
    t = pl.when(t.str.contains(r"[+-]\d{2}:\d{2}$")).then(t).otherwise(t + pl.lit("+00:00"))
    parsed = t.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_unit="us")
    return parsed.dt.convert_time_zone("UTC").cast(UTC_TIME)


def time_tries(text: pl.Expr, formats: Sequence[str]) -> list[pl.Expr]:
    """The ways ``text`` is read as a UTC datetime, in order: each of ``formats`` (strptime), then
    every ISO 8601 form (:func:`flexible_time`)."""
    tried = [text.str.to_datetime(f, time_zone="UTC", strict=False, time_unit="us") for f in formats]
    return [*(t.cast(UTC_TIME) for t in tried), flexible_time(text)]


def any_time(text: pl.Expr, formats: Sequence[str]) -> pl.Expr:
    """``text`` as a UTC datetime read the first of the :func:`time_tries` ways that reads it; null
    when none does."""
    return pl.coalesce(time_tries(text, formats))


@dataclass(frozen=True, slots=True)
class FirstOf:
    """The first of ``tries`` that is not null, as ``pl.coalesce(tries)`` gives it, but each try
    evaluated only on the rows the ones before left null where ``present`` holds. An export writes
    its timestamps in one form, which the first try reads: the fallbacks (:func:`flexible_time`,
    eight regex passes, ~1.5 ms a chunk even on one value) then never run — a coalesce ran them on
    every row (~25 ms of a CUR chunk's four timestamp columns, ~5 % of its parse)."""

    tries: tuple[pl.Expr, ...]
    present: pl.Expr

    def evaluate(self, frame: pl.DataFrame) -> pl.Series:
        values = frame.select(self.tries[0]).to_series()
        present = frame.select(self.present.fill_null(False)).to_series()
        for attempt in self.tries[1:]:
            missing = values.is_null() & present
            if not missing.any():
                break
            values = values.scatter(missing.arg_true(), frame.filter(missing).select(attempt).to_series())
        return values


def canonical(text: pl.Expr, values: Iterable[str], aliases: Mapping[str, str] | None = None) -> pl.Expr:
    """``text`` as one of ``values``, matched case-insensitively, with spaces, ``-`` and ``_``
    ignored, or through ``aliases`` (spelling → value, matched the same way); null when it is none
    of them (and when it is empty)."""

    def key(expr: pl.Expr) -> pl.Expr:
        return expr.str.to_lowercase().str.replace_all(r"[\s_-]", "")

    table = {_key_text(v): v for v in values}
    for spelling, value in (aliases or {}).items():
        table.setdefault(_key_text(spelling), value)
    return key(text.str.strip_chars()).replace_strict(table, default=None, return_dtype=pl.String)


def _key_text(value: str) -> str:
    return "".join(ch for ch in value.lower() if not ch.isspace() and ch not in "-_")


class Checks:
    """Per-row checks of one frame, all columnar.

    * :meth:`add` registers a **refusal**: the row cannot be booked (its money, currency or charge
      period cannot be read); :meth:`split` keeps each row's first failure and refuses the row.
    * :meth:`flag` registers a **finding**: the row is imported, and the rule it breaks is counted
      per file, rule, column (and provider) with the first rows as examples.

    ``spelled`` maps a frame column to the file's own header, so refusals and findings name the
    column as the file spells it (an Azure ``UsageDateTime`` read as ``Date``). ``money`` is the
    row's cost (kept on a refused row, so a run can say what share of the cost it refused) and
    ``provider`` the row's provider (findings are counted per provider).
    """

    def __init__(
        self,
        file: str,
        *,
        spelled: Mapping[str, str] | None = None,
        money: pl.Expr | None = None,
        provider: pl.Expr | None = None,
    ) -> None:
        self.file = file
        self.spelled = dict(spelled or {})
        self.money = money
        self.provider = provider
        self._rules: list[tuple[str, str, pl.Expr]] = []
        self._flags: list[tuple[str, str, str, pl.Expr]] = []
        self._values: dict[str, pl.Expr | FirstOf] = {}
        self._of_distinct: dict[str, str] = {}  # value name → the one column it is a function of

    def value(self, expr: pl.Expr | FirstOf, *, of: str | None = None) -> pl.Expr:
        """``expr`` computed once, before the rules (which refer to it as a column): a timestamp
        tried in several formats is parsed once however many rules compare it. ``of``: ``expr``
        depends on that column alone, so it is computed over the column's distinct values and
        joined back (a usage date has a few hundred values in a chunk of 20,000 rows); a
        :class:`FirstOf` is computed that way only."""
        assert of is not None or isinstance(expr, pl.Expr), "a FirstOf is computed per distinct value"
        name = f"_checked_{len(self._values)}"
        self._values[name] = expr
        if of is not None:
            self._of_distinct[name] = of
        return pl.col(name)

    def add(self, column: str, reason: str, bad: pl.Expr) -> None:
        """Refuse the rows where ``bad`` holds (only for what makes a row impossible to book)."""
        self._rules.append((column, reason, bad))

    def flag(self, column: str, rule: str, reason: str, bad: pl.Expr) -> None:
        """Import the rows where ``bad`` holds, and count them as finding ``rule`` on ``column``."""
        self._flags.append((column, rule, reason, bad))

    def decimal(self, column: str, *, negative: bool = True, required: bool = True) -> pl.Expr:
        """``column`` as Decimal(38, 9), parsed from the text (exponent forms such as ``3.2E-05``
        too, exactly, never through a float; ``NaN`` is no value when optional); registers the
        refusals: not a number, empty (when required), negative (when not allowed). Returns the
        parsed expression."""
        text = pl.col(column).str.strip_chars()
        if not required:
            text = pl.when(text.is_in(_NAN_LITERALS)).then(pl.lit("")).otherwise(text)
        value = self.value(text.cast(MONEY, strict=False))  # Polars reads 3.2E-05 exactly, too
        empty = text.is_null() | (text == "")
        self.add(column, "not a number", ~empty & value.is_null())
        if required:
            self.add(column, "empty where a number is required", empty)
        if not negative:
            self.add(column, "negative where none is allowed", value < 0)
        return value

    def timestamp(self, column: str, *formats: str, required: bool = True) -> pl.Expr:
        """``column`` as a UTC datetime: ``formats`` (strptime) tried first, in order, then every
        ISO 8601 form exports write (:func:`flexible_time`)."""
        text = pl.col(column).str.strip_chars()
        empty = text.is_null() | (text == "")
        value = self.value(FirstOf(tuple(time_tries(text, formats)), present=~empty), of=column)
        self.add(column, "not a timestamp", ~empty & value.is_null())
        if required:
            self.add(column, "empty where a timestamp is required", empty)
        return value

    def dates(self, start_column: str, start: pl.Expr, end_column: str, end: pl.Expr) -> None:
        """Refuses usage dates outside ``EARLIEST..LATEST`` (naming the column)."""
        reason = f"outside {EARLIEST:%Y-%m-%d}..{LATEST:%Y-%m-%d}: not a billing date"
        self.add(start_column, reason, (start < EARLIEST) | (start >= LATEST))
        self.add(end_column, reason, (end <= EARLIEST) | (end > LATEST))

    def period(self, column: str, start: pl.Expr, end: pl.Expr) -> None:
        """Refuses a billing period that cannot be one (:func:`sane_period`); null bounds pass."""
        reason = (
            f"not a billing period: it must lie in {EARLIEST:%Y-%m-%d}..{LATEST:%Y-%m-%d}, end after it"
            f" starts and last {LONGEST_PERIOD.days} days at most"
        )
        self.add(column, reason, ~sane_period(start, end))

    def within(
        self,
        start_column: str,
        start: pl.Expr,
        end_column: str,
        end: pl.Expr,
        period: tuple[pl.Expr, pl.Expr],
        what: str,
    ) -> None:
        """Refuses usage starting before the billing period ``period`` (``[start, end)``, per row or
        a literal) or ending after it, by more than ``PERIOD_MARGIN``; ``what`` names the period."""
        margin = f"by more than {PERIOD_MARGIN.days} day"
        self.add(start_column, f"starts before {what} {margin}", start < period[0] - PERIOD_MARGIN)
        self.add(end_column, f"ends after {what} {margin}", end > period[1] + PERIOD_MARGIN)

    def currency(self, column: str, known: Iterable[str]) -> pl.Expr:
        """``column`` upper-cased; an unknown ISO 4217 code is refused."""
        code = pl.col(column).str.strip_chars().str.to_uppercase()
        self.add(column, "unknown currency code", code.is_null() | ~code.is_in(sorted(set(known))))
        return code

    def split(self, frame: pl.DataFrame, parsed: dict[str, pl.Expr]) -> Split:
        """(rows that passed every refusal with ``parsed`` columns added, refused rows, findings on
        the rows kept)."""
        code = pl.lit(None, dtype=pl.Int32)
        for index in reversed(range(len(self._rules))):
            code = (
                pl.when(self._rules[index][2].fill_null(False))
                .then(pl.lit(index, dtype=pl.Int32))
                .otherwise(code)
            )
        for name, value in self._values.items():  # in order: a value may use an earlier one
            column = self._of_distinct.get(name)
            if column is None:
                assert isinstance(value, pl.Expr)
                frame = frame.with_columns(value.alias(name))
                continue
            frame = by_distinct(frame, column, {name: value})
        extra = {"_bad": code}
        if self.money is not None:
            extra["_money"] = self.money
        if self.provider is not None:
            extra["_provider"] = self.provider
        flags = {f"_flag_{i}": bad.fill_null(False) for i, (*_, bad) in enumerate(self._flags)}
        tagged = frame.with_columns(
            *(e.alias(n) for n, e in extra.items()),
            *(e.alias(n) for n, e in flags.items()),
            *(e.alias(n) for n, e in parsed.items()),
        )
        tagged = tagged.drop(list(self._values))
        bad = tagged.filter(pl.col("_bad").is_not_null())
        refused = []
        helpers = [*parsed, *flags, "_provider"]
        for row in bad.drop([c for c in helpers if c in bad.columns]).iter_rows(named=True):
            column, reason, _rule = self._rules[row.pop("_bad")]
            cost = row.pop("_money", None)
            found = row.get(column)
            refused.append(
                RefusedRow(
                    self.file, row.get(LINE), self._name(column), f"{reason}: {found!r}", _raw(row), cost
                )
            )
        good = tagged.filter(pl.col("_bad").is_null())
        findings = self._findings(good, list(flags))
        kept = good.drop(["_bad", *(c for c in ("_money", "_provider") if c in extra), *flags])
        return Split(kept, refused, findings)

    def _name(self, column: str) -> str:
        return self.spelled.get(column, column)

    def _findings(self, good: pl.DataFrame, flags: list[str]) -> list[Finding]:
        """One finding per flag, column and provider that holds on some kept row (count and the
        first rows as examples)."""
        if not flags or good.is_empty():
            return []
        counts = good.select(pl.col(flags).sum()).row(0)
        findings: list[Finding] = []
        for (column, rule, reason, _bad), name, count in zip(self._flags, flags, counts, strict=True):
            if not count:
                continue
            value = pl.col(column).cast(pl.String) if column in good.columns else pl.lit(None, pl.String)
            provider = pl.col("_provider") if "_provider" in good.columns else pl.lit(None, pl.String)
            hits = good.filter(pl.col(name)).select(
                pl.col(LINE) if LINE in good.columns else pl.lit(None, pl.Int64).alias(LINE),
                value.alias("_value"),
                provider.cast(pl.String).alias("_provider"),
            )
            groups = hits.group_by("_provider", maintain_order=True).agg(
                pl.len().alias("n"),
                pl.col(LINE).head(FINDING_EXAMPLES),
                pl.col("_value").head(FINDING_EXAMPLES),
            )
            for group_provider, n, lines, values in groups.iter_rows():
                examples = tuple(
                    (line, None if v is None else str(v)[:200]) for line, v in zip(lines, values, strict=True)
                )
                findings.append(
                    Finding(self.file, rule, self._name(column), reason, int(n), examples, group_provider)
                )
        return merge_findings(findings)


def by_distinct(frame: pl.DataFrame, column: str, exprs: Mapping[str, pl.Expr | FirstOf]) -> pl.DataFrame:
    """``frame`` with ``exprs`` (functions of ``column`` alone) computed once per distinct value of
    it and joined back: a low-cardinality column (a usage type, a unit, an instance type) has tens
    of values in a chunk of thousands of lines."""
    distinct = frame.select(pl.col(column).unique())
    distinct = distinct.with_columns(
        (e.alias(n) if isinstance(e, pl.Expr) else e.evaluate(distinct).alias(n)) for n, e in exprs.items()
    )
    return frame.join(distinct, on=column, how="left", nulls_equal=True, maintain_order="left")


def _raw(row: dict[str, object]) -> str:
    return json.dumps({k: v for k, v in row.items() if k != LINE}, default=str, ensure_ascii=False)[:2000]


def rename_variants(frame: pl.DataFrame, variants: Mapping[str, Sequence[str]]) -> pl.DataFrame:
    """Rename header variants to canonical names: ``{"Date": ["date", "UsageDate"]}``; matching
    is case-insensitive, the first variant present wins."""
    lower = {c.lower(): c for c in frame.columns}
    mapping: dict[str, str] = {}
    for canonical, options in variants.items():
        if canonical in frame.columns:
            continue
        for option in (canonical, *options):
            found = lower.get(option.lower())
            if found is not None and found not in mapping:
                mapping[found] = canonical
                break
    return frame.rename(mapping)


# --- files, keys and duplicates, shared by the parsers ----------------------------------------


def in_window(batch: BillingBatch, start: dt.datetime, end: dt.datetime) -> bool:
    """The batch's billing period overlaps ``[start, end)``; without a period, one of its lines
    does (a file without a good line is returned: its refusals must be seen)."""
    if batch.period_start is not None and batch.period_end is not None:
        return batch.period_start < end and batch.period_end > start
    lines = batch.lines
    if lines.is_empty():
        return True
    hit = (pl.col("charge_start") < end) & (pl.col("charge_end") > start)
    return bool(lines.select(hit.any()).item())


def export_files(root: Path, suffixes: Mapping[str, str]) -> list[Path]:
    """The export files under ``root`` (or ``root`` itself), sorted; other files are ignored."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise BillingFileError(str(root), "no such file or directory")
    return sorted(p for p in root.rglob("*") if p.is_file() and file_kind(str(p), suffixes) is not None)


def file_kind(name: str, suffixes: Mapping[str, _K]) -> _K | None:
    path = Path(name.removesuffix(".gz"))
    return suffixes.get(path.suffix.lower())


def ndjson_records(data: bytes, file: str) -> tuple[list[dict[str, object]], list[RefusedRow], int]:
    """JSON Lines → (records with ``_line``, refused lines, records read). Numbers stay their JSON
    text (``parse_float=str``, ``parse_int=str``) so money never passes through a binary float;
    nested records (a BigQuery export's ``service``, ``credits``…) stay Python objects for the
    parser to flatten with Polars; a line that is not JSON or not UTF-8 is refused by line."""
    records: list[dict[str, object]] = []
    refused: list[RefusedRow] = []
    read = 0
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        read += 1
        text = raw.decode("utf-8", errors="backslashreplace")[:2000]
        try:
            record = json.loads(raw.decode("utf-8"), parse_float=str, parse_int=str)
        except UnicodeDecodeError:
            refused.append(RefusedRow(file, number, None, "bytes that are not UTF-8", text))
            continue
        except json.JSONDecodeError as exc:
            reason = f"not JSON (truncated?): {exc.msg} at column {exc.colno}"
            refused.append(RefusedRow(file, number, None, reason, text))
            continue
        if not isinstance(record, dict):
            refused.append(RefusedRow(file, number, None, "not a JSON object", text))
            continue
        record[LINE] = number
        records.append(record)
    return records, refused, read


def line_keys(lines: Sequence[bytes]) -> pl.DataFrame:
    """``_line`` → ``line_key`` (``sha1:`` of the raw line) for each line of a file (:func:`sha1_keys`)."""
    keys = ["sha1:" + hashlib.sha1(line.rstrip(b"\r")).hexdigest() for line in lines]
    return pl.DataFrame(
        {LINE: range(1, len(keys) + 1), "line_key": keys}, schema={LINE: pl.Int64, "line_key": pl.String}
    )


def json_text(expr: pl.Expr) -> pl.Expr:
    """``expr`` (text) as a JSON string literal, quotes and escapes included — columnar."""
    return pl.struct(expr.alias("v")).struct.json_encode().str.slice(5).str.strip_suffix("}")


def refuse_duplicates(frame: pl.DataFrame, file: str) -> tuple[pl.DataFrame, list[RefusedRow]]:
    """Refuse every repeat of a ``line_key`` (the same line twice in the export) after its first."""
    frame = frame.with_columns(pl.col(LINE).min().over("line_key").alias("_first"))
    repeat = pl.col(LINE) != pl.col("_first")
    refused = [
        RefusedRow(file, line, None, f"duplicated line: the same as line {first_line}", key)
        for line, first_line, key in frame.filter(repeat).select(LINE, "_first", "line_key").iter_rows()
    ]
    return frame.filter(~repeat).drop("_first"), refused


def sha1_keys(texts: pl.Series) -> pl.Series:
    """``sha1:<hex>`` of each text: a line key stable across runs, versions and platforms.

    hashlib once per row (a C call each): Polars' own hash changes between versions, and a key must
    stay the same for the same line in every later import (the ingestor replaces and de-duplicates
    by it). The rest of a parse stays columnar.
    """
    return pl.Series(["sha1:" + hashlib.sha1(t.encode()).hexdigest() for t in texts], dtype=pl.String)


# --- streaming a large file: one chunk of text in memory at a time ---------------------------------

BLOCK_BYTES = 1 << 20


def csv_chunks(
    read: Callable[[int], bytes],
    file: str,
    rows: int,
    *,
    block: int = BLOCK_BYTES,
    separator: str = ",",
    keys: bool = False,
    columns: list[str] | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[tuple[pl.DataFrame, list[RefusedRow]]]:
    """A CSV stream (``read(n)``: up to ``n`` more bytes, ``b""`` at the end) → text frames of about
    ``rows`` records each (``_line``: the physical line each record starts on, the header being
    line 1) and the records refused, numbered in the whole file.

    Chunks are cut by size at line ends: the average record length of the first MiB after the
    header times ``rows`` (or ``chunk_bytes``), each chunk at least that long and running to the
    next line end; each is cut into RFC 4180 records by :func:`connectors.csv_records.scan` (a
    quoted newline is one record; an unbalanced quote, a long or short record is refused alone)
    and a record still open at a chunk's end is carried into the next chunk, so the records,
    refusals and lines are those of the whole file read at once, with only the chunk being cut
    (and one read ``block``) held. ``keys``: a ``line_key`` column, ``sha1:`` of each record's raw
    bytes; ``columns``: parse only these (by name).
    """
    for chunk in csv_record_chunks(
        read, file, rows, block=block, separator=separator, keys=keys, chunk_bytes=chunk_bytes
    ):
        wanted = [c for c in chunk.names if c in columns] if columns is not None else None
        yield chunk.parse(wanted)


class RecordChunk(NamedTuple):
    """A chunk of a CSV cut into records (:func:`csv_record_chunks`), not yet parsed: ``names`` are
    the header's columns. :meth:`parse` makes its text frame of some columns or all of them — as
    often as asked, so a reader may parse only the columns it maps and, for a chunk where it needs
    every column (a refused row's raw text), parse the same records again whole."""

    header: bytes
    records: Records
    names: list[str]
    file: str
    separator: str

    def parse(self, wanted: list[str] | None = None) -> tuple[pl.DataFrame, list[RefusedRow]]:
        """The text frame (``_line`` numbered) of the ``wanted`` columns (the header's order; None:
        every column) and the refused records."""
        return _parse_records(self.header, self.records, self.names, self.file, self.separator, wanted)


def csv_record_chunks(
    read: Callable[[int], bytes],
    file: str,
    rows: int,
    *,
    block: int = BLOCK_BYTES,
    separator: str = ",",
    keys: bool = False,
    chunk_bytes: int | None = None,
) -> Iterator[RecordChunk]:
    """:func:`csv_chunks`' chunks cut into records, before Polars parses them (the same cuts,
    lines and refusals)."""
    buf = bytearray()
    eof = False

    def more(want: int) -> None:
        nonlocal eof
        while not eof and len(buf) < want:
            piece = read(max(block, want - len(buf), 1))
            if piece:
                buf.extend(piece)
            else:
                eof = True

    searched = 0
    while (newline := buf.find(b"\n", searched)) < 0 and not eof:
        searched = len(buf)
        more(len(buf) + 1)
    header_end = newline + 1 if newline >= 0 else len(buf)
    header = bytes(buf[:header_end])
    names = header_columns(header, file, separator)
    if header.startswith(b"\xef\xbb\xbf"):
        header = header[3:]
    if not header.endswith(b"\n"):
        header += b"\n"
    del buf[:header_end]
    more(1 << 20)
    sample = bytes(buf[: 1 << 20])
    avg = max(1, len(sample) // max(1, sample.count(b"\n")))
    size = chunk_bytes or max(1, avg * rows)
    del sample
    line = 2  # line of the chunk's first record (the header is line 1)
    produced = False
    while True:
        more(size)
        searched = size - 1
        while (cut := buf.find(b"\n", searched)) < 0 and not eof:
            searched = max(searched, len(buf))
            more(len(buf) + 1)
        cut = len(buf) if cut < 0 else cut + 1
        final = eof and cut == len(buf)
        records = scan(
            bytes(memoryview(buf)[:cut]), line, names, file, separator=separator, final=final, keys=keys
        )
        if records.consumed == 0 and not final:
            # a quoted field opened on the chunk's first line runs past its end: read on until it
            # closes or is longer than a record may be (then its line is refused alone)
            size = max(size, MAX_RECORD_BYTES + 1)
            more(size + 1)
            continue
        del buf[: records.consumed]
        size = chunk_bytes or max(1, avg * rows)
        if records.lines or records.multi or records.refused or not produced:
            produced = True
            yield RecordChunk(header, records, names, file, separator)
        line += records.newlines
        if final or (eof and not buf):
            return


def jsonl_chunks(
    read: Callable[[int], bytes], file: str, rows: int, block: int = BLOCK_BYTES, *, keys: bool = False
) -> Iterator[tuple[pl.DataFrame, list[RefusedRow]]]:
    """A JSON Lines stream → frames of ``rows`` records each (nested objects as Polars structs and
    lists, numbers as their JSON text: :func:`ndjson_records`), ``_line`` the file's line, and the
    lines refused (not JSON, not UTF-8, not an object). ``keys``: a ``line_key`` column, ``sha1:``
    of each raw line. Records whose fields cannot make one frame refuse the file."""
    for data, first_line in _line_blocks(read, rows, block):
        records, refused, _read = ndjson_records(data, file)
        try:
            frame = pl.DataFrame(records, infer_schema_length=None)
        except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
            raise BillingFileError(file, f"records of different shapes: {exc}") from None
        if frame.is_empty():
            frame = pl.DataFrame({LINE: []}, schema={LINE: pl.Int64})
        if keys:
            frame = frame.join(line_keys(data.split(b"\n")), on=LINE, how="left")
        shift = first_line - 1
        if shift:
            frame = frame.with_columns(pl.col(LINE) + shift)
            refused = [
                RefusedRow(r.file, None if r.line is None else r.line + shift, r.column, r.reason, r.raw)
                for r in refused
            ]
        yield frame, refused


def _line_blocks(read: Callable[[int], bytes], rows: int, block: int) -> Iterator[tuple[bytes, int]]:
    """A JSON Lines stream as ``(bytes of `rows` lines, the number of its first line)``: blocks are
    read until ``rows`` line ends are held, and cut there (the last piece may be shorter; an empty
    file is one empty piece). Holds one chunk and one block."""
    buf = bytearray()
    held = 0  # line ends in buf
    line = 1
    eof = False
    while True:
        while held < rows and not eof:
            piece = read(block)
            if piece:
                buf += piece
                held += piece.count(b"\n")
            else:
                eof = True
        if held >= rows:
            cut = -1
            for _ in range(rows):
                cut = buf.index(b"\n", cut + 1)
            cut, taken = cut + 1, rows
        else:
            cut, taken = len(buf), held
        if cut == 0 and line > 1:
            return
        yield bytes(buf[:cut]), line
        del buf[:cut]
        held, line = held - taken, line + taken
        if eof and not buf:
            return


def parquet_chunks(path: str | Path, file: str, rows: int) -> Iterator[pl.DataFrame]:
    """A Parquet file in frames of ``rows`` records (the last one shorter), ``_line`` = record
    number in the file (1-based), decoded one batch at a time; an empty file gives one empty
    frame. A file whose footer cannot be read (truncated) is refused before any frame."""

    def unreadable(exc: Exception) -> BillingFileError:
        return BillingFileError(file, f"not a readable Parquet file (truncated?): {exc}")

    try:
        schema = pl.read_parquet_schema(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise unreadable(exc) from None
    offset = 1
    try:
        for batch in pl.scan_parquet(path).collect_batches(chunk_size=rows):
            if batch.height == 0:
                continue
            yield batch.with_row_index(LINE, offset=offset).with_columns(pl.col(LINE).cast(pl.Int64))
            offset += batch.height
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise unreadable(exc) from None
    if offset == 1:
        yield (
            pl.DataFrame(schema=schema)
            .with_row_index(LINE, offset=1)
            .with_columns(pl.col(LINE).cast(pl.Int64))
        )


# --- opening export files ----------------------------------------------------------------------

_ZIP_MAGIC = b"PK\x03\x04"
_STREAM_ERRORS = (EOFError, OSError, zlib.error, zipfile.BadZipFile)


def _stream_error(label: str, exc: BaseException, layers: list[str]) -> BillingFileError:
    if isinstance(exc, zipfile.BadZipFile) or layers[-1:] == ["zip"]:
        return BillingFileError(label, f"truncated or corrupt ZIP archive ({exc})")
    if layers:
        return BillingFileError(label, f"truncated or corrupt gzip stream ({exc})")
    return BillingFileError(label, f"cannot read: {getattr(exc, 'strerror', None) or exc}")


#: Names of export files inside a ZIP archive (what a ZIP of several files is searched for).
_EXPORT_NAMES = (".csv", ".csv.gz", ".jsonl", ".json", ".ndjson", ".parquet", ".gz")


def zip_member(archive: zipfile.ZipFile, label: str) -> str:
    """The export file a ZIP archive holds: its only member, else its only export file by name
    (``.csv``, ``.jsonl``, ``.parquet``, …); none or several refuse the file, naming what it holds."""
    members = [m for m in archive.namelist() if not m.endswith("/")]
    if len(members) == 1:
        return members[0]
    exports = [m for m in members if m.lower().endswith(_EXPORT_NAMES)]
    if len(exports) == 1:
        return exports[0]
    held = ", ".join(members[:5]) + (", …" if len(members) > 5 else "") if members else "nothing"
    raise BillingFileError(
        label,
        f"a ZIP archive is read when it holds one export file (CSV, JSON Lines or Parquet); this one"
        f" holds {len(exports)} among its {len(members)} members ({held})",
    )


def zip_member_name(path: Path) -> str | None:
    """The name of the export file inside the ZIP archive ``path`` (None: not a readable ZIP of one)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return zip_member(archive, str(path))
    except (BillingFileError, zipfile.BadZipFile, OSError):
        return None


def check_explicit(path: Path, suffixes: Iterable[str], source: str) -> None:
    """A file named explicitly as the connector's ``path`` must be one it reads: an export file by
    its name (optionally ``.gz``) or a ``.zip`` of one — anything else is refused with a message
    rather than skipped in silence (a directory's other files are skipped)."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".zip") or any(name.endswith(s) for s in suffixes):
        return
    raise BillingFileError(
        str(path),
        f"not {'an' if source[:1] in 'AEIOU' else 'a'} {source} export file by its name: expected"
        f" {', '.join(sorted(set(suffixes)))}"
        " (optionally .gz), or a .zip of one",
    )


@contextlib.contextmanager
def open_stream(path: Path, label: str) -> Iterator[tuple[Callable[[int], bytes], bool]]:
    """An export file's content as a stream — ``(read(n), compressed)`` — with a ZIP of one member
    (legacy CUR) and gzip undone by their magic bytes, whatever the name (a ZIP member may itself
    be gzip). Read and decompression errors become the file's :class:`BillingFileError`. A
    truncated gzip or a ZIP member failing its CRC shows only at the end of the stream: parsers
    read a compressed file through once first (and drop it), so it fails before its first batch."""
    layers: list[str] = []
    with contextlib.ExitStack() as stack:
        try:
            stream: IO[bytes] = stack.enter_context(path.open("rb"))
            head = stream.read(4)
            stream.seek(0)
            if head == _ZIP_MAGIC:
                layers.append("zip")
                archive = stack.enter_context(zipfile.ZipFile(stream))
                member = zip_member(archive, label)
                with archive.open(member) as probe:
                    head = probe.read(4)
                stream = stack.enter_context(archive.open(member))
            if head[:2] == _GZIP_MAGIC:
                layers.append("gzip")
                stream = stack.enter_context(cast(IO[bytes], gzip.GzipFile(fileobj=stream, mode="rb")))
        except _STREAM_ERRORS as exc:
            raise _stream_error(label, exc, layers) from None

        def read(size: int) -> bytes:
            try:
                return stream.read(size)
            except _STREAM_ERRORS as exc:
                raise _stream_error(label, exc, layers) from None

        yield read, bool(layers)
