"""One billing-export driver: files of a store → batches, whatever the provider's layout.

A billing connector built on it is a *store* (where the files are: :mod:`connectors.billing_stores`)
and a *dialect* (what a file of that export holds: :class:`Dialect`). The driver alone owns what
every export shares, so it is written once and behaves the same for all of them:

* **opening** — :func:`connectors.billing_io.open_stream` undoes a ZIP of one export and gzip by
  their magic bytes, whatever the name; a compressed file is decompressed block by block to a
  temporary file first, which checks it to its end, so a truncated or corrupt one is refused before
  its first batch and never half imported; Parquet is told by its ``PAR1`` magic;
* **chunking** — a CSV is cut into RFC 4180 records (:func:`connectors.billing_io.csv_chunks`) in
  chunks of about ``chunk_rows`` records, a Parquet file decoded ``chunk_rows`` records at a time
  and turned into the text a CSV would hold (the dialect's :meth:`Dialect.parquet_text`); line
  numbers and refusals are the whole file's. A CSV chunk after the first is parsed with only the
  columns the file's reader maps (its ``read_columns``), and again whole when its ``normalize``
  asks for every column (:class:`EveryColumn`: a refused row's raw text is its whole record);
* **the window** — a file whose billing period (from its path or manifest, else the dialect's
  reading of its first chunk or first pass) does not overlap ``[start, end)`` is not read further;
* **duplicates** — a ``line_key`` seen before in the file, in this chunk or an earlier one, is
  refused (earlier chunks are remembered as 64-bit hashes with their first line: 16 bytes a line);
* **counts** — every batch has ``read == accepted + refused + skipped``;
* **file errors** — a file that cannot be read is *yielded* as its
  :class:`~connectors.billing.BillingFileError` (never raised), so the files after it are read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol, TypeVar

import numpy as np
import polars as pl

from connectors.billing_io import (
    BLOCK_BYTES,
    LINE,
    Normalized,
    RecordChunk,
    csv_chunks,
    csv_record_chunks,
    jsonl_chunks,
    null_literals,
    open_stream,
    parquet_chunks,
)
from connectors.prefetch import Prefetched
from connectors.sdk import BillingBatch, BillingFileError, Finding, RefusedRow, conform, merge_findings
from connectors.sdk.billing import FINDING_EXAMPLES

Period = tuple[dt.datetime, dt.datetime]
Format = Literal["csv", "jsonl", "parquet"]
_P = TypeVar("_P", bound="Planned")
Chunk = tuple[pl.DataFrame, list[RefusedRow]]
#: A chunk as the driver reads it: its frame (of the columns the dialect reads, once it has said
#: which), its refusals, and — where the frame lacks some of the file's columns — how to parse the
#: same records with every column.
ReadChunk = tuple[pl.DataFrame, list[RefusedRow], Callable[[], pl.DataFrame] | None]

_PARQUET_MAGIC = b"PAR1"
#: Bytes of a CSV read at a time by a first pass (cut at the last line end).
PASS_BYTES = 1 << 22
#: Records of a Parquet file decoded at a time by a first pass.
PASS_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class ExportFile:
    """One file a store lists: ``label`` names it in every message; ``open()`` gives a local path
    for as long as the file is read (a store copies a remote object to a temporary file);
    ``period`` is the billing period its path or manifest names, when one does."""

    label: str
    open: Callable[[], contextlib.AbstractContextManager[Path]]
    period: Period | None = None
    assembly_id: str | None = None


class Planned(Protocol):
    """A file a store's plan names, with the billing period its folder or manifest gives."""

    @property
    def period_start(self) -> dt.datetime | None: ...
    @property
    def period_end(self) -> dt.datetime | None: ...
    @property
    def assembly_id(self) -> str | None: ...


def planned_files(
    plan: Iterable[_P | BillingFileError],
    label: Callable[[_P], str],
    open_file: Callable[[_P], contextlib.AbstractContextManager[Path]],
) -> Iterator[ExportFile | BillingFileError]:
    """A store's plan as the driver's files (a plan's error stays an item)."""
    for item in plan:
        if isinstance(item, BillingFileError):
            yield item
            continue
        start, end = item.period_start, item.period_end
        period = None if start is None or end is None else (start, end)
        yield ExportFile(label(item), functools.partial(open_file, item), period, item.assembly_id)


class OpenedFile:
    """A file being read: a plain local copy (``local``), whether it is Parquet, its columns, and a
    first pass over only some columns (:meth:`blocks`) for the facts a dialect needs before the
    first batch."""

    def __init__(self, label: str, local: Path, form: Format, dialect: Dialect, block_bytes: int) -> None:
        self.label, self.local, self.format = label, local, form
        self.columns: list[str] = []
        #: the columns the file's reader maps (its ``read_columns``), once it has seen the header:
        #: CSV chunks after that parse only these (None: every column)
        self.read_columns: list[str] | None = None
        self._dialect, self._block = dialect, block_bytes

    @property
    def parquet(self) -> bool:
        return self.format == "parquet"

    def chunks(self, rows: int) -> Generator[ReadChunk]:
        """The file as text frames of about ``rows`` records (``_line``: the file's), null literals
        (``NULL``, ``\\N``) read as empty fields; JSON Lines as frames of their records (nested
        fields as Polars structs and lists). A CSV chunk read after :attr:`read_columns` is set
        holds only those columns (Polars' parse costs with the columns it makes: a CUR 2.0 file
        has 60 and its mapping reads 28), and comes with how to parse it whole; a chunk holding
        bytes that are not UTF-8 is parsed whole at once (its refusal names the column that holds
        them)."""
        if self.format == "jsonl":
            with _opened(self.local, self.label) as stream:
                for frame, refused in jsonl_chunks(
                    stream.read, self.label, rows, self._block, keys=self._dialect.raw_keys
                ):
                    yield null_literals(frame), refused, None
            return
        if self.parquet:
            for frame in parquet_chunks(self.local, self.label, rows):
                yield null_literals(self._dialect.parquet_text(frame)), [], None
            return
        with (
            _opened(self.local, self.label) as stream,
            # the next chunk is read and cut into records in a thread of its own while this one is
            # parsed and mapped: on a CUR the two take about the same CPU, and one after the other
            # they were the import's slowest chain (BENCHMARKS.md)
            Prefetched(
                csv_record_chunks(
                    stream.read, self.label, rows, block=self._block, keys=self._dialect.raw_keys
                ),
                name="billing-scan",
            ) as record_chunks,
        ):
            for chunk in record_chunks:
                wanted = self.read_columns
                if wanted is None or chunk.records.undecodable:
                    frame, refused = chunk.parse()
                    yield null_literals(frame), refused, None
                    continue
                frame, refused = chunk.parse([c for c in chunk.names if c in wanted])
                yield null_literals(frame), refused, functools.partial(_whole, chunk)

    def blocks(self, wanted: list[str]) -> Iterator[pl.DataFrame]:
        """The ``wanted`` columns (those the file has, in file order) as text, one large block at a
        time, without ``_line`` and without refusals (the batches report those). Polars' lazy CSV
        scan holds the whole file in memory (261 MB for a 474 MB file), so CSV goes through the
        same RFC 4180 records as the batches, only the wanted columns parsed."""
        present = [c for c in self.columns if c in wanted]
        try:
            if self.parquet:
                scan = pl.scan_parquet(self.local).select(present)
                for batch in scan.collect_batches(chunk_size=PASS_ROWS):
                    yield null_literals(self._dialect.parquet_text(batch))
                return
            with _opened(self.local, self.label) as stream:
                pieces = csv_chunks(stream.read, self.label, 1, columns=present, chunk_bytes=PASS_BYTES)
                for frame, _refused in pieces:
                    yield null_literals(frame.drop(LINE))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise BillingFileError(
                self.label, f"not a readable export file: {str(exc).splitlines()[0]}"
            ) from None


def _whole(chunk: RecordChunk) -> pl.DataFrame:
    """``chunk``'s records parsed with every column (its refusals are the same as any parse's)."""
    return null_literals(chunk.parse()[0])


class EveryColumn(Exception):  # noqa: N818 - a signal, not an error
    """Raised by :meth:`FileDialect.normalize` on a chunk holding only its ``read_columns`` when the
    outcome needs the file's other columns too (a refused row's raw text is the whole record): the
    driver parses the chunk's records again whole and normalizes that."""


class FileDialect(Protocol):
    """What a dialect knows of one file once it has seen its first chunk."""

    #: the file's billing period (every batch carries it; the window check uses it); None: the
    #: file names none, and its lines are replaced by file.
    period: Period | None
    #: Optional (``getattr``): the columns ``normalize`` reads. CSV chunks after the first are
    #: then parsed with only these, and ``normalize`` raises :class:`EveryColumn` where it needs
    #: the others; absent or None, every column is parsed.

    def normalize(self, chunk: pl.DataFrame) -> Normalized:
        """A text chunk (``_line`` numbered) → (lines with ``line_no`` and ``line_key``, refused,
        findings on the lines: :meth:`connectors.billing_io.Checks.flag`)."""
        ...

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        """The refusal of ``line``, whose ``line_key`` is ``key``, already on line ``first``."""
        ...

    def finish(self, read: int, accepted: int, refused: int) -> None:
        """The file is read (to log its counts)."""
        ...


class Dialect(Protocol):
    """A provider's export layout (see docs/billing.md, "Writing a billing dialect")."""

    #: CSV and JSONL chunks get a ``line_key`` column: ``sha1:`` of each record's raw bytes (for
    #: an export without a line id whose key is the line as written).
    raw_keys: bool = False
    #: Where a repeated ``line_key`` is looked for: the whole file, or only its chunk (an export
    #: whose repeats across chunks are left to the ingestor, which checks keys in the database).
    duplicates_in: Literal["file", "chunk"] = "file"

    def file_format(self, label: str, head: bytes) -> Format:
        """How to read the file: by its first bytes (``PAR1``: Parquet), else CSV."""
        return "parquet" if head == _PARQUET_MAGIC else "csv"

    def parquet_text(self, frame: pl.DataFrame) -> pl.DataFrame:
        """A Parquet frame's typed columns as the text a CSV export of the same data holds."""
        ...

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> FileDialect:
        """Check the header (a missing required column raises the file's ``BillingFileError``,
        naming it), take the billing period (``period``: the path's or manifest's; else from
        ``first`` or a first pass, ``opened.blocks``) and any facts needed before the first batch."""
        ...


class SkipFile(Exception):  # noqa: N818 - a signal, not an error
    """Raised by :meth:`Dialect.begin` when the file has nothing for the window (known only from
    its first chunk): it is not read further, and nothing is reported."""


class Duplicates:
    """The line keys of one file seen so far: 64-bit hashes and the line each was first on.

    Kept as a few sorted runs of hashes (a run merged into the one before it once it is at least
    half its size, so there are O(log n) runs), each chunk looked up by binary search in every
    run: a chunk costs O(chunk × log² n), not a join against every line seen so far (which made a
    10 M-line file quadratic: 500 chunks each hashing up to 10 M earlier lines)."""

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted hashes, first lines)

    def _earlier(self, hashes: np.ndarray) -> np.ndarray:
        """The first line of each hash seen before this chunk, -1 where none. Looked up in sorted
        order (consecutive binary searches share their cache lines: a third of the time in runs of
        millions of hashes, where random lookups each missed ~20 times)."""
        order = np.argsort(hashes)
        needles = hashes[order]
        first = np.full(len(hashes), -1, dtype=np.int64)
        for keys, firsts in self._runs:
            at = np.minimum(np.searchsorted(keys, needles), len(keys) - 1)
            hit = (keys[at] == needles) & (first < 0)
            first[hit] = firsts[at[hit]]
        found = np.empty(len(hashes), dtype=np.int64)
        found[order] = first
        return found

    def _remember(self, hashes: np.ndarray, firsts: np.ndarray) -> None:
        if not len(hashes):
            return
        order = np.argsort(hashes, kind="stable")
        self._runs.append((hashes[order], firsts[order]))
        while len(self._runs) > 1 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            (k2, f2), (k1, f1) = self._runs.pop(), self._runs.pop()
            keys, firsts_ = np.concatenate([k1, k2]), np.concatenate([f1, f2])
            order = np.argsort(keys, kind="stable")
            self._runs.append((keys[order], firsts_[order]))

    def refuse(self, lines: pl.DataFrame, reader: FileDialect) -> tuple[pl.DataFrame, list[RefusedRow]]:
        """``lines`` (in line order) without the repeats of a key of this chunk or an earlier one;
        the first stays, each repeat is refused by the dialect's :meth:`FileDialect.duplicate`."""
        if lines.is_empty():
            return lines, []
        tagged = lines.with_columns(
            pl.col("line_key").hash(seed=0).alias("_hash"),
            pl.col("line_no").min().over("line_key").alias("_first"),
        )
        earlier = self._earlier(tagged["_hash"].to_numpy())
        tagged = tagged.with_columns(
            pl.when(pl.Series(earlier) >= 0)
            .then(pl.Series(earlier))
            .otherwise(pl.col("_first"))
            .alias("_first")
        )
        repeat = pl.col("line_no") != pl.col("_first")
        # no cost on a repeat: its money is booked once, with its first line (the rows' share counts it)
        refused = [
            reader.duplicate(line, first, key)
            for line, first, key in tagged.filter(repeat).select("line_no", "_first", "line_key").iter_rows()
        ]
        kept = tagged.filter(~repeat)
        self._remember(kept["_hash"].to_numpy(), kept["line_no"].cast(pl.Int64).to_numpy())
        return kept.drop("_hash", "_first"), refused


def overlaps(period: Period, start: dt.datetime, end: dt.datetime) -> bool:
    return period[0] < end and period[1] > start


def read_files(
    files: Iterator[ExportFile | BillingFileError],
    dialect: Dialect,
    start: dt.datetime,
    end: dt.datetime,
    *,
    chunk_rows: int,
    block_bytes: int = BLOCK_BYTES,
) -> Iterator[BillingBatch | BillingFileError]:
    """The batches of every file whose billing period overlaps ``[start, end)``; a store's listing
    error or a file that cannot be read is yielded in its place and the next file is read."""
    for item in files:
        if isinstance(item, BillingFileError):
            yield item
            continue
        try:
            yield from read_file(item, dialect, start, end, chunk_rows=chunk_rows, block_bytes=block_bytes)
        except BillingFileError as error:
            yield error


def read_file(
    file: ExportFile,
    dialect: Dialect,
    start: dt.datetime | None,
    end: dt.datetime | None,
    *,
    chunk_rows: int,
    block_bytes: int = BLOCK_BYTES,
) -> Iterator[BillingBatch]:
    """One file's batches (raises its ``BillingFileError``; :func:`read_files` yields it)."""
    label = file.label
    with contextlib.ExitStack() as stack:
        opened = _plain(stack.enter_context(file.open()), label, stack, dialect, block_bytes)
        chunks = opened.chunks(chunk_rows)
        stack.callback(chunks.close)
        first = next(chunks)  # csv_chunks and parquet_chunks yield at least one frame
        opened.columns = [c for c in first[0].columns if c != LINE]
        try:
            reader = dialect.begin(opened, first[0], file.period)
        except SkipFile:
            return
        opened.read_columns = getattr(reader, "read_columns", None)
        period = reader.period
        if period is not None and start is not None and end is not None and not overlaps(period, start, end):
            return  # a file of other billing periods
        duplicates = Duplicates()
        read = accepted = refused_count = 0
        for frame, io_refused, whole in _prepend(first, chunks):
            batch_read = frame.height + len(io_refused)
            if dialect.duplicates_in == "chunk":
                duplicates = Duplicates()
            try:
                lines, bad, findings = reader.normalize(frame)
            except EveryColumn:
                assert whole is not None, "only a chunk read in part can lack a column"
                frame, whole = whole(), None
                lines, bad, findings = reader.normalize(frame)
            lines, repeated = duplicates.refuse(lines, reader)
            if repeated:
                if whole is not None:  # the repeated records are normalized again: whole, as any
                    frame = whole()
                findings = _without_repeats(findings, frame, repeated, reader)
            lines = conform(lines)
            quantity = getattr(reader, "quantity_column", None)
            findings = merge_findings([*findings, *capacity_findings(lines, label, quantity)])
            refused = sorted([*io_refused, *bad, *repeated], key=lambda r: r.line or 0)
            read, accepted, refused_count = (
                read + batch_read,
                accepted + lines.height,
                refused_count + len(refused),
            )
            yield BillingBatch(
                lines=lines,
                source_file=label,
                refused=refused,
                read=batch_read,
                period_start=None if period is None else period[0],
                period_end=None if period is None else period[1],
                assembly_id=file.assembly_id,
                findings=findings,
                quantity_column=quantity,
            )
        reader.finish(read, accepted, refused_count)


def _without_repeats(
    findings: list[Finding], frame: pl.DataFrame, repeated: list[RefusedRow], reader: FileDialect
) -> list[Finding]:
    """``findings`` of a chunk less those of its rows refused as repeats (a finding counts imported
    rows only): the repeated records are normalized again alone — rare, and a dialect's
    normalization is a function of its rows — and their counts and examples taken out."""
    lines = {r.line for r in repeated}
    _, _, theirs = reader.normalize(frame.filter(pl.col(LINE).is_in(sorted(lines))))
    less = {(f.file, f.rule, f.column, f.reason, f.provider): f.count for f in merge_findings(theirs)}
    kept = []
    for f in findings:
        count = f.count - less.get((f.file, f.rule, f.column, f.reason, f.provider), 0)
        if count > 0:
            examples = tuple(e for e in f.examples if e[0] not in lines)
            kept.append(dataclasses.replace(f, count=count, examples=examples))
    return kept


#: A line may bill a little more than its GPUs × hours (rounding of a daily sum) before it is a finding.
CAPACITY_SLACK = 1.01


def capacity_findings(lines: pl.DataFrame, file: str, column: str | None) -> list[Finding]:
    """A usage line billing more GPU-hours than its instance's GPUs × the hours of its charge period
    (an Azure row of 49.9 GPU-hours in one day on a 1-GPU VM) is imported — the money is the
    bill's — and counted as finding ``gpu_hours_over_capacity`` on ``column``, the file's quantity
    column. Lines whose GPU count the source gives are checked here; those whose count comes from
    the instance catalog, by the ingestor once it has filled them in."""
    if lines.is_empty():
        return []
    hours = (pl.col("charge_end") - pl.col("charge_start")).dt.total_seconds() / 3600
    over = (
        pl.col("gpu_count").is_not_null()
        & (pl.col("gpu_count") > 0)
        & (pl.col("gpu_hours").cast(pl.Float64) > pl.col("gpu_count") * hours * CAPACITY_SLACK)
    ).fill_null(False)
    hits = lines.filter(over)
    if hits.is_empty():
        return []
    column = column or "usage_quantity"
    reason = "more GPU-hours than the instance's GPUs × the hours of the charge period"
    found = []
    for (provider,), group in hits.group_by("provider", maintain_order=True):
        examples = tuple(
            (line, f"{gpu_hours} GPU-h ({count} GPU, {start:%Y-%m-%d %H:%M}..{end:%Y-%m-%d %H:%M})")
            for line, gpu_hours, count, start, end in group.head(FINDING_EXAMPLES)
            .select("line_no", "gpu_hours", "gpu_count", "charge_start", "charge_end")
            .iter_rows()
        )
        found.append(
            Finding(file, "gpu_hours_over_capacity", column, reason, group.height, examples, provider)
        )
    return found


def _plain(path: Path, label: str, stack: contextlib.ExitStack, dialect: Dialect, block: int) -> OpenedFile:
    """``path`` as a plain local file: a ZIP member or gzip stream is copied out to a temporary
    file, block by block — decompressed to its end, so a truncated one fails here, before any
    batch."""
    with open_stream(path, label) as (read, compressed):
        head = read(4)
        form = dialect.file_format(label, head)
        if not compressed:
            return OpenedFile(label, path, form, dialect, block)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-ledger-billing-")))
        local = folder / "export"
        try:
            with local.open("wb") as out:
                out.write(head)
                while piece := read(block):
                    out.write(piece)
        except OSError as exc:
            raise BillingFileError(label, f"cannot copy to a temporary file: {exc.strerror or exc}") from None
    return OpenedFile(label, local, form, dialect, block)


@contextlib.contextmanager
def _opened(path: Path, label: str) -> Iterator[IO[bytes]]:
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise BillingFileError(label, f"cannot read: {exc.strerror or exc}") from None
    with stream:
        yield stream


def _prepend(first: ReadChunk, rest: Iterator[ReadChunk]) -> Iterator[ReadChunk]:
    yield first
    yield from rest
