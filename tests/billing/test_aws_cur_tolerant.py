"""``aws_cur`` reads CURs as they come (issue 11): every timestamp form CUR writers use, records
one trailing empty field short, case variants of line item types; it refuses a row only when its
money, currency or usage period cannot be read, and flags the rest as findings."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from billing_rows import csv_rows as rows
from billing_rows import render_csv as render

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch, BillingFileError
from connectors.sdk import Finding

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2 = FIXTURES / "cur2_2025-09_daily.csv"
LEGACY = FIXTURES / "cur_legacy_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
#: The fixture's totals (test_aws_cur_fixtures): 137 lines.
BILLED, GPU_HOURS = Decimal("32593.3144"), Decimal(7520)
TIME_COLUMNS = (
    "bill_billing_period_start_date",
    "bill_billing_period_end_date",
    "line_item_usage_start_date",
    "line_item_usage_end_date",
)


def read(path: Path, **keys: object) -> list[BillingBatch | BillingFileError]:
    with AwsCurConnector(AwsCurConfig(name="bills", path=str(path), **keys)) as connector:
        return list(connector.read(SEP, OCT))


def one(path: Path) -> BillingBatch:
    (batch,) = read(path)
    assert isinstance(batch, BillingBatch)
    assert batch.read == batch.lines.height + len(batch.refused) + batch.skipped
    return batch


@pytest.mark.parametrize(
    ("form", "example"),
    [
        ("{d} {t}.000", "2022-07-01 00:00:00.000"),  # Athena/Trino CSV of a CUR (koku test data)
        ("{d} {t}+00:00", "2025-09-01 00:00:00+00:00"),  # pandas/Spark to_csv of a CUR 2.0
        ("{d}T{t}Z", "2025-09-01T00:00:00Z"),  # AWS's own
        ("{d} {t}", "2023-06-01 00:00:00"),  # legacy CUR usage dates (koku test data)
    ],
)
def test_every_timestamp_form_reads_the_same_lines(tmp_path: Path, form: str, example: str) -> None:
    header, body = rows(CUR2)
    for row in body:
        for column in TIME_COLUMNS:
            at = header.index(column)
            day, clock = row[at].removesuffix("Z").split("T")
            row[at] = form.format(d=day, t=clock)
    assert body[0][header.index("line_item_usage_start_date")][:10] == "2025-09-01"
    assert len(body[0][header.index("line_item_usage_start_date")]) == len(example)
    path = tmp_path / "cur.csv"  # a plain file: its billing period comes from the rows
    path.write_bytes(render(header, body))
    batch = one(path)
    original = one(CUR2)
    assert (batch.read, batch.lines.height, batch.refused, batch.findings) == (137, 137, [], [])
    assert (batch.period_start, batch.period_end) == (SEP, OCT)
    assert batch.lines["billed_cost"].sum() == BILLED
    same = ["line_key", "charge_start", "charge_end", "billed_cost", "effective_cost", "gpu_hours"]
    assert batch.lines.select(same).equals(original.lines.select(same))
    assert batch.lines["charge_start"].min() == SEP


def test_records_one_trailing_empty_field_short_are_read(tmp_path: Path) -> None:
    """A CUR whose header has one field more than every record (koku's test_cur.csv: 131 and 130):
    every row is read, the missing last field empty, none refused."""
    header, body = rows(CUR2)
    path = tmp_path / "short.csv"
    path.write_bytes(render([*header, "resource_tags_user_owner"], body))
    records = list(csv.reader(io.StringIO(path.read_text())))
    assert (len(records[0]), {len(r) for r in records[1:]}) == (len(header) + 1, {len(header)})
    batch = one(path)
    assert (batch.read, batch.lines.height, batch.refused) == (137, 137, [])
    assert batch.lines["billed_cost"].sum() == BILLED
    assert batch.lines["gpu_hours"].sum() == GPU_HOURS


def test_a_record_two_fields_short_is_still_refused(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    body[4] = body[4][:-2]  # line 6: the last two fields gone
    path = tmp_path / "cur.csv"
    path.write_bytes(render(header, body))
    batch = one(path)
    assert [(r.line, r.reason[:36]) for r in batch.refused] == [(6, "the record has fewer fields than the")]
    assert batch.lines.height == 136


def test_line_item_types_in_another_case_are_known(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    kind = header.index("line_item_line_item_type")
    body[0][kind] = "savingsplancoveredusage"  # line 2
    body[1][kind] = "Savings Plan Negation"  # line 3
    path = tmp_path / "cur.csv"
    path.write_bytes(render(header, body))
    batch = one(path)
    assert batch.refused == [] and batch.findings == []
    assert batch.lines["charge_type"][:2].to_list() == ["SavingsPlanCoveredUsage", "SavingsPlanNegation"]
    assert batch.lines["effective_cost"].sum() == one(CUR2).lines["effective_cost"].sum()


def test_a_row_without_a_line_item_id_is_imported_keyed_by_its_content(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    line_id = header.index("identity_line_item_id")
    body[3][line_id] = ""  # line 5: R1 on demand, 1,320.96
    body[4][line_id] = "  "  # line 6: EBS, 4.80
    path = tmp_path / "cur.csv"
    path.write_bytes(render(header, body))
    batch = one(path)
    assert batch.refused == []
    assert batch.findings == [
        Finding(
            str(path),
            "missing_value",
            "identity_line_item_id",
            "empty line item id: keyed by the record's content",
            2,
            ((5, ""), (6, "  ")),
            "aws",
        )
    ]
    keys = batch.lines.filter(pl.col("line_no").is_in([5, 6]))["line_key"].to_list()
    assert all(k.startswith("sha1:") and len(k) == 45 for k in keys) and keys[0] != keys[1]
    assert batch.lines["billed_cost"].sum() == BILLED
    again = one(path)  # the same record gives the same key in every import
    assert again.lines.filter(pl.col("line_no").is_in([5, 6]))["line_key"].to_list() == keys
    path.write_bytes(render(header, [*body, body[3]]))  # line 139: line 5 again, a true duplicate
    twice = one(path)
    assert [(r.line, r.column, r.reason) for r in twice.refused] == [
        (139, None, "duplicated line: the same as line 5")
    ]
    assert twice.lines["billed_cost"].sum() == BILLED


def test_unreadable_numbers_refuse_only_rows_whose_money_they_are(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    col = {c: i for i, c in enumerate(header)}
    body[0][col["savings_plan_savings_plan_effective_cost"]] = "9.2E+02x"  # line 2: covered: refused
    body[3][col["savings_plan_savings_plan_effective_cost"]] = "n/a"  # line 5: plain usage: flagged
    body[3][col["pricing_public_on_demand_cost"]] = "1.32096E3"  # line 5: exponent form, exact
    body[5][col["pricing_public_on_demand_cost"]] = "N.A."  # line 7: list cost unreadable: flagged
    body[4][col["line_item_usage_amount"]] = "sixty"  # line 6: EBS quantity unreadable: flagged
    body[8][col["line_item_usage_amount"]] = ""  # line 10: p5 usage without an amount: flagged
    body[9][col["pricing_public_on_demand_cost"]] = "NaN"  # line 11: no value, no finding
    path = tmp_path / "cur.csv"
    path.write_bytes(render(header, body))
    batch = one(path)
    assert [(r.line, r.column, r.reason, r.cost) for r in batch.refused] == [
        (2, "savings_plan_savings_plan_effective_cost", "not a number: '9.2E+02x'", Decimal("1320.96"))
    ]
    found = {(f.rule, f.column): (f.count, f.examples) for f in batch.findings}
    assert found == {
        ("not_a_number", "savings_plan_savings_plan_effective_cost"): (1, ((5, "n/a"),)),
        ("not_a_number", "pricing_public_on_demand_cost"): (1, ((7, "N.A."),)),
        ("not_a_number", "line_item_usage_amount"): (1, ((6, "sixty"),)),
        ("missing_value", "line_item_usage_amount"): (1, ((10, ""),)),
    }
    by_line = {r["line_no"]: r for r in batch.lines.iter_rows(named=True)}
    assert by_line[5]["list_cost"] == Decimal("1320.96") and by_line[5]["effective_cost"] == Decimal(
        "1320.96"
    )
    assert by_line[7]["list_cost"] is None and by_line[7]["effective_cost"] == Decimal("924.672")
    assert by_line[6]["usage_quantity"] is None and by_line[6]["billed_cost"] == Decimal("4.8")
    assert by_line[10]["usage_quantity"] is None and by_line[10]["gpu_hours"] is None
    assert by_line[11]["list_cost"] is None  # NaN: no value (a usage line without a public cost)
    assert batch.lines["billed_cost"].sum() == BILLED - Decimal("1320.96")
    assert batch.lines["gpu_hours"].sum() == GPU_HOURS - 192 - 192  # lines 2 and 10


def test_gpu_hours_beyond_the_instance_are_flagged_on_the_files_quantity_column(tmp_path: Path) -> None:
    for fixture, quantity in ((CUR2, "line_item_usage_amount"), (LEGACY, "lineItem/UsageAmount")):
        header, body = rows(fixture)
        body[3][header.index(quantity)] = "48"  # line 5: 48 hours of an 8-GPU p5 in one day
        path = tmp_path / fixture.name
        path.write_bytes(render(header, body))
        batch = one(path)
        assert batch.refused == []
        assert [(f.rule, f.column, f.count, f.provider) for f in batch.findings] == [
            ("gpu_hours_over_capacity", quantity, 1, "aws")
        ]
        assert batch.findings[0].examples == (
            (5, "384.000000000 GPU-h (8 GPU, 2025-09-01 00:00..2025-09-02 00:00)"),
        )
        assert batch.lines["gpu_hours"].sum() == GPU_HOURS + 192
