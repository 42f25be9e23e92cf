"""``focus`` reading a file as a stream, one chunk in memory at a time (issue 5): small chunks read
in tiny blocks give exactly the lines of one whole chunk for CSV, CSV.gz, Parquet and gzip'ed
Parquet; every batch of a file carries the file's billing period (the span over all its records,
known before the first batch); refusals and duplicates in a later chunk name the file's own lines;
a truncated gzip is refused before any batch."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch, BillingFileError
from connectors.focus import FocusConfig, FocusConnector

FIXTURE = Path(__file__).parents[1] / "fixtures" / "focus" / "focus_1.1_multicloud_2025-09.csv"
# header + 194 records, lines 2..195
SEP, OCT, NOV = (dt.datetime(2025, m, 1, tzinfo=dt.UTC) for m in (9, 10, 11))


def read(
    path: Path,
    *,
    window: tuple[dt.datetime, dt.datetime] = (SEP, OCT),
    block_bytes: int = 1 << 20,
    **keys: object,
) -> list[BillingBatch | BillingFileError]:
    config = FocusConfig(name="bills", type="focus", path=str(path), **keys)
    return list(FocusConnector(config, block_bytes=block_bytes).read(*window))


def batches(items: list[BillingBatch | BillingFileError]) -> list[BillingBatch]:
    assert all(isinstance(b, BillingBatch) for b in items), items
    return [b for b in items if isinstance(b, BillingBatch)]


def lines_of(items: list[BillingBatch | BillingFileError]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches(items)])


def refusals(items: list[BillingBatch | BillingFileError]) -> list[tuple[int | None, str | None, str]]:
    return [(r.line, r.column, r.reason) for b in batches(items) for r in b.refused]


def parquet_bytes() -> bytes:
    buffer = io.BytesIO()
    pl.read_csv(FIXTURE, infer_schema=False).write_parquet(buffer, row_group_size=20)
    return buffer.getvalue()


def write_variant(folder: Path, kind: str) -> Path:
    data = FIXTURE.read_bytes()
    path = (
        folder / {"csv": "f.csv", "gz": "f.csv.gz", "parquet": "f.parquet", "parquet.gz": "f.parquet"}[kind]
    )
    content = {
        "csv": lambda: data,
        "gz": lambda: gzip.compress(data),
        "parquet": parquet_bytes,
        "parquet.gz": lambda: gzip.compress(parquet_bytes()),  # told by its bytes, not its name
    }[kind]()
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", ["csv", "gz", "parquet", "parquet.gz"])
def test_small_chunks_in_tiny_blocks_give_the_lines_of_one_chunk(tmp_path: Path, kind: str) -> None:
    path = write_variant(tmp_path, kind)
    whole = batches(read(path, chunk_rows=1_000_000))
    small = batches(read(path, chunk_rows=7, block_bytes=64))
    assert len(whole) == 1
    if kind.startswith("parquet"):
        assert [b.read for b in small] == [7] * 27 + [5]  # 194 = 27 × 7 + 5, exactly 7 a chunk
    else:
        assert len(small) >= 20  # cut by size: 7 × the mean record length, at line ends
    assert all(b.read == b.lines.height + len(b.refused) + b.skipped for b in small)
    assert sum(b.read for b in small) == whole[0].read == 194
    assert lines_of(small).equals(lines_of(whole))
    first = 1 if kind.startswith("parquet") else 2
    assert lines_of(small)["line_no"].to_list() == list(range(first, first + 194))
    assert all((b.period_start, b.period_end) == (SEP, OCT) for b in [*whole, *small])
    assert lines_of(small)["gpu_hours"].sum() == Decimal(15676)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_gpu_machines_other_rows_get_0_gpu_hours_in_a_chunk_without_its_gpu_rows(
    tmp_path: Path, kind: str
) -> None:
    # GCP bills a machine's GPUs on their own SKU rows; its core/RAM/SSD rows get 0 GPU-hours —
    # also in a chunk that holds none of its GPU SKU rows: the GPU resources are the whole file's.
    gcp = pl.read_csv(FIXTURE, infer_schema=False).filter(pl.col("ProviderName") == "Google Cloud")
    path = tmp_path / f"gcp.{kind}"
    gcp.write_csv(path) if kind == "csv" else gcp.write_parquet(path)
    whole = batches(read(path, chunk_rows=1_000))
    small = batches(read(path, chunk_rows=1, block_bytes=32))
    # Parquet: one record a chunk; CSV: cut by size (the mean record length) at line ends.
    assert [b.read for b in small] == [1] * 12 if kind == "parquet" else len(small) >= 8
    assert lines_of(small).equals(lines_of(whole))
    n1 = [
        b.lines
        for b in small
        if (b.lines["sku_description"] == "N1 Predefined Instance Core running in Americas").any()
    ]
    assert len(n1) == 1 and not n1[0]["is_gpu_sku"].fill_null(False).any()  # no T4 SKU row in its chunk
    n1_core = n1[0].filter(pl.col("sku_description") == "N1 Predefined Instance Core running in Americas")
    assert (n1_core["usage_quantity"][0], n1_core["gpu_hours"][0]) == (Decimal(96), Decimal(0))
    assert lines_of(small)["gpu_hours"].sum() == Decimal(140)


def broken_copy(path: Path) -> None:
    """The fixture with line 120 holding a non-UTF-8 byte, line 150 a non-numeric BilledCost, line
    196 a repeat of line 12, and a last record (line 197) cut mid-line without its line end."""
    lines = FIXTURE.read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends with a line end
    lines = lines[:-1]
    header = lines[0].decode().split(",")
    fields = next(csv.reader([lines[149].decode()]))
    fields[header.index("BilledCost")] = "5x"
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    lines[149] = out.getvalue().encode()
    assert b"Example Research Billing" in lines[119]
    lines[119] = lines[119].replace(b"Research", b"Re\xffsearch", 1)
    lines.append(lines[11])
    lines.append(lines[30][: len(lines[30]) // 4])
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("compress", [False, True])
def test_refusals_and_duplicates_in_later_chunks_name_the_files_line(tmp_path: Path, compress: bool) -> None:
    plain = tmp_path / "src" / "focus.csv"
    plain.parent.mkdir()
    broken_copy(plain)
    path = tmp_path / ("focus.csv.gz" if compress else "focus.csv")
    path.write_bytes(gzip.compress(plain.read_bytes()) if compress else plain.read_bytes())
    got = batches(read(path, chunk_rows=7, block_bytes=100))
    assert len(got) >= 20
    by_line = {r.line: (i, r.column, r.reason, r.file) for i, b in enumerate(got) for r in b.refused}
    assert sorted(by_line) == [120, 150, 196, 197]
    assert all(where[3] == str(path) for where in by_line.values())
    assert by_line[120][0] >= 10 and by_line[120][1:3] == ("BillingAccountName", "bytes that are not UTF-8")
    assert by_line[150][0] > by_line[120][0]
    assert by_line[150][1:3] == ("BilledCost", "not a number: '5x'")
    # the repeat is in the last chunks, its first on line 12 in the second chunk: refused all the same
    assert by_line[196][0] >= len(got) - 2
    assert by_line[196][1:3] == (
        "line_key",
        "duplicate of line 12: an identical record (FOCUS has no line id)",
    )
    assert by_line[197][0] == len(got) - 1
    assert by_line[197][2].startswith("the record has fewer fields than the header (truncated?)")
    assert all(b.read == b.lines.height + len(b.refused) for b in got)
    assert sum(b.read for b in got) == 196 and sum(b.lines.height for b in got) == 192
    whole = read(path, chunk_rows=1_000_000)
    assert refusals(whole) == refusals(got)
    assert lines_of(whole).equals(lines_of(got))


def test_a_file_of_two_billing_periods_carries_their_span_on_every_batch(tmp_path: Path) -> None:
    frame = pl.read_csv(FIXTURE, infer_schema=False)
    october = frame.tail(20).with_columns(
        pl.lit("2025-10-01T00:00:00Z").alias("BillingPeriodStart"),
        pl.lit("2025-11-01T00:00:00Z").alias("BillingPeriodEnd"),
        pl.col("ChargePeriodStart").str.replace("2025-09-", "2025-10-"),
        pl.col("ChargePeriodEnd").str.replace("2025-09-", "2025-10-").str.replace("2025-10-01", "2025-10-31"),
    )
    # A period that cannot be one (two months) on one record does not make the span: that record is
    # refused alone.
    bad = frame.head(1).with_columns(pl.lit("2025-12-01").alias("BillingPeriodEnd"))
    path = tmp_path / "focus.csv"
    pl.concat([frame.head(100), bad, october]).write_csv(path)
    got = batches(read(path, chunk_rows=7))
    assert len(got) >= 14  # 121 records, cut by size
    assert all((b.period_start, b.period_end) == (SEP, NOV) for b in got)  # known from the first batch on
    assert [(r.line, r.column) for b in got for r in b.refused] == [(102, "BillingPeriodStart")]
    assert sum(b.lines.height for b in got) == 120
    # read for a window overlapping either month, not for another one
    assert len(batches(read(path, chunk_rows=7, window=(OCT, NOV)))) == len(got)
    assert read(path, chunk_rows=7, window=(NOV, NOV + dt.timedelta(days=30))) == []
