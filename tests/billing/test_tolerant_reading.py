"""What every billing dialect gets from the driver and ``billing_io`` (issue 11): null literals read
as empty fields, numbers with exponents read exactly, every ISO 8601 form exports write, enum values
matched case-insensitively, and *findings* — rows imported although they break a rule — counted per
rule, column and provider with their first lines as examples."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Context, Decimal
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.billing_driver import Dialect, ExportFile, OpenedFile, Period, capacity_findings, read_file
from connectors.billing_io import (
    LINE,
    Checks,
    FirstOf,
    Normalized,
    Split,
    canonical,
    csv_frame,
    flexible_time,
    null_literals,
    time_tries,
)
from connectors.sdk import MONEY, BillingBatch, Finding, RefusedRow, merge_findings

UTC = dt.UTC


def _one(expr: pl.Expr, values: list[str | None]) -> list[object]:
    return pl.DataFrame({"v": values}, schema={"v": pl.String}).select(expr.alias("o"))["o"].to_list()


# --- numbers ---------------------------------------------------------------------------------------


def _decimal(texts: list[str]) -> list[object]:
    frame = pl.DataFrame({LINE: range(2, 2 + len(texts)), "cost": texts})
    checks = Checks("f.csv")
    rows, _refused, _ = checks.split(frame, {"_cost": checks.decimal("cost")})
    got = dict(zip(rows[LINE].to_list(), rows["_cost"].to_list(), strict=True))
    return [got.get(line) for line in range(2, 2 + len(texts))]


def test_numbers_with_an_exponent_are_read_exactly() -> None:
    texts = [
        "3.2E-05",
        "-1.5e3",
        "1e0",
        "12.5",
        "5E+2",
        ".5e1",
        "-0.000032",
        "1.234567891234e2",
        "7e-10",
        "abc",
    ]
    assert _decimal(texts) == [
        Decimal("0.000032000"),
        Decimal("-1500.000000000"),
        Decimal("1.000000000"),
        Decimal("12.500000000"),
        Decimal("500.000000000"),
        Decimal("5.000000000"),
        Decimal("-0.000032000"),
        Decimal("123.456789123"),  # 123.4567891234 rounded at 1e-9
        Decimal("0.000000001"),  # 7e-10 rounds half to even at 1e-9: 0.0000000007 → 1e-9
        None,  # refused: not a number
    ]


@settings(deadline=None)  # one Polars parse per example: a loaded machine took 267 ms for one
@given(
    sign=st.sampled_from(["", "-", "+"]),
    whole=st.text("0123456789", min_size=0, max_size=10),
    fraction=st.text("0123456789", min_size=0, max_size=12),
    exponent=st.integers(-15, 15),
    e=st.sampled_from(["e", "E"]),
)
def test_an_exponent_form_reads_as_python_decimal_would(
    sign: str, whole: str, fraction: str, exponent: int, e: str
) -> None:
    """Never through a float: every digit counts, rounded half to even at 1e-9."""
    if not (whole or fraction):
        return
    text = f"{sign}{whole}{'.' + fraction if fraction else ''}{e}{exponent}"
    exact = Decimal(text)
    if abs(exact) >= Decimal(10) ** 28:  # beyond Decimal(38, 9)
        return
    expected = exact.quantize(Decimal("1e-9"), rounding=ROUND_HALF_EVEN, context=Context(prec=80))
    assert _decimal([text]) == [expected]


def test_nan_is_no_value_where_a_number_is_optional_and_not_a_number_where_required() -> None:
    frame = pl.DataFrame({LINE: [2, 3], "cost": ["NaN", "1"], "quantity": ["NaN", "2"]})
    checks = Checks("f.csv")
    parsed = {"_cost": checks.decimal("cost"), "_quantity": checks.decimal("quantity", required=False)}
    rows, refused, findings = checks.split(frame, parsed)
    assert [(r.line, r.column, r.reason) for r in refused] == [(2, "cost", "not a number: 'NaN'")]
    assert rows.select("_cost", "_quantity").rows() == [(Decimal("1.000000000"), Decimal("2.000000000"))]
    assert findings == []


# --- timestamps ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-08-16T00:00Z", dt.datetime(2024, 8, 16, tzinfo=UTC)),  # OCI's FOCUS export: minutes
        ("2022-07-01 00:00:00.000", dt.datetime(2022, 7, 1, tzinfo=UTC)),  # CUR from Athena
        ("2025-09-01 00:00:00+00:00", dt.datetime(2025, 9, 1, tzinfo=UTC)),
        ("2019-07-29 00:00:00", dt.datetime(2019, 7, 29, tzinfo=UTC)),  # Azure legacy UsageDateTime
        ("2021-02-02", dt.datetime(2021, 2, 2, tzinfo=UTC)),
        ("2025-09-01T00:00:00", dt.datetime(2025, 9, 1, tzinfo=UTC)),  # GCP with no zone: UTC
        ("2024-09-18 22:00:00", dt.datetime(2024, 9, 18, 22, tzinfo=UTC)),  # FOCUS sample data
        ("2025-09-01 00:00:00 UTC", dt.datetime(2025, 9, 1, tzinfo=UTC)),  # BigQuery's CSV export
        ("2025-09-01T01:00:00-0500", dt.datetime(2025, 9, 1, 6, tzinfo=UTC)),
        ("2025-09-01T01:00:00+05:30", dt.datetime(2025, 8, 31, 19, 30, tzinfo=UTC)),
        ("2025-09-01T01:00:00.5Z", dt.datetime(2025, 9, 1, 1, 0, 0, 500000, tzinfo=UTC)),
        (" 2025-09-01T01:00:00Z ", dt.datetime(2025, 9, 1, 1, tzinfo=UTC)),
        ("yesterday", None),
        ("2025-13-01T00:00:00Z", None),
        ("2025-09-01T25:00:00Z", None),
        ("", None),
    ],
)
def test_every_iso_form_exports_write_is_read_as_utc(text: str, expected: dt.datetime | None) -> None:
    assert _one(flexible_time(pl.col("v")), [text]) == [expected]


def test_a_dialect_format_is_tried_before_the_iso_forms() -> None:
    frame = pl.DataFrame({LINE: [2, 3, 4], "day": ["07/29/2019", "2019-07-30", "29.07.2019"]})
    checks = Checks("f.csv")
    rows, refused, _ = checks.split(frame, {"_day": checks.timestamp("day", "%m/%d/%Y")})
    assert rows["_day"].to_list() == [
        dt.datetime(2019, 7, 29, tzinfo=UTC),
        dt.datetime(2019, 7, 30, tzinfo=UTC),
    ]
    assert [(r.line, r.reason) for r in refused] == [(4, "not a timestamp: '29.07.2019'")]


def test_first_of_runs_a_later_try_only_on_rows_the_ones_before_left_unread() -> None:
    # the second try raises on any text that is not digits: it must see only "7" (the first try
    # read the dates; the empty and null rows are not present)
    frame = pl.DataFrame({"v": ["2024-01-02", "7", "", None, "2024-01-03"]})
    date = pl.col("v").str.to_date("%Y-%m-%d", strict=False).cast(pl.Int64)
    digits = pl.col("v").str.to_integer(strict=True)
    first = FirstOf((date, digits), present=pl.col("v") != "")
    assert first.evaluate(frame).to_list() == [19724, 7, None, None, 19725]
    with pytest.raises(pl.exceptions.ComputeError):
        frame.select(pl.coalesce(date, digits))  # what a coalesce would have run it on


def test_first_of_with_nothing_left_to_read_never_runs_the_fallback() -> None:
    frame = pl.DataFrame({"v": ["1", "2"]})
    never = pl.col("v").str.to_integer(strict=True) + pl.col("missing_column")
    assert FirstOf((pl.col("v").cast(pl.Int64), never), present=pl.lit(True)).evaluate(frame).to_list() == [
        1,
        2,
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.sampled_from(["", " ", "yesterday", "2025-13-01T00:00:00Z", "2024-02-30"]),
            # hypothesis takes naive bounds; the texts it writes carry their own zone or none
            st.datetimes(dt.datetime(2000, 1, 1), dt.datetime(2099, 12, 31)).flatmap(  # noqa: DTZ001
                lambda t: st.sampled_from(
                    [
                        t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        t.strftime("%m/%d/%Y"),
                        t.strftime("%Y-%m-%d %H:%M:%S"),
                        t.strftime("%Y-%m-%dT%H:%M"),
                        t.strftime("%Y-%m-%d"),
                        t.strftime("%Y-%m-%dT%H:%M:%S+0130"),
                    ]
                )
            ),
        ),
        max_size=30,
    )
)
def test_first_of_the_time_tries_reads_what_their_coalesce_reads(texts: list[str | None]) -> None:
    frame = pl.DataFrame({"v": texts}, schema={"v": pl.String})
    text = pl.col("v").str.strip_chars()
    tries = tuple(time_tries(text, ("%Y-%m-%dT%H:%M:%SZ", "%m/%d/%Y")))
    present = text.is_not_null() & (text != "")
    expected = frame.select(pl.coalesce(tries)).to_series()
    assert FirstOf(tries, present=present).evaluate(frame).to_list() == expected.to_list()


# --- enums and null literals -----------------------------------------------------------------------


def test_enum_values_match_case_and_spelling_insensitively_and_through_aliases() -> None:
    values = ["One-Time", "Recurring", "Usage-Based"]
    got = _one(
        canonical(pl.col("v"), values, {"OneTime": "One-Time", "usage": "Usage-Based"}),
        ["Usage-based", "usage based", "USAGE_BASED", "one time", "Usage", "recurring ", "monthly", "", None],
    )
    assert got == [
        "Usage-Based",
        "Usage-Based",
        "Usage-Based",
        "One-Time",
        "Usage-Based",
        "Recurring",
        None,
        None,
        None,
    ]


def test_null_literals_are_empty_fields_in_every_text_column() -> None:
    frame, refused = csv_frame(b'a,b,c\nNULL,"NULL",x\n\\N,null,Null\nNULLS,nil,NaN\n', "f.csv")
    assert refused == []
    assert null_literals(frame).select("a", "b", "c").rows() == [
        ("", "", "x"),
        ("", "", ""),
        ("NULLS", "nil", "NaN"),  # only the literals themselves; NaN is left to number columns
    ]


# --- findings --------------------------------------------------------------------------------------


def _frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            LINE: [2, 3, 4, 5, 6, 7, 8, 9],
            "Provider": ["AWS", "AWS", "Oracle", "AWS", "Oracle", "AWS", "AWS", "AWS"],
            "Cost": ["1", "2", "3", "x", "5", "6", "7", "8"],
            "Qty": ["-1", "-2", "-3", "1", "-5", "-6", "-7", "-8"],
            "Kind": ["Usage", "usage", "Weird", "Usage", "Odd", "Usage", "Usage", "Usage"],
        }
    )


def _checked(frame: pl.DataFrame) -> Split:
    cost = pl.col("Cost").cast(MONEY, strict=False)
    checks = Checks(
        "bill.csv", spelled={"Qty": "ConsumedQuantity (Menge)"}, money=cost, provider=pl.col("Provider")
    )
    parsed = {"_cost": checks.decimal("Cost"), "_qty": checks.decimal("Qty", required=False)}
    checks.flag("Qty", "negative_usage", "negative usage quantity", parsed["_qty"] < 0)
    kind = canonical(pl.col("Kind"), ["Usage", "Purchase"])
    checks.flag("Kind", "unknown_value", "not one of Usage, Purchase", kind.is_null())
    return checks.split(frame, parsed)


def test_a_flagged_row_is_imported_and_counted_per_rule_column_and_provider() -> None:
    rows, refused, findings = _checked(_frame())
    assert rows[LINE].to_list() == [2, 3, 4, 6, 7, 8, 9]  # line 5's cost cannot be read: refused
    assert [(r.line, r.column, r.reason, r.cost) for r in refused] == [(5, "Cost", "not a number: 'x'", None)]
    assert sorted(findings, key=lambda f: (f.rule, f.provider or "")) == [
        Finding(
            "bill.csv",
            "negative_usage",
            "ConsumedQuantity (Menge)",  # as the file spells it
            "negative usage quantity",
            5,
            ((2, "-1"), (3, "-2"), (7, "-6"), (8, "-7"), (9, "-8")),  # the first five only
            "AWS",
        ),
        Finding(
            "bill.csv",
            "negative_usage",
            "ConsumedQuantity (Menge)",
            "negative usage quantity",
            2,
            ((4, "-3"), (6, "-5")),
            "Oracle",
        ),
        Finding(
            "bill.csv",
            "unknown_value",
            "Kind",
            "not one of Usage, Purchase",
            2,
            ((4, "Weird"), (6, "Odd")),
            "Oracle",
        ),
    ]
    assert "helper" not in "".join(rows.columns) and "_flag_0" not in rows.columns


def test_a_refused_row_keeps_its_cost_when_it_can_be_read() -> None:
    frame = pl.DataFrame({LINE: [2, 3], "Cost": ["1.25", "2.50"], "When": ["2025-09-01", "soon"]})
    checks = Checks("bill.csv", money=pl.col("Cost").cast(MONEY, strict=False))
    parsed = {"_cost": checks.decimal("Cost"), "_when": checks.timestamp("When")}
    _rows, refused, _ = checks.split(frame, parsed)
    assert [(r.line, r.column, r.cost) for r in refused] == [(3, "When", Decimal("2.500000000"))]


def test_findings_of_several_chunks_merge_into_one_count_with_the_first_examples() -> None:
    a = Finding("f", "negative_usage", "Qty", "r", 4, ((2, "-1"), (3, "-1"), (4, "-1"), (5, "-1")))
    b = Finding("f", "negative_usage", "Qty", "r", 3, ((9, "-2"), (10, "-2"), (11, "-2")))
    other = Finding("f", "negative_usage", "Qty", "r", 1, ((12, "-3"),), "oracle")
    assert merge_findings([a, b, other]) == [
        Finding(
            "f", "negative_usage", "Qty", "r", 7, ((2, "-1"), (3, "-1"), (4, "-1"), (5, "-1"), (9, "-2"))
        ),
        other,
    ]
    assert a.message() == 'f, column "Qty": r — 4 row(s) (line 2, 3, 4, 5) [negative_usage]'


def test_more_gpu_hours_than_gpus_times_hours_is_a_finding() -> None:
    day = dt.datetime(2025, 9, 1, tzinfo=UTC)
    lines = pl.DataFrame(
        {
            "line_no": [2, 3, 4, 5],
            "provider": ["azure"] * 4,
            "gpu_count": [1, 1, 8, None],
            "gpu_hours": [Decimal("49.9"), Decimal("24.2"), Decimal("192"), Decimal("500")],
            "charge_start": [day] * 4,
            "charge_end": [day + dt.timedelta(days=1)] * 4,
        },
        schema_overrides={"gpu_hours": MONEY},
    )

    found = capacity_findings(lines, "azure.csv", "Quantity")
    assert found == [
        Finding(
            "azure.csv",
            "gpu_hours_over_capacity",
            "Quantity",
            "more GPU-hours than the instance's GPUs × the hours of the charge period",
            1,  # 24.2 of 24 is within 1 %; 192 of 8 × 24 is exactly full; no GPU count: no check
            ((2, "49.900000000 GPU-h (1 GPU, 2025-09-01 00:00..2025-09-02 00:00)"),),
            "azure",
        )
    ]


# --- through the driver ----------------------------------------------------------------------------


class _Tiny(Dialect):
    """A two-column export: what the driver hands a dialect, and what it does with the findings."""

    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _TinyFile:
        return _TinyFile(opened.label)


class _TinyFile:
    period: Period | None = None
    quantity_column = "qty"

    def __init__(self, file: str) -> None:
        self.file = file
        self.seen: list[str] = []

    def normalize(self, chunk: pl.DataFrame) -> Normalized:
        self.seen.extend(chunk["note"].to_list())
        checks = Checks(self.file, provider=pl.lit("acme"))
        parsed = {
            "billed_cost": checks.decimal("cost"),
            "usage_quantity": checks.decimal("qty", required=False),
        }
        checks.flag("qty", "negative_usage", "negative", parsed["usage_quantity"] < 0)
        rows, refused, findings = checks.split(chunk, parsed)
        lines = rows.select(
            pl.col(LINE).alias("line_no"),
            pl.col(LINE).cast(pl.String).alias("line_key"),
            pl.lit("acme").alias("provider"),
            "billed_cost",
            "usage_quantity",
        )
        return Split(lines, refused, findings)

    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        return RefusedRow(self.file, line, None, f"duplicate of {first}")

    def finish(self, read: int, accepted: int, refused: int) -> None:
        pass


def test_the_driver_reads_null_literals_as_empty_and_carries_findings_on_every_batch(tmp_path: Path) -> None:
    path = tmp_path / "bill.csv"
    rows = ["cost,qty,note", "1.5,NULL,NULL", "2.5,-1,ok", "NULL,1,x", "3e-2,-2,\\N", "4,-3,y"]
    path.write_bytes(("\ufeff" + "\r\n".join(rows) + "\r\n").encode())  # a BOM and CRLF too

    @contextlib.contextmanager
    def opened() -> Iterator[Path]:
        yield path

    batches = list(read_file(ExportFile(str(path), opened), _Tiny(), None, None, chunk_rows=2))
    assert all(isinstance(b, BillingBatch) for b in batches)
    assert sum(b.read for b in batches) == 5
    lines = pl.concat([b.lines for b in batches])
    assert lines.select("line_no", "billed_cost", "usage_quantity").rows() == [
        (2, Decimal("1.500000000"), None),
        (3, Decimal("2.500000000"), Decimal("-1.000000000")),
        (5, Decimal("0.030000000"), Decimal("-2.000000000")),
        (6, Decimal("4.000000000"), Decimal("-3.000000000")),
    ]
    assert [(r.line, r.column, r.reason) for b in batches for r in b.refused] == [
        (4, "cost", "empty where a number is required: ''")
    ]
    found = merge_findings([f for b in batches for f in b.findings])
    assert found == [
        Finding(str(path), "negative_usage", "qty", "negative", 3, ((3, "-1"), (5, "-2"), (6, "-3")), "acme")
    ]


class _Keyed(Dialect):
    def begin(self, opened: OpenedFile, first: pl.DataFrame, period: Period | None) -> _KeyedFile:
        return _KeyedFile(opened.label)


class _KeyedFile(_TinyFile):
    """Line keys from the ``note`` column: a repeated note is a repeated line."""

    def normalize(self, chunk: pl.DataFrame) -> Normalized:
        lines, refused, findings = super().normalize(chunk)
        keys = chunk.select(pl.col(LINE).alias("line_no"), pl.col("note").alias("_note"))
        lines = lines.join(keys, on="line_no").with_columns(pl.col("_note").alias("line_key")).drop("_note")
        return Split(lines, refused, findings)


def test_a_repeated_line_is_refused_without_cost_and_leaves_the_findings(tmp_path: Path) -> None:
    path = tmp_path / "bill.csv"
    path.write_text("cost,qty,note\n1,-1,a\n2,-2,b\n3,-3,a\n4,-4,c\n5,-5,b\n")

    @contextlib.contextmanager
    def opened() -> Iterator[Path]:
        yield path

    batches = list(read_file(ExportFile(str(path), opened), _Keyed(), None, None, chunk_rows=2))
    # its money is booked once, with its first line: no refused cost
    assert [(r.line, r.cost) for b in batches for r in b.refused] == [(4, None), (6, None)]
    found = merge_findings([f for b in batches for f in b.findings])
    # three rows imported, each negative: lines 4 and 6 were refused and are not counted
    assert found == [
        Finding(str(path), "negative_usage", "qty", "negative", 3, ((2, "-1"), (3, "-2"), (5, "-4")), "acme")
    ]
