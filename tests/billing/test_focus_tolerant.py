"""FOCUS values as real exports spell them: enum case variants and aliases read silently, unknown
values imported and counted, corrections in any case, optional numbers that are NaN or exponent
forms; the public sample read in small chunks and as Parquet gives the same lines and findings."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch
from connectors.focus import FocusConfig, FocusConnector
from connectors.sdk import merge_findings

SAMPLE = Path(__file__).parent.parent / "fixtures" / "public" / "focus" / "focus_sample.csv.gz"
WIDE = (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
D = Decimal
AWS_EC2_LINE = 2  # AWS, Usage, Standard, 2 Requests, BilledCost 0.0000008


def read(path: Path, chunk_rows: int = 20_000) -> list[BillingBatch]:
    connector = FocusConnector(FocusConfig(name="f", type="focus", path=str(path), chunk_rows=chunk_rows))
    out = list(connector.read(*WIDE))
    assert all(isinstance(b, BillingBatch) for b in out), out
    return [b for b in out if isinstance(b, BillingBatch)]


def rows_like(line: int, *changes: dict[str, str]) -> tuple[list[str], list[dict[str, str]]]:
    with gzip.open(SAMPLE, "rb") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        (template,) = [dict(r) for n, r in enumerate(reader, start=2) if n == line]
        header = list(reader.fieldnames or [])
    rows = []
    for n, change in enumerate(changes):
        rows.append({**template, "ResourceId": f"r{n}", **change})
    return header, rows


def write(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, header)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_enum_spellings_and_unknown_values(tmp_path: Path) -> None:
    header, rows = rows_like(
        AWS_EC2_LINE,
        {"ChargeCategory": " usage ", "PricingCategory": "on-demand"},  # 2
        {"ChargeCategory": "USAGE", "PricingCategory": "Commitment-Based", "ChargeFrequency": "usage_based"},
        {"ChargeClass": "correction", "ConsumedQuantity": "-2", "BilledCost": "-0.0000008"},  # 4: no finding
        {"ChargeCategory": "Fee"},  # 5: unknown → Adjustment
        {"ChargeCategory": "NULL"},  # 6: empty (a null literal) → Adjustment, missing_value
        {"CommitmentDiscountStatus": "unused", "CommitmentDiscountType": "Savings Plan"},  # 7
        {"CommitmentDiscountStatus": "Partially used"},  # 8: unknown, not an unused commitment
        {"ChargeFrequency": "Hourly", "ChargeClass": "Reversal"},  # 9: two unknown values
        {"ConsumedQuantity": "NaN"},  # 10: no quantity, no finding
        {"ConsumedQuantity": "1.5E+2"},  # 11
    )  # fmt: skip
    (batch,) = read(write(tmp_path / "f.csv", header, rows))
    assert batch.refused == []
    got = batch.lines.select(
        "line_no", "charge_category", "charge_type", "pricing_model", "usage_quantity"
    ).rows()
    assert got == [
        (2, "Usage", "Usage", "on_demand", D(2)),
        (3, "Usage", "Usage", "commitment", D(2)),
        (4, "Usage", "Usage/Correction", "on_demand", D(-2)),
        (5, "Adjustment", "Fee", None, D(2)),
        (6, "Adjustment", "Adjustment", None, D(2)),
        (7, "Usage", "UnusedSavingsPlan", "on_demand", D(2)),
        (8, "Usage", "Usage", "on_demand", D(2)),
        (9, "Usage", "Usage", "on_demand", D(2)),
        (10, "Usage", "Usage", "on_demand", None),
        (11, "Usage", "Usage", "on_demand", D(150)),
    ]
    assert batch.lines.filter(pl.col("line_no") == 7)["resource_id"].to_list() == [
        None
    ]  # unused: no resource
    found = {(f.rule, f.column): (f.count, f.examples, f.provider) for f in batch.findings}
    assert found == {
        ("unknown_value", "ChargeCategory"): (1, ((5, "Fee"),), "aws"),
        ("missing_value", "ChargeCategory"): (1, ((6, ""),), "aws"),
        ("unknown_value", "CommitmentDiscountStatus"): (1, ((8, "Partially used"),), "aws"),
        ("unknown_value", "ChargeFrequency"): (1, ((9, "Hourly"),), "aws"),
        ("unknown_value", "ChargeClass"): (1, ((9, "Reversal"),), "aws"),
    }
    reasons = {f.column: f.reason for f in batch.findings if f.rule == "unknown_value"}
    assert (
        reasons["ChargeCategory"]
        == "not one of Usage, Purchase, Tax, Credit, Adjustment: booked as Adjustment"
    )
    assert reasons["ChargeFrequency"] == "not one of One-Time, Recurring, Usage-Based"


@pytest.mark.parametrize("chunk_rows", [29, 97])
def test_the_sample_in_small_chunks_gives_the_same_lines_and_findings(chunk_rows: int) -> None:
    (whole,) = read(SAMPLE)
    parts = read(SAMPLE, chunk_rows=chunk_rows)
    assert len(parts) >= 1000 // chunk_rows // 2  # chunks are cut by size: about chunk_rows records
    assert pl.concat([b.lines for b in parts]).equals(whole.lines)
    assert sum(b.read for b in parts) == 1000 and all(b.refused == [] for b in parts)
    (merged,) = merge_findings([f for b in parts for f in b.findings])
    assert (merged.rule, merged.count, merged.examples) == ("negative_usage", 12, whole.findings[0].examples)


def test_the_sample_as_parquet_gives_the_same_lines(tmp_path: Path) -> None:
    with gzip.open(SAMPLE, "rb") as raw:
        text = pl.read_csv(raw.read(), infer_schema=False)  # every column as its text, NULL included
    path = tmp_path / "focus_sample.parquet"
    text.write_parquet(path)
    (csv_batch,) = read(SAMPLE)
    (parquet_batch,) = read(path)
    assert parquet_batch.refused == [] and parquet_batch.lines.height == 1000
    columns = [c for c in csv_batch.lines.columns if c not in ("source_file", "line_no", "line_key")]
    assert parquet_batch.lines.select(columns).equals(csv_batch.lines.select(columns))
    assert [(f.rule, f.count) for f in parquet_batch.findings] == [("negative_usage", 12)]
