"""``gcp_billing`` streaming a file in chunks of ``chunk_rows`` records (issue 5: bounded memory):
chunks of 7 records read in tiny blocks give exactly the lines of reading the file whole — for
JSONL, JSONL.gz, CSV and Parquet — including the per-resource GPU count and machine type, which
come from rows of the resource in other chunks; refusals in a later chunk name the file's own line;
a broken file (truncated gzip, a required field no record has) fails before any batch; the window
selects a file whole."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import re
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch, BillingFileError
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gcp"
JSONL = FIXTURES / "billing_export_resource_v1_2025-09.jsonl"  # 100 records, lines 1..100
FLAT = FIXTURES / "billing_export_resource_v1_2025-09_flat.csv"  # header + 100 records, lines 2..101
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
G1 = "4815162342108301234"  # a3-highgpu-8g, 8 H100s


def read(
    path: Path,
    *,
    start: dt.datetime = SEP,
    end: dt.datetime = OCT,
    block_bytes: int = 1 << 20,
    **keys: object,
) -> list[BillingBatch]:
    config = GcpBillingConfig(name="bills", type="gcp_billing", path=str(path), **keys)
    batches = list(GcpBillingConnector(config, block_bytes=block_bytes).read(start, end))
    for batch in batches:
        assert batch.read == batch.lines.height + len(batch.refused) + batch.skipped
    return batches


def lines_of(batches: list[BillingBatch]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches])


def refusals(batches: list[BillingBatch]) -> list[tuple[int | None, str | None, str]]:
    return [(r.line, r.column, r.reason) for b in batches for r in b.refused]


def variants(folder: Path, data: bytes) -> dict[str, Path]:
    folder.mkdir()
    paths = {"jsonl": folder / "e.jsonl", "gz": folder / "e.jsonl.gz", "parquet": folder / "e.parquet"}
    paths["jsonl"].write_bytes(data)
    paths["gz"].write_bytes(gzip.compress(data))
    pl.read_ndjson(paths["jsonl"]).write_parquet(paths["parquet"], row_group_size=10)
    return paths


@pytest.mark.parametrize("kind", ["jsonl", "gz", "parquet", "csv"])
def test_chunks_of_seven_give_the_lines_of_the_whole_file(tmp_path: Path, kind: str) -> None:
    paths = variants(tmp_path / "v", JSONL.read_bytes())
    paths["csv"] = FLAT
    whole = read(paths[kind])
    chunked = read(paths[kind], chunk_rows=7, block_bytes=64)
    assert len(whole) == 1 and whole[0].read == 100
    if kind != "csv":  # a CSV chunk is ~7 records by size (csv_chunks): 100 records, more than one
        assert [b.read for b in chunked] == [7] * 14 + [2]
    assert len(chunked) > 1 and sum(b.read for b in chunked) == 100
    assert {b.source_file for b in chunked} == {str(paths[kind])}
    assert all(b.period_start is None and b.period_end is None for b in chunked)
    assert lines_of(chunked).equals(whole[0].lines)
    assert refusals(chunked) == [] == refusals(whole)
    if kind == "csv":
        return
    # what the chunking had to get from other chunks: G1's core/RAM/SSD rows (gpu_count 8,
    # a3-highgpu-8g) in a chunk holding none of G1's GPU rows
    lonely = [b.lines for b in chunked if not b.lines.filter(pl.col("resource_id") == G1)["is_gpu_sku"].any()]
    lonely = pl.concat(lonely).filter(pl.col("resource_id") == G1)
    assert lonely.height > 0
    assert set(lonely["gpu_count"]) == {8} and set(lonely["instance_type"]) == {"a3-highgpu-8g"}
    assert set(lonely["gpu_hours"]) == {0}


def test_gpu_facts_from_the_last_chunk_reach_the_first(tmp_path: Path) -> None:
    rows = JSONL.read_bytes().splitlines()
    gpu = [r for r in rows if b"GPU running" in r]
    path = tmp_path / "gpu_last.jsonl"
    path.write_bytes(b"\n".join([r for r in rows if r not in gpu] + gpu) + b"\n")
    whole, chunked = read(path), read(path, chunk_rows=7)
    assert len(chunked) == 15
    first = chunked[0].lines
    assert not first["is_gpu_sku"].any() and first["gpu_count"].null_count() < first.height
    assert lines_of(chunked).equals(whole[0].lines)
    assert lines_of(whole).filter(pl.col("is_gpu_sku"))["gpu_hours"].sum() == 140


def test_refusals_in_a_later_chunk_name_the_files_line(tmp_path: Path) -> None:
    rows = JSONL.read_bytes().splitlines()
    rows[49] = rows[49].replace(b'"currency":"USD"', b'"currency":"USX"')  # line 50, chunk 8
    rows[92] = rows[92][:200]  # line 93, chunk 14: truncated
    rows.append(rows[10])  # line 101, chunk 15: line 11 again (chunk 2)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    whole, chunked = read(path), read(path, chunk_rows=7, block_bytes=100)
    assert [(b.read, len(b.refused)) for b in chunked if b.refused] == [(7, 1), (7, 1)]
    assert [r[:2] for r in refusals(chunked)] == [(50, "currency"), (93, None)]
    assert refusals(chunked)[1][2].startswith("not JSON (truncated?)")
    # a repeat in another chunk is left to the ingestor (it checks keys against the database)
    assert refusals(whole)[2] == (101, None, "duplicated line: the same as line 11")
    assert lines_of(chunked).filter(pl.col("line_no") != 101).equals(whole[0].lines)


def test_csv_refusal_in_a_later_chunk(tmp_path: Path) -> None:
    rows = list(csv.reader(io.StringIO(FLAT.read_text())))
    rows[59][rows[0].index("cost")] = "6,70"  # file line 60
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as out:
        csv.writer(out, lineterminator="\n").writerows(rows)
    whole, chunked = read(path), read(path, chunk_rows=7, block_bytes=128)
    assert refusals(chunked) == refusals(whole) == [(60, "cost", "not a number: '6,70'")]
    assert lines_of(chunked).equals(whole[0].lines) and lines_of(chunked).height == 99


def test_a_broken_file_fails_before_any_batch_and_the_next_is_read(tmp_path: Path) -> None:
    data = JSONL.read_bytes()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(data)[:-20])  # truncated gzip
    (tmp_path / "b.jsonl").write_bytes(data.replace(b'"cost":', b'"kost":'))  # no record has "cost"
    (tmp_path / "c.jsonl").write_bytes(data)
    config = GcpBillingConfig(name="b", type="gcp_billing", path=str(tmp_path), chunk_rows=7)
    batches = GcpBillingConnector(config, block_bytes=64).read(SEP, OCT)
    # Each unreadable file is yielded as its error, before any batch of it; the next file follows.
    truncated, missing = next(batches), next(batches)
    assert isinstance(truncated, BillingFileError)
    assert re.search(r"a\.jsonl\.gz: truncated or corrupt gzip stream", str(truncated))
    assert isinstance(missing, BillingFileError)
    assert re.search(r'b\.jsonl, line 1, column "cost": missing column "cost"', str(missing))
    rest = list(batches)
    assert {b.source_file for b in rest} == {str(tmp_path / "c.jsonl")} and len(rest) == 15


def test_a_field_missing_from_one_chunk_only_refuses_its_rows(tmp_path: Path) -> None:
    rows = JSONL.read_bytes().splitlines()
    rows[7:14] = [r.replace(b'"cost":', b'"kost":') for r in rows[7:14]]  # lines 8-14: all of chunk 2
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    whole, chunked = read(path), read(path, chunk_rows=7)
    expected = [(n, "cost", "empty where a number is required: None") for n in range(8, 15)]
    assert refusals(chunked) == refusals(whole) == expected
    assert lines_of(chunked).equals(whole[0].lines)


def test_the_window_selects_a_chunked_file_whole(tmp_path: Path) -> None:
    hour = dt.datetime(2025, 9, 9, 7, tzinfo=dt.UTC), dt.datetime(2025, 9, 9, 8, tzinfo=dt.UTC)
    chunked = read(JSONL, start=hour[0], end=hour[1], chunk_rows=7)
    assert len(chunked) == 15 and lines_of(chunked).equals(read(JSONL)[0].lines)
    assert read(JSONL, start=OCT, end=OCT + dt.timedelta(days=30), chunk_rows=7) == []
    later = dt.datetime(2025, 9, 9, 8, tzinfo=dt.UTC), dt.datetime(2025, 9, 15, 6, tzinfo=dt.UTC)
    assert read(JSONL, start=later[0], end=later[1], chunk_rows=7) == []
