"""``aws_cur`` reading a file as a stream, one chunk in memory at a time (issue 5: a large CUR in
bounded memory): small chunks read in tiny blocks give exactly the lines of one whole chunk, for
CSV, CSV.gz, ZIP and Parquet; refusals in a later chunk name the file's own line; a truncated
gzip or ZIP is refused whole before any of its batches."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import zipfile
from pathlib import Path

import polars as pl
import pytest

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch, BillingFileError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2 = FIXTURES / "cur2_2025-09_daily.csv"  # header + 137 records, lines 2..138
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def read(path: Path, *, block_bytes: int = 1 << 20, **keys: object) -> list[BillingBatch | BillingFileError]:
    config = AwsCurConfig(name="bills", path=str(path), **keys)
    with AwsCurConnector(config, block_bytes=block_bytes) as connector:
        return list(connector.read(SEP, OCT))


def batches(items: list[BillingBatch | BillingFileError]) -> list[BillingBatch]:
    assert all(isinstance(b, BillingBatch) for b in items), items
    return [b for b in items if isinstance(b, BillingBatch)]


def lines_of(items: list[BillingBatch | BillingFileError]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches(items)])


def refusals(items: list[BillingBatch | BillingFileError]) -> list[tuple[int | None, str | None, str]]:
    return [(r.line, r.column, r.reason) for b in batches(items) for r in b.refused]


def write_variants(folder: Path) -> dict[str, Path]:
    data = CUR2.read_bytes()
    folder.mkdir()
    paths = {"csv": folder / "cur-00001.csv", "gz": folder / "cur-00001.csv.gz"}
    paths["csv"].write_bytes(data)
    paths["gz"].write_bytes(gzip.compress(data))
    paths["zip"] = folder / "cur-00001.csv.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("cur-00001.csv", data)
    paths["zip"].write_bytes(buffer.getvalue())
    paths["parquet"] = folder / "cur-00001.parquet"
    pl.read_csv(CUR2, infer_schema=False).write_parquet(paths["parquet"], row_group_size=20)
    return paths


@pytest.mark.parametrize("kind", ["csv", "gz", "zip", "parquet"])
def test_small_chunks_in_tiny_blocks_give_the_lines_of_one_chunk(tmp_path: Path, kind: str) -> None:
    path = write_variants(tmp_path / "in")[kind]
    whole = read(path, chunk_rows=1_000_000)
    small = read(path, chunk_rows=7, block_bytes=64)
    assert len(batches(whole)) == 1
    # CSV chunks are cut by size (7 × the first MiB's mean record length) at line ends; Parquet
    # in exactly 7 records: 137 = 19 × 7 + 4.
    if kind == "parquet":
        assert [b.read for b in batches(small)] == [7] * 19 + [4]
    else:
        assert len(batches(small)) >= 15
    assert sum(b.read for b in batches(small)) == sum(b.read for b in batches(whole)) == 137
    assert lines_of(small).equals(lines_of(whole))
    expected_lines = list(range(1, 138)) if kind == "parquet" else list(range(2, 139))
    assert lines_of(small)["line_no"].to_list() == expected_lines
    assert all(b.period_start == SEP and b.period_end == OCT for b in batches(small))
    # Byte for byte the lines of the plain CSV read whole (the file's name and Parquet's record
    # numbers aside).
    plain = lines_of(read(CUR2, chunk_rows=1_000_000)).drop("source_file", "line_no")
    assert lines_of(small).drop("source_file", "line_no").equals(plain)


def broken_copy(path: Path) -> list[bytes]:
    """The fixture with line 40 holding a non-UTF-8 byte, line 60 a non-numeric amount, and the
    last record (line 138) cut mid-line without its line end."""
    lines = CUR2.read_bytes().split(b"\n")
    header = lines[0].decode().split(",")
    amount = header.index("line_item_unblended_cost")
    fields = next(csv.reader([lines[59].decode()]))
    assert fields[amount] != ""
    fields[amount] = "5x"
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    lines[59] = out.getvalue().encode()
    lines[39] = lines[39].replace(b"Amazon", b"Amaz\xe9n", 1)
    assert b"\xe9" in lines[39]
    assert lines[-1] == b""  # the file ends with a line end
    lines = lines[:-1]
    lines[-1] = lines[-1][: len(lines[-1]) // 3]
    path.write_bytes(b"\n".join(lines))
    return lines


@pytest.mark.parametrize("compress", [False, True])
def test_refusals_in_later_chunks_name_the_files_line(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / ("cur.csv.gz" if compress else "cur.csv")
    broken_copy(tmp_path / "cur.csv")
    if compress:
        path.write_bytes(gzip.compress((tmp_path / "cur.csv").read_bytes()))
        (tmp_path / "cur.csv").unlink()
    items = read(path, chunk_rows=7, block_bytes=100)
    got = batches(items)
    assert len(got) >= 15
    by_line = {r.line: (i, r.column, r.reason, r.file) for i, b in enumerate(got) for r in b.refused}
    assert sorted(by_line) == [40, 60, 138]
    assert all(where[3] == str(path) for where in by_line.values())
    assert by_line[40][0] >= 2 and by_line[40][1] is not None  # in the 3rd chunk or later
    assert by_line[40][2] == "bytes that are not UTF-8"
    assert by_line[60][0] > by_line[40][0]
    assert by_line[60][1:3] == ("line_item_unblended_cost", "not a number: '5x'")
    assert by_line[138][0] == len(got) - 1
    assert by_line[138][2].startswith("the record has fewer fields than the header (truncated?)")
    assert sum(b.read for b in got) == 137
    assert sum(b.lines.height for b in got) == 134
    # The same refusals as reading the whole (uncompressed) text as one chunk.
    whole = read(path, chunk_rows=1_000_000)
    assert refusals(whole) == refusals(items)
    assert lines_of(whole).equals(lines_of(items))


def test_a_zip_member_failing_its_crc_is_refused_before_any_batch(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("cur-00001.csv", CUR2.read_bytes())
    data = bytearray(buffer.getvalue())
    at = data.index(b"Amazon", len(data) // 2)
    data[at : at + 6] = b"Amazan"  # one byte changed near the end: the CRC shows it at the end
    path = tmp_path / "cur-00001.csv.zip"
    path.write_bytes(bytes(data))
    items = read(path, chunk_rows=7)
    assert len(items) == 1 and isinstance(items[0], BillingFileError)
    assert items[0].row.file == str(path)
    assert "truncated or corrupt ZIP archive" in str(items[0])
    assert "CRC" in str(items[0])


def test_a_gzip_wrapped_parquet_file_is_read_in_chunks(tmp_path: Path) -> None:
    frame = pl.read_csv(CUR2, infer_schema=False)
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    path = tmp_path / "cur-00001.parquet.gz"
    path.write_bytes(gzip.compress(buffer.getvalue()))
    got = batches(read(path, chunk_rows=50, block_bytes=128))
    assert [b.read for b in got] == [50, 50, 37]
    plain = lines_of(read(CUR2)).drop("source_file", "line_no")
    assert pl.concat([b.lines for b in got]).drop("source_file", "line_no").equals(plain)


def test_a_truncated_parquet_file_is_refused_whole(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    pl.read_csv(CUR2, infer_schema=False).write_parquet(buffer)
    path = tmp_path / "cur-00001.parquet"
    path.write_bytes(buffer.getvalue()[:-100])
    items = read(path, chunk_rows=7)
    assert len(items) == 1 and isinstance(items[0], BillingFileError)
    assert items[0].row.file == str(path)
    assert "not a readable Parquet file (truncated?)" in str(items[0])


def test_chunks_are_cut_into_records_in_a_thread_of_their_own_ahead_of_the_mapping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The record scan of a CSV (read, decode, RFC 4180 check) runs in thread billing-scan while
    the chunk before it is parsed and mapped — here the second chunk's scan starts while the first
    chunk's mapping is held — and the lines are those of reading it in one thread."""
    import threading

    from connectors import aws_cur, billing_driver

    whole = lines_of(read(CUR2, chunk_rows=20))
    scanning, mapping = billing_driver.csv_record_chunks, aws_cur._normalize
    scanned: list[str] = []
    second_scanned = threading.Event()

    def noting_scan(*args: object, **kwargs: object) -> object:
        for chunk in scanning(*args, **kwargs):  # type: ignore[arg-type]
            scanned.append(threading.current_thread().name)
            if len(scanned) == 2:
                second_scanned.set()
            yield chunk

    overlapped: list[bool] = []

    def held_mapping(*args: object, **kwargs: object) -> object:
        if not overlapped:  # the first chunk's mapping waits (bounded) for the next chunk's scan
            overlapped.append(second_scanned.wait(timeout=5))
        return mapping(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(billing_driver, "csv_record_chunks", noting_scan)
    monkeypatch.setattr(aws_cur, "_normalize", held_mapping)
    items = read(CUR2, chunk_rows=20)
    assert overlapped == [True]
    assert set(scanned) == {"billing-scan"} and len(scanned) == len(batches(items))
    assert lines_of(items).equals(whole)
