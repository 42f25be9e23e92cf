"""``azure_cost`` reading an export file as a stream, one chunk in memory at a time (issue 5: a
large export in bounded memory): small chunks read in tiny blocks give exactly the lines of one
whole chunk (CSV, CSV.gz, local and Blob); refusals in a later chunk name the file's own line; a
truncated gzip is refused before any of its batches; the billing period and the dataset hold for
every batch of a file."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from azurefake.blob import FakeBlobService, fake_blob_service
from azurefake.server import StaticCredential

from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.billing import BillingBatch, BillingFileError

EA = Path(__file__).parents[1] / "fixtures" / "azure" / "ea_amortized_cost_2025-09.csv"  # 74 records
HEADER, *ROWS = EA.read_bytes().splitlines(keepends=True)  # ROWS[i] is line i + 2
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
NOV = dt.datetime(2025, 11, 1, tzinfo=dt.UTC)
A1 = (
    "/subscriptions/6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f/resourcegroups/rg-ml-train/providers/"
    "microsoft.compute/virtualmachines/ndh100-train-01"
)
RUN = "exports/gpu-amortized/20250901-20250930/202510020305/7d4e2a10-new0-4f7e-8b21-9e0c5d3a7f42"


def read(
    path: Path,
    *,
    block_bytes: int = 1 << 20,
    start: dt.datetime = SEP,
    end: dt.datetime = OCT,
    **keys: object,
) -> list[BillingBatch]:
    config = AzureCostConfig(name="bills", path=str(path), **keys)  # type: ignore[arg-type]
    with AzureCostConnector(config, block_bytes=block_bytes) as connector:
        return list(connector.read(start, end))  # type: ignore[arg-type]


def lines_of(batches: list[BillingBatch]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches])


def refusals(batches: list[BillingBatch]) -> list[tuple[int | None, str | None, str]]:
    return sorted((r.line, r.column, r.reason) for b in batches for r in b.refused)


def assert_counts_add_up(batches: list[BillingBatch]) -> None:
    assert all(b.read == b.lines.height + len(b.refused) + b.skipped for b in batches)


@pytest.mark.parametrize("kind", ["csv", "gz"])
def test_small_chunks_in_tiny_blocks_give_the_lines_of_one_chunk(tmp_path: Path, kind: str) -> None:
    path = tmp_path / ("cost.csv.gz" if kind == "gz" else "cost.csv")
    path.write_bytes(gzip.compress(EA.read_bytes()) if kind == "gz" else EA.read_bytes())
    whole = read(path, chunk_rows=1_000_000)
    small = read(path, chunk_rows=7, block_bytes=64)
    assert len(whole) == 1
    # Cut by size (7 × the mean record length) at line ends: about 74 / 7 chunks.
    assert len(small) >= 8
    assert [b.read for b in whole] == [74] and sum(b.read for b in small) == 74
    assert all(not b.refused for b in small)
    assert_counts_add_up(small)
    assert lines_of(small).equals(lines_of(whole))
    assert lines_of(small)["line_no"].to_list() == list(range(2, 76))
    assert {(b.period_start, b.period_end, b.source_file) for b in small} == {(SEP, OCT, str(path))}
    # The line key is still the SHA-1 of the raw line (what earlier, whole-file imports stored).
    expected = ["sha1:" + hashlib.sha1(r.rstrip(b"\n").rstrip(b"\r")).hexdigest() for r in ROWS]
    assert lines_of(small)["line_key"].to_list() == expected
    # The fixture's totals (fixtures/README.md): RI usage billed 0 in the amortized dataset.
    lines = lines_of(small)
    assert lines["effective_cost"].sum() == Decimal("70066.272")
    a1 = lines.filter(pl.col("resource_id") == A1)
    assert (a1["billed_cost"].sum(), a1["effective_cost"].sum()) == (0, Decimal("44065.92"))


def broken(path: Path) -> None:
    """The fixture with line 50 holding a non-numeric cost, line 60 a non-UTF-8 byte, line 70 a
    repeat of line 10 (an earlier chunk) and line 76 (added) cut short."""
    rows = list(ROWS)
    assert b",1493.76," in rows[48]
    rows[48] = rows[48].replace(b",1493.76,", b",12x,", 1)
    rows[58] = rows[58].replace(b"Virtual", b"Virtu\xe9l", 1)  # in ProductName
    assert b"\xe9" in rows[58]
    rows[68] = rows[8]
    rows.append(ROWS[20][:150])
    path.write_bytes(HEADER + b"".join(rows))


@pytest.mark.parametrize("compress", [False, True])
def test_refusals_in_later_chunks_name_the_files_line(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / ("cost.csv.gz" if compress else "cost.csv")
    broken(tmp_path / "plain")
    data = (tmp_path / "plain").read_bytes()
    path.write_bytes(gzip.compress(data) if compress else data)
    (tmp_path / "plain").unlink()
    small = read(path, chunk_rows=7, block_bytes=100)
    assert len(small) >= 8
    assert_counts_add_up(small)
    by_line = {r.line: (i, r.column, r.reason, r.file) for i, b in enumerate(small) for r in b.refused}
    assert sorted(by_line) == [50, 60, 70, 76]
    assert {where[3] for where in by_line.values()} == {str(path)}
    assert by_line[50][0] >= 3  # at least the 4th chunk: 48 records before it
    assert by_line[50][1:3] == ("CostInBillingCurrency", "not a number: '12x'")
    assert by_line[60][1:3] == ("ProductName", "bytes that are not UTF-8")  # its first "Virtual"
    assert by_line[70][0] > by_line[50][0]
    assert by_line[70][1:3] == (None, "duplicated line: the same as line 10")  # across chunks
    assert by_line[76][0] == len(small) - 1
    assert by_line[76][2].startswith("the record has fewer fields than the header (truncated?)")
    assert sum(b.read for b in small) == 75 and sum(b.lines.height for b in small) == 71
    whole = read(path, chunk_rows=1_000_000)
    assert refusals(whole) == refusals(small)
    assert lines_of(whole).equals(lines_of(small))


def test_the_dataset_is_decided_by_the_first_chunk_holding_a_commitment_row(tmp_path: Path) -> None:
    # No "amortized" in the name: detected. The 41 on-demand rows first, priced reservation usage
    # (amortized only) after them: the first chunks price the same under both datasets.
    on_demand = [r for r in ROWS if b",OnDemand," in r]
    committed = [r for r in ROWS if b",OnDemand," not in r]
    assert (len(on_demand), len(committed)) == (41, 33)
    (tmp_path / "export.csv").write_bytes(HEADER + b"".join(on_demand + committed))
    small = read(tmp_path / "export.csv", chunk_rows=7)
    assert len(small) >= 8
    assert lines_of(small).equals(lines_of(read(tmp_path / "export.csv", chunk_rows=1_000_000)))
    lines = lines_of(small)
    a1 = lines.filter(pl.col("resource_id") == A1)
    assert (a1["billed_cost"].sum(), a1["effective_cost"].sum()) == (0, Decimal("44065.92"))
    unused = lines.filter(pl.col("charge_type") == "UnusedReservation")
    assert (unused["billed_cost"].to_list(), unused["effective_cost"].to_list()) == (
        [0],
        [Decimal("746.88")],
    )


def test_a_second_billing_period_in_a_later_chunk_fails_the_file(tmp_path: Path) -> None:
    rows = list(ROWS)
    rows[60] = rows[60].replace(b",09/01/2025,09/30/2025,", b",10/01/2025,10/31/2025,")  # line 62
    (tmp_path / "cost.csv").write_bytes(HEADER + b"".join(rows))
    config = AzureCostConfig(name="bills", path=str(tmp_path), chunk_rows=7)
    items = list(AzureCostConnector(config).read(SEP, OCT))
    # The error is yielded last, after the batches before it (they carried September); the
    # importer rolls the period back on the error.
    *got, error = items
    assert got and all(isinstance(b, BillingBatch) for b in got)
    assert {(b.period_start, b.period_end) for b in got if isinstance(b, BillingBatch)} == {(SEP, OCT)}
    assert isinstance(error, BillingFileError)
    assert (error.row.line, error.row.column) == (62, "BillingPeriodStartDate")
    assert "a second billing period (10/01/2025..10/31/2025) after 2025-09-01..2025-09-30" in str(error)


def test_a_file_of_another_period_yields_nothing(tmp_path: Path) -> None:
    (tmp_path / "cost.csv").write_bytes(EA.read_bytes())
    assert read(tmp_path / "cost.csv", chunk_rows=7, start=OCT, end=NOV) == []


# ---- Blob: downloaded to a temporary file, then read like a local file


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[FakeBlobService]:
    with fake_blob_service(tmp_path, page_size=50) as service:
        service.containers["exports"] = {}
        yield service


def read_blobs(svc: FakeBlobService, **keys: object) -> list[BillingBatch | BillingFileError]:
    config = AzureCostConfig(
        name="bills",
        blob_container_url=svc.container_url("exports"),
        blob_prefix="exports/gpu-amortized",
        ca_file=svc.ca_path,
        max_retries=0,
        backoff_s=0,
        timeout_s=5,
        **keys,  # type: ignore[arg-type]
    )
    with AzureCostConnector(config, credential=StaticCredential(), block_bytes=64) as connector:
        return list(connector.read(SEP, OCT))


def test_blobs_are_read_in_chunks_with_the_folders_period(svc: FakeBlobService) -> None:
    when = dt.datetime(2025, 10, 2, 3, tzinfo=dt.UTC)
    svc.put("exports", f"{RUN}/part_0_0001.csv", HEADER + b"".join(ROWS[:40]), when)
    svc.put("exports", f"{RUN}/part_0_0002.csv.gz", gzip.compress(HEADER + b"".join(ROWS[40:])), when)
    whole = read_blobs(svc, chunk_rows=1_000_000)
    small = read_blobs(svc, chunk_rows=7)
    assert all(isinstance(b, BillingBatch) for b in whole + small)
    assert [b.read for b in whole] == [40, 34]  # type: ignore[union-attr]
    assert len(small) >= 8 and sum(b.read for b in small) == 74  # type: ignore[union-attr]
    assert lines_of(small).equals(lines_of(whole))  # type: ignore[arg-type]
    run = RUN.rsplit("/", 1)[1]
    assert {(b.period_start, b.period_end, b.assembly_id) for b in small} == {(SEP, OCT, run)}  # type: ignore[union-attr]
    base = svc.container_url("exports")
    files = [b.source_file for b in small]  # type: ignore[union-attr]
    assert files[0] == f"{base}/{RUN}/part_0_0001.csv" and files[-1] == f"{base}/{RUN}/part_0_0002.csv.gz"


def test_a_truncated_gzip_blob_is_refused_before_any_of_its_batches(svc: FakeBlobService) -> None:
    when = dt.datetime(2025, 10, 2, 3, tzinfo=dt.UTC)
    packed = gzip.compress(HEADER + b"".join(ROWS[40:]))
    svc.put("exports", f"{RUN}/part_0_0001.csv", HEADER + b"".join(ROWS[:40]), when)
    svc.put("exports", f"{RUN}/part_0_0002.csv.gz", packed[: len(packed) // 2], when)
    items = read_blobs(svc, chunk_rows=7)
    *first, error = items
    assert all(isinstance(b, BillingBatch) for b in first) and sum(b.read for b in first) == 40  # type: ignore[union-attr]
    assert {b.source_file for b in first} == {f"{svc.container_url('exports')}/{RUN}/part_0_0001.csv"}  # type: ignore[union-attr]
    assert isinstance(error, BillingFileError)
    assert error.row.file == f"{svc.container_url('exports')}/{RUN}/part_0_0002.csv.gz"
    assert "truncated or corrupt gzip stream" in str(error)
