"""Bad FOCUS input: every refusal names file, line and column; the good rows still land and the
counts add up (read == accepted + refused)."""

from __future__ import annotations

import datetime as dt
import gzip
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl

from connectors.billing import BillingBatch, BillingFileError
from connectors.focus import FocusConfig, FocusConnector

FIXTURE = Path(__file__).parent.parent / "fixtures" / "focus" / "focus_1.1_multicloud_2025-09.csv"
SEPT = (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))
D = Decimal


def read_all(path: Path) -> list[BillingBatch | BillingFileError]:
    return list(FocusConnector(FocusConfig(name="bills", type="focus", path=str(path))).read(*SEPT))


def fixture() -> pl.DataFrame:
    return pl.read_csv(FIXTURE, infer_schema=False)


def effective(frame: pl.DataFrame) -> Decimal:
    values = frame["EffectiveCost"].to_list()
    return sum((D(v).quantize(D("1e-9"), rounding=ROUND_HALF_EVEN) for v in values), D(0))


def test_a_missing_money_or_period_column_refuses_the_file_other_mandatory_columns_do_not(
    tmp_path: Path,
) -> None:
    fixture().drop("BilledCost").write_csv(tmp_path / "a.csv")
    # 1.2 (a 1.2 column present) makes ServiceSubcategory mandatory: lacking it, the rows still
    # book (the mapping does not read it: no finding, only a log line)
    fixture().drop("ServiceSubcategory").with_columns(pl.lit("INV-1").alias("InvoiceId")).write_csv(
        tmp_path / "b.csv"
    )
    fixture().drop("ListCost").write_csv(tmp_path / "c.csv")  # read by the mapping: a finding a row
    fixture().drop("ChargePeriodEnd").head(3).write_csv(tmp_path / "d.csv")
    a, b, c, d = read_all(tmp_path)
    assert isinstance(a, BillingFileError) and (a.row.file, a.row.line, a.row.column) == (
        str(tmp_path / "a.csv"),
        1,
        "BilledCost",
    )
    assert 'missing column "BilledCost"' in str(a)
    assert isinstance(d, BillingFileError) and d.row.column == "ChargePeriodEnd"
    assert isinstance(b, BillingBatch) and (b.lines.height, b.refused, b.findings) == (194, [], [])
    assert isinstance(c, BillingBatch) and c.lines.height == 194 and c.refused == []
    assert c.lines["list_cost"].null_count() == 194
    assert c.lines["effective_cost"].sum() == effective(fixture())
    got = {(f.rule, f.column, f.provider): f.count for f in c.findings}
    assert got == {
        ("missing_column", "ListCost", "aws"): 107,
        ("missing_column", "ListCost", "gcp"): 12,
        ("missing_column", "ListCost", "azure"): 75,
    }


def test_only_unbookable_rows_are_refused_the_rest_lands_with_findings(tmp_path: Path) -> None:
    frame = fixture()
    original = frame
    edits = {  # 0-based row → (column, bad text); the row is on line row + 2
        0: ("BilledCost", "12,5x"),
        2: ("ConsumedQuantity", "-24"),  # a Usage row (AWS on-demand p5.48xlarge): imported, flagged
        3: ("BillingCurrency", "XYZ"),
        4: ("ChargeCategory", "Fee"),  # an AWS Purchase: imported as an Adjustment, flagged
        5: ("ChargePeriodStart", "2025-13-01T00:00:00Z"),
        6: ("ChargePeriodEnd", "2025-09-01T00:00:00Z"),  # not after its start
        7: ("PricingCategory", "OnDemand"),  # an alias of Standard: no finding
        8: ("PricingCategory", "Reserved"),  # unknown: imported without a pricing model, flagged
        9: ("ListCost", "n/a"),  # unreadable: imported without a list cost, flagged
    }
    for row, (column, text) in edits.items():
        frame = frame.with_columns(
            pl.when(pl.int_range(pl.len()) == row).then(pl.lit(text)).otherwise(pl.col(column)).alias(column)
        )
    assert original.row(2, named=True)["ChargeCategory"] == "Usage"
    assert original.row(4, named=True)["ChargeCategory"] == "Purchase"
    # a correction may return usage: a negative quantity there is no finding
    correction = original.slice(2, 1).with_columns(
        pl.lit("Correction").alias("ChargeClass"),
        pl.lit("-1").alias("ConsumedQuantity"),
        pl.lit("-55.04").alias("BilledCost"),
        pl.lit("-55.04").alias("EffectiveCost"),
    )
    frame = pl.concat([frame, frame.slice(10, 1), correction])  # line 196 repeats line 12
    text = frame.write_csv().encode()
    lines = text.split(b"\n")
    lines[20] = lines[20].replace(b"acme-payer", b"acme-p\xffyer", 1)  # line 21: not UTF-8
    path = tmp_path / "focus.csv"
    path.write_bytes(
        b"\n".join(lines) + b"us-east-1a,1320.96,999988887777,acme-payer,USD,2025-10-01T00:00:00Z\n"
    )

    (batch,) = read_all(path)
    got = [(r.file, r.line, r.column) for r in batch.refused]
    file = str(path)
    assert got == [
        (file, 2, "BilledCost"),
        (file, 5, "BillingCurrency"),
        (file, 7, "ChargePeriodStart"),
        (file, 8, "ChargePeriodEnd"),
        (file, 21, "BillingAccountName"),
        (file, 196, "line_key"),
        (file, 198, "BillingPeriodStart"),  # the truncated last record: its first missing field
    ]
    reasons = [r.reason for r in batch.refused]
    assert reasons[0] == "not a number: '12,5x'"
    assert reasons[1] == "unknown currency code: 'XYZ'"
    assert reasons[4] == "bytes that are not UTF-8"
    assert reasons[5] == "duplicate of line 12: an identical record (FOCUS has no line id)"
    assert reasons[6].startswith("the record has fewer fields than the header (truncated?)")
    # the refused cost: the row's BilledCost where it could be read
    assert [r.cost for r in batch.refused[:4]] == [
        None,
        *(D(original.row(i, named=True)["BilledCost"]) for i in (3, 5, 6)),
    ]

    findings = {(f.rule, f.column, f.provider): (f.count, f.examples) for f in batch.findings}
    assert findings == {
        ("negative_usage", "ConsumedQuantity", "aws"): (1, ((4, "-24"),)),
        ("unknown_value", "ChargeCategory", "aws"): (1, ((6, "Fee"),)),
        ("unknown_value", "PricingCategory", "aws"): (1, ((10, "Reserved"),)),
        ("unreadable_value", "ListCost", "aws"): (1, ((11, "n/a"),)),
    }
    by_line = {row["line_no"]: row for row in batch.lines.iter_rows(named=True)}
    assert by_line[4]["usage_quantity"] == D(-24) and by_line[4]["gpu_hours"] == D(-192)
    assert (by_line[6]["charge_category"], by_line[6]["charge_type"], by_line[6]["gpu_hours"]) == (
        "Adjustment",
        "Fee",
        None,  # a Savings Plan purchase: no instance, no GPU count
    )
    assert by_line[9]["pricing_model"] == "on_demand"
    assert by_line[10]["pricing_model"] is None
    assert by_line[11]["list_cost"] is None

    assert batch.read == 194 + 3 and batch.lines.height == 194 + 3 - 7
    assert batch.read == batch.lines.height + len(batch.refused) + batch.skipped
    refused_rows = original.filter(pl.int_range(pl.len()).is_in([0, 3, 5, 6, 19]))
    expected = effective(original) - effective(refused_rows) + D("-55.04")
    assert batch.lines["effective_cost"].sum() == expected
    fix = batch.lines.filter(pl.col("charge_type") == "Usage/Correction")
    assert fix["usage_quantity"].to_list() == [D(-1)]
    assert fix["gpu_hours"].to_list() == [D(-8)]  # p5.48xlarge, 8 GPUs: the hour given back


def test_truncated_gzip_and_parquet_are_file_errors(tmp_path: Path) -> None:
    data = gzip.compress(FIXTURE.read_bytes())
    (tmp_path / "a.csv.gz").write_bytes(data[: len(data) // 2])
    fixture().write_parquet(tmp_path / "b.parquet")
    (tmp_path / "b.parquet").write_bytes((tmp_path / "b.parquet").read_bytes()[:-100])
    a, b = read_all(tmp_path)
    assert isinstance(a, BillingFileError) and "truncated or corrupt gzip" in str(a)
    assert a.row.file == str(tmp_path / "a.csv.gz")
    assert isinstance(b, BillingFileError) and "not a readable Parquet file" in str(b)


def test_non_utf8_header_and_empty_file_are_file_errors(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(FIXTURE.read_bytes().replace(b"BilledCost", b"Billed\xe9Cost", 1))
    (tmp_path / "b.csv").write_bytes(b"")
    a, b = read_all(tmp_path)
    assert isinstance(a, BillingFileError) and a.row.line == 1 and "not UTF-8" in str(a)
    assert isinstance(b, BillingFileError) and "empty" in str(b)
