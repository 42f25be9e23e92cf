"""``aws_cur`` on broken files: each bad row is refused naming file, line and column, a broken file
is refused whole (yielded as its ``BillingFileError``), the good rows and files still come, and
``read == accepted + refused + skipped``."""

from __future__ import annotations

import datetime as dt
import gzip
from decimal import Decimal
from pathlib import Path

import polars as pl
from billing_rows import csv_rows as rows
from billing_rows import render_csv as render

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch, BillingFileError
from connectors.sdk import Finding

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2 = FIXTURES / "cur2_2025-09_daily.csv"
LEGACY = FIXTURES / "cur_legacy_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def read(path: Path, **keys: object) -> list[BillingBatch | BillingFileError]:
    with AwsCurConnector(AwsCurConfig(name="bills", path=str(path), **keys)) as connector:
        return list(connector.read(SEP, OCT))


def broken_cur2() -> bytes:
    """The CUR 2.0 fixture with one fault on each of lines 3, 5, 7, 9, 11 and a last line cut short."""
    header, body = rows(CUR2)
    col = {c: i for i, c in enumerate(header)}

    def at(line: int) -> list[str]:
        return body[line - 2]

    at(3)[col["line_item_unblended_cost"]] = "12O.5"  # a letter O: not a number (a negation row)
    at(5)[col["line_item_usage_amount"]] = "-24"  # R1 on-demand usage, negative
    at(7)[col["line_item_currency_code"]] = "XYZ"  # an SP-covered row
    at(9)[col["identity_line_item_id"]] = at(2)[col["identity_line_item_id"]]  # a fee row repeats line 2's
    at(9)[col["line_item_usage_start_date"]] = at(2)[col["line_item_usage_start_date"]]  # id and hour
    at(11)[col["line_item_line_item_description"]] = "MARKER"  # an EBS row: bytes that are not UTF-8
    data = render(header, body).replace(b"MARKER", b"GB-month \xff\xfe gp3")
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    return data[: last + 180]  # line 138 (EBS) cut in its 9th field, "2025-0"


def test_each_bad_row_is_refused_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "cur.csv"
    path.write_bytes(broken_cur2())
    (batch,) = read(path)
    assert isinstance(batch, BillingBatch)
    assert (batch.read, batch.lines.height, len(batch.refused), batch.skipped) == (137, 132, 5, 0)
    where = [(r.file, r.line, r.column) for r in batch.refused]
    assert where == [
        (str(path), 3, "line_item_unblended_cost"),
        (str(path), 7, "line_item_currency_code"),
        (str(path), 9, "identity_line_item_id"),
        (str(path), 11, "line_item_line_item_description"),
        (str(path), 138, "bill_billing_period_end_date"),
    ]
    reasons = [r.reason for r in batch.refused]
    assert reasons[0] == "not a number: '12O.5'"
    assert reasons[1] == "unknown currency code: 'XYZ'"
    assert reasons[2].startswith(
        "repeated line item id and usage start: '718049f58adbc9a968b634db631aa4d758c7e11429f615b59392:"
    )
    assert reasons[3] == "bytes that are not UTF-8"
    assert reasons[4].startswith("the record has fewer fields than the header (truncated?)")
    assert "GB-month" in (batch.refused[3].raw or "")
    # the refused row's cost, where it can be read, comes with it (the run's refused-cost share)
    assert [r.cost for r in batch.refused[:2]] == [None, Decimal("1320.96")]
    # A negative usage amount on a usage line (line 5, R1 on demand) is imported and flagged: its
    # money is the bill's; it counts no GPU-hours (never negative ones).
    assert batch.findings == [
        Finding(
            str(path),
            "negative_usage",
            "line_item_usage_amount",
            "negative usage amount on a usage line",
            1,
            ((5, "-24"),),
            "aws",
        )
    ]
    row5 = batch.lines.filter(pl.col("line_no") == 5).row(0, named=True)
    assert (row5["usage_quantity"], row5["gpu_hours"], row5["billed_cost"]) == (-24, 0, Decimal("1320.96"))

    lines = batch.lines
    assert 3 not in lines["line_no"].to_list() and 2 in lines["line_no"].to_list()
    # Good rows are all there: the totals lose exactly the refused rows
    # (−1,320.96 negation, 1,320.96 covered, 924.672 fee, 4.80 + 4.80 EBS).
    assert lines["billed_cost"].sum() == Decimal("32593.3144") - Decimal("934.272")
    assert lines["effective_cost"].sum() == Decimal("32593.3144") - Decimal("924.672") - Decimal("9.6")
    assert lines["gpu_hours"].sum() == Decimal(7520 - 192 - 192)


def test_repeated_line_item_across_chunks_is_refused(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    path = tmp_path / "cur.csv"
    path.write_bytes(render(header, [*body, body[0]]))  # line 139 repeats line 2
    batches = [b for b in read(path, chunk_rows=50) if isinstance(b, BillingBatch)]
    assert len(batches) == 3  # no file error among them
    refused = [r for b in batches for r in b.refused]
    assert [(r.line, r.column) for r in refused] == [(139, "identity_line_item_id")]
    assert sum(b.read for b in batches) == 138
    assert sum(b.lines.height for b in batches) == 137
    # The same id in another hour is another line (CUR repeats ids across hours).
    other = list(body[0])
    other[header.index("line_item_usage_start_date")] = "2025-09-02T00:00:00Z"
    other[header.index("line_item_usage_end_date")] = "2025-09-03T00:00:00Z"
    path.write_bytes(render(header, [*body, other]))
    (batch,) = read(path)
    assert isinstance(batch, BillingBatch) and batch.lines.height == 138 and batch.refused == []


def test_missing_column_refuses_the_file_and_other_files_go_on(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    drop = header.index("line_item_unblended_cost")
    (tmp_path / "a-missing.csv").write_bytes(
        render(
            [c for i, c in enumerate(header) if i != drop],
            [[v for i, v in enumerate(r) if i != drop] for r in body],
        )
    )
    (tmp_path / "b-good.csv").write_bytes(CUR2.read_bytes())
    lheader, lbody = rows(LEGACY)
    ldrop = lheader.index("lineItem/UnblendedCost")
    (tmp_path / "c-legacy.csv").write_bytes(
        render(
            [c for i, c in enumerate(lheader) if i != ldrop],
            [[v for i, v in enumerate(r) if i != ldrop] for r in lbody],
        )
    )
    first, good, legacy = read(tmp_path)
    assert isinstance(first, BillingFileError) and isinstance(legacy, BillingFileError)
    assert (first.row.file, first.row.line, first.row.column) == (
        str(tmp_path / "a-missing.csv"),
        1,
        "line_item_unblended_cost",
    )
    assert (legacy.row.file, legacy.row.line, legacy.row.column) == (
        str(tmp_path / "c-legacy.csv"),
        1,
        "lineItem/UnblendedCost",
    )
    assert isinstance(good, BillingBatch) and good.lines.height == 137


def test_legacy_refusals_name_the_legacy_column(tmp_path: Path) -> None:
    header, body = rows(LEGACY)
    body[0][header.index("lineItem/UnblendedCost")] = "n/a"
    body[1][header.index("lineItem/LineItemType")] = "Mystery"
    (tmp_path / "legacy.csv").write_bytes(render(header, body))
    (batch,) = read(tmp_path / "legacy.csv")
    assert isinstance(batch, BillingBatch)
    assert [(r.line, r.column, r.reason) for r in batch.refused] == [
        (2, "lineItem/UnblendedCost", "not a number: 'n/a'"),
    ]
    # an unknown line item type is imported (an adjustment at its unblended cost) and flagged,
    # naming the column as the file spells it
    assert [(f.rule, f.column, f.count, f.examples) for f in batch.findings] == [
        ("unknown_value", "lineItem/LineItemType", 1, ((3, "Mystery"),))
    ]
    mystery = batch.lines.filter(pl.col("line_no") == 3).row(0, named=True)
    assert (mystery["charge_type"], mystery["charge_category"], mystery["pricing_model"]) == (
        "Mystery",
        "Adjustment",
        None,
    )
    assert (
        mystery["billed_cost"]
        == mystery["effective_cost"]
        == Decimal(body[1][header.index("lineItem/UnblendedCost")])
    )
    assert batch.read == 137 and batch.lines.height == 136


def test_unreadable_files(tmp_path: Path) -> None:
    data = CUR2.read_bytes()
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(data)[:-400])  # gzip stream cut short
    (tmp_path / "b.csv").write_bytes(b"identity_line_item_id,\xff\xfe\n1,2\n")  # header not UTF-8
    (tmp_path / "c.parquet").write_bytes(b"PAR1" + b"\0" * 64)  # not a whole Parquet file
    (tmp_path / "d.csv").write_bytes(b"")
    errors = read(tmp_path)
    assert all(isinstance(e, BillingFileError) for e in errors) and len(errors) == 4
    files = [e.row.file for e in errors]  # type: ignore[union-attr]
    assert files == [str(tmp_path / n) for n in ("a.csv.gz", "b.csv", "c.parquet", "d.csv")]
    assert "truncated or corrupt gzip" in str(errors[0])
    assert errors[1].row.line == 1 and "not UTF-8" in str(errors[1])  # type: ignore[union-attr]


def test_covered_usage_without_savings_plan_cost_is_refused(tmp_path: Path) -> None:
    header, body = rows(CUR2)
    body[0][header.index("savings_plan_savings_plan_effective_cost")] = ""  # line 2: covered usage
    body[1][header.index("resource_tags")] = "{not json"  # line 3
    (tmp_path / "cur.csv").write_bytes(render(header, body))
    (batch,) = read(tmp_path / "cur.csv")
    assert isinstance(batch, BillingBatch)
    assert [(r.line, r.column) for r in batch.refused] == [(2, "savings_plan_savings_plan_effective_cost")]
    # tags that are no JSON object: the row is imported without them, and flagged
    assert [(f.rule, f.column, f.examples) for f in batch.findings] == [
        ("invalid_tags", "resource_tags", ((3, "{not json"),))
    ]
    assert batch.lines.filter(pl.col("line_no") == 3)["tags"].to_list() == ["{}"]
    assert batch.lines.filter(pl.col("charge_type") == "SavingsPlanCoveredUsage")[
        "effective_cost"
    ].sum() == Decimal("26815.488")
