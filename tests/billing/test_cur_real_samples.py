"""``aws_cur`` on public CUR files (project-koku's test data, Apache-2.0, and a file in the shape
koku-nise writes, with GPU instances: tests/fixtures/public/aws):
every row is read, none refused (their money is readable), and each usage account's billed and
effective totals equal an independent sum of the file (``csv`` + ``Decimal``, not the connector)."""

from __future__ import annotations

import csv
import datetime as dt
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch

PUBLIC = Path(__file__).parents[1] / "fixtures" / "public" / "aws"
SAMPLES = PUBLIC / "koku"
NISE = PUBLIC / "nise_style" / "nise_gpu_2025-09.csv"
WIDE = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2099, 1, 1, tzinfo=dt.UTC))
NANO = Decimal("1e-9")


def read(path: Path) -> BillingBatch:
    with AwsCurConnector(AwsCurConfig(name="bills", path=str(path))) as connector:
        (batch,) = connector.read(*WIDE)
    assert isinstance(batch, BillingBatch)
    return batch


def column(row: dict[str, str], name: str) -> str:
    """A CUR 2.0 or legacy column of a csv.DictReader row: ``line_item_unblended_cost`` is
    ``lineItem/UnblendedCost`` in a legacy file."""
    legacy = {
        "account": "lineItem/UsageAccountId",
        "type": "lineItem/LineItemType",
        "unblended": "lineItem/UnblendedCost",
        "sp_effective": "savingsPlan/SavingsPlanEffectiveCost",
    }
    cur2 = {
        "account": "line_item_usage_account_id",
        "type": "line_item_line_item_type",
        "unblended": "line_item_unblended_cost",
        "sp_effective": "savings_plan_savings_plan_effective_cost",
    }
    return row[legacy[name]] if legacy[name] in row else row[cur2[name]]


def independent_totals(path: Path) -> dict[str, tuple[Decimal, Decimal]]:
    """Per usage account: Σ unblended cost (billed) and Σ effective cost — the Savings Plan
    effective cost on a covered line, else the unblended cost (the samples hold no other kinds) —
    each row rounded half to even at 1e-9, as the import stores it."""
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            kind = column(row, "type")
            assert kind in ("Usage", "SavingsPlanCoveredUsage")  # the rule below covers these only
            billed = Decimal(column(row, "unblended")).quantize(NANO, ROUND_HALF_EVEN)
            effective = (
                column(row, "sp_effective") if kind == "SavingsPlanCoveredUsage" else column(row, "unblended")
            )
            totals[column(row, "account")][0] += billed
            totals[column(row, "account")][1] += Decimal(effective).quantize(NANO, ROUND_HALF_EVEN)
    return {account: (billed, effective) for account, (billed, effective) in totals.items()}


def imported_totals(batch: BillingBatch) -> dict[str, tuple[Decimal, Decimal]]:
    grouped = batch.lines.group_by("account").agg(pl.col("billed_cost").sum(), pl.col("effective_cost").sum())
    return {a: (b, e) for a, b, e in grouped.iter_rows()}


@pytest.mark.parametrize(
    ("name", "rows", "period", "billed"),
    [
        (
            "test_cur.csv",
            19,
            (dt.datetime(2018, 6, 1, tzinfo=dt.UTC), dt.datetime(2018, 7, 1, tzinfo=dt.UTC)),
            "0.082749985",
        ),
        (
            "2022-07-01-alt-columns.csv",
            2,
            (dt.datetime(2022, 7, 1, tzinfo=dt.UTC), dt.datetime(2022, 8, 1, tzinfo=dt.UTC)),
            "0",
        ),
        (
            "2023-06-01.csv",
            3,
            (dt.datetime(2023, 6, 1, tzinfo=dt.UTC), dt.datetime(2023, 7, 1, tzinfo=dt.UTC)),
            "30",
        ),
        (
            "../nise_style/nise_gpu_2025-09.csv",
            18,
            (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)),
            "202.737353424",
        ),
    ],
)
def test_every_row_is_imported_and_accounts_add_up(
    name: str, rows: int, period: tuple[dt.datetime, dt.datetime], billed: str
) -> None:
    path = SAMPLES / name
    batch = read(path)
    assert (batch.read, batch.lines.height, batch.refused, batch.skipped) == (rows, rows, [], 0)
    assert batch.read == batch.lines.height + len(batch.refused)  # read = accepted + refused
    assert batch.findings == []
    assert (batch.period_start, batch.period_end) == period
    expected = independent_totals(path)
    assert imported_totals(batch) == expected
    assert sum(b for b, _ in expected.values()) == Decimal(billed)


def test_koku_cur_with_records_one_field_short_of_its_header() -> None:
    """koku's test_cur.csv: 131 header fields, 130 in every record — formerly all 19 refused as
    truncated."""
    with (SAMPLES / "test_cur.csv").open(newline="") as handle:
        records = list(csv.reader(handle))
    assert (len(records[0]), {len(r) for r in records[1:]}) == (131, {130})
    batch = read(SAMPLES / "test_cur.csv")
    assert batch.lines.height == 19 and batch.refused == []
    first = batch.lines.row(0, named=True)
    assert (first["charge_start"], first["charge_end"]) == (
        dt.datetime(2018, 6, 1, tzinfo=dt.UTC),
        dt.datetime(2018, 7, 1, tzinfo=dt.UTC),  # as the file writes it: 2018-07-01 00:00:00
    )
    # 17-19 significant digits, rounded half to even at 1e-9 once
    assert first["billed_cost"] == Decimal("0.001653031")


def test_koku_cur2_with_millisecond_timestamps() -> None:
    """``2022-07-01 00:00:00.000`` (usage and billing period alike): the hours and the period are read."""
    with (SAMPLES / "2022-07-01-alt-columns.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["line_item_usage_start_date"] for r in rows] == [
        "2022-07-01 00:00:00.000",
        "2022-07-01 01:00:00.000",
    ]
    batch = read(SAMPLES / "2022-07-01-alt-columns.csv")
    assert batch.lines["charge_start"].to_list() == [
        dt.datetime(2022, 7, 1, 0, tzinfo=dt.UTC),
        dt.datetime(2022, 7, 1, 1, tzinfo=dt.UTC),
    ]
    # the same line item id on two hours: two lines
    assert batch.lines["line_key"].to_list() == [
        "notreal:2022-07-01T00:00:00Z",
        "notreal:2022-07-01T01:00:00Z",
    ]


def test_koku_savings_plan_lines_in_nok() -> None:
    batch = read(SAMPLES / "2023-06-01.csv")
    assert set(batch.lines["currency"]) == {"NOK"}
    assert set(batch.lines["charge_type"]) == {"SavingsPlanCoveredUsage"}
    assert batch.lines["effective_cost"].sum() < batch.lines["billed_cost"].sum()


def test_nise_style_gpu_cur() -> None:
    """nise writes usage times as ``str(datetime)`` (``2025-09-01 00:00:00+00:00``), bill periods as
    ``…T00:00:00Z``, and one column named ``pricing/OfferingClasspricing/PurchaseOption``."""
    with NISE.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert "pricing/OfferingClasspricing/PurchaseOption" in rows[0]
    assert rows[0]["lineItem/UsageStartDate"] == "2025-09-01 00:00:00+00:00"
    batch = read(NISE)
    p4d = batch.lines.filter(pl.col("instance_type") == "p4d.24xlarge")
    assert p4d["charge_start"].to_list() == [dt.datetime(2025, 9, 1, h, tzinfo=dt.UTC) for h in range(6)]
    assert (p4d["billed_cost"].sum(), p4d["effective_cost"].sum()) == (
        Decimal("196.6356"),
        Decimal("127.8132"),
    )
    assert set(p4d["pricing_model"]) == {"commitment"} and set(p4d["tags"]) == {'{"user:app":"train"}'}
    g5 = batch.lines.filter(pl.col("instance_type") == "g5.xlarge")
    assert (g5.height, set(g5["pricing_model"]), g5["billed_cost"].sum()) == (
        6,
        {"on_demand"},
        Decimal("6.036"),
    )
    # legacy nise files name no GPU count: left to the ingestor's catalog (p4d: 8, g5.xlarge: 1)
    assert batch.lines["gpu_count"].null_count() == 18
