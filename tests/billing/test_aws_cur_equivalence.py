"""The columnar CUR mapping (values computed once per column or per distinct value) gives exactly
what the mapping before it gave (``cur_reference``, kept verbatim): the same lines bit for bit,
the same refusals (file, line, column, reason, raw, cost) and the same findings — on the fixtures,
and on bills drawn by hypothesis from the fixture's rows with hostile values in every column the
mapping reads (bad numbers, times, currencies, tags, product maps, types, ids, null literals)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from unittest import mock

import polars as pl
import pytest
from billing_rows import csv_rows as rows
from billing_rows import render_csv as render
from cur_reference import _normalize as reference_normalize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from connectors import aws_cur
from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch, BillingFileError
from service.ledger import bulk

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2 = FIXTURES / "cur2_2025-09_daily.csv"
LEGACY = FIXTURES / "cur_legacy_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)

#: Values each column may take instead of the fixture's: valid variants and hostile ones.
POOLS: dict[str, list[str]] = {
    "identity_line_item_id": ["", "NULL", "repeated-id", "x" * 40],
    "line_item_line_item_type": [
        "Usage", "usage", "Savings Plan Covered Usage", "SavingsPlanNegation", "DiscountedUsage",
        "SavingsPlanRecurringFee", "SavingsPlanUpfrontFee", "RIFee", "Fee", "Credit", "Refund", "Tax",
        "EdpDiscount", "Something New", "", "null",
    ],
    "line_item_usage_type": [
        "BoxUsage:p5.48xlarge", "USE2-SpotUsage:g5.xlarge", "DedicatedUsage:p4d.24xlarge",
        "DataTransfer-Out-Bytes", "", "EUC1-HeavyUsage:g6e.12xlarge",
    ],
    "line_item_usage_amount": ["1", "0.5", "", "NaN", "abc", "-2", "3.2E-05", "NULL", " 24 "],
    "line_item_unblended_cost": [
        "1.5", "", "x", "-0.25", "1e3", "0.0000000005", "NaN", "\\N", "1617.803491945205",
    ],
    "pricing_public_on_demand_cost": ["2", "", "bad", "NaN", "-1"],
    "savings_plan_savings_plan_effective_cost": ["1.25", "", "bad", "nan"],
    "reservation_effective_cost": ["3", "", "bad"],
    "savings_plan_total_commitment_to_date": ["10", "", "bad"],
    "savings_plan_used_commitment": ["4", "", "bad"],
    "reservation_reservation_a_r_n": ["", "arn:aws:ec2:us-east-1:999988887777:reserved-instances/r-1"],
    "line_item_usage_start_date": [
        "2025-09-01T00:00:00Z", "2025-09-02 00:00:00.000", "2025-09-03T01:00:00+00:00",
        "2025-09-04T00:00:00.000Z", "2025-09-05", "bad", "", "1999-01-01T00:00:00Z", "2025-11-05T00:00:00Z",
    ],
    "line_item_usage_end_date": [
        "2025-09-02T00:00:00Z", "2025-09-02 01:00:00", "2025-09-03T02:00:00+0000", "bad", "",
        "2025-08-01T00:00:00Z", "2101-01-01T00:00:00Z",
    ],
    "bill_billing_period_start_date": [
        "2025-09-01T00:00:00Z", "2025-09-01 00:00:00", "bad", "0001-01-01T00:00:00Z",
    ],
    "line_item_currency_code": ["USD", "usd", "EUR", "XXX", ""],
    "product": [
        '{"instance_type":"p5.48xlarge","gpu":"8"}', "{}", "not json", "",
        '[{"key":"gpu","value":"4"},{"key":"instance_type","value":"g6.xlarge"}]', '{"gpu":"two"}',
    ],
    "product_instance_type": ["p5.48xlarge", "", "g5.xlarge", "m5.large"],
    "resource_tags": ['{"user:team":"ml","x":""}', "{}", "[1]", "oops", "", '{"b":"2","a":"1"}'],
    "pricing_unit": ["Hrs", "hrs", "Hours", "GB", ""],
    "line_item_resource_id": ["", "i-0abc", "NULL"],
}  # fmt: skip
HEADER, FIXTURE_ROWS = rows(CUR2)


@st.composite
def bills(draw: st.DrawFn) -> list[list[str]]:
    """Fixture rows, each with some of the mapped columns replaced from ``POOLS``."""
    picked = draw(st.lists(st.integers(0, len(FIXTURE_ROWS) - 1), min_size=1, max_size=25))
    body = []
    for i in picked:
        row = list(FIXTURE_ROWS[i])
        for column in draw(st.lists(st.sampled_from(sorted(POOLS)), max_size=4, unique=True)):
            row[HEADER.index(column)] = draw(st.sampled_from(POOLS[column]))
        body.append(row)
    return body


def read(path: Path, *, reference: bool, chunk_rows: int = 20_000) -> list[BillingBatch | BillingFileError]:
    config = AwsCurConfig(name="bills", path=str(path), chunk_rows=chunk_rows)
    if not reference:
        with AwsCurConnector(config) as connector:
            return list(connector.read(SEP, OCT))

    def normalize(self: aws_cur._CurFile, chunk: pl.DataFrame) -> object:
        return reference_normalize(chunk, self.layout, self.file, self.period or (None, None))

    # the reference mapping read every column of every chunk (it predates reading only those mapped)
    with (
        mock.patch.object(aws_cur._CurFile, "normalize", normalize),
        mock.patch.object(aws_cur._Layout, "read_columns", lambda self: None),
        AwsCurConnector(config) as connector,
    ):
        return list(connector.read(SEP, OCT))


def assert_same(
    fast: list[BillingBatch | BillingFileError], slow: list[BillingBatch | BillingFileError]
) -> None:
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert type(a) is type(b)
        if isinstance(a, BillingFileError):
            assert str(a) == str(b)
            continue
        assert isinstance(b, BillingBatch)
        assert_frame_equal(a.lines, b.lines)  # dtypes, values and order, exactly
        assert a.refused == b.refused
        assert a.findings == b.findings
        assert (a.read, a.period_start, a.period_end) == (b.read, b.period_start, b.period_end)


@pytest.mark.parametrize("path", [CUR2, LEGACY], ids=["cur2", "legacy"])
def test_fixtures_map_exactly_as_before(path: Path) -> None:
    fast = read(path, reference=False)
    assert sum(b.lines.height for b in fast if isinstance(b, BillingBatch)) == 137
    assert_same(fast, read(path, reference=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bills(), chunk_rows=st.sampled_from([3, 20_000]), named_period=st.booleans())
def test_hostile_bills_map_exactly_as_before(
    tmp_path: Path, body: list[list[str]], chunk_rows: int, named_period: bool
) -> None:
    # a BILLING_PERIOD= folder names the period; a plain file takes it from its rows
    folder = tmp_path / ("BILLING_PERIOD=2025-09" if named_period else "plain")
    folder.mkdir(exist_ok=True)
    path = folder / "bill.csv"
    path.write_bytes(render(HEADER, body))
    fast = read(path, reference=False, chunk_rows=chunk_rows)
    slow = read(path, reference=True, chunk_rows=chunk_rows)
    assert_same(fast, slow)
    # every record is accounted for: read = accepted + refused
    batches = [b for b in fast if isinstance(b, BillingBatch)]
    assert sum(b.read for b in batches) == sum(b.lines.height + len(b.refused) for b in batches)


#: Text a value may hold that either COPY format must escape or quote.
_HOSTILE_TEXT = st.text(
    alphabet=st.sampled_from(["a", "é", " ", ",", '"', "\\", "\t", "\n", "\r", "N", ".", "{", "}", "\x7f"]),
    max_size=12,
)


#: NUMERIC(24, 9)'s range: 15 integer digits, 9 places.
_NUMERIC = st.decimals(
    min_value=Decimal("-999999999999999.999999999"),
    max_value=Decimal("999999999999999.999999999"),
    places=9,
    allow_nan=False,
    allow_infinity=False,
)
#: Instants both COPY formats carry (the microsecond is timestamptz's resolution).
_INSTANT = st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC))  # noqa: DTZ001


@pytest.mark.postgres
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), _HOSTILE_TEXT),
            st.one_of(st.none(), _NUMERIC),
            st.one_of(st.none(), _INSTANT),
            st.one_of(st.none(), st.booleans()),
            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_binary_copy_stores_what_csv_copy_stores(
    pg_url: str, rows: list[tuple[str | None, Decimal | None, dt.datetime | None, bool | None, int | None]]
) -> None:
    """The unit table's COPY (binary format, pgpq) stores every value exactly as the CSV COPY of
    its text does: nulls and empty strings apart, backslashes, tabs, newlines, quotes and ``\\N``
    as written, numerics to the last place and sign, instants to the microsecond, an Int64 into
    an ``integer`` column."""
    from service.db import make_engine

    engine = make_engine(pg_url)
    texts, numbers, instants, flags, counts = (list(c) for c in zip(*rows, strict=True))
    frame = pl.DataFrame(
        {
            "t": pl.Series(texts, dtype=pl.String),
            "n": pl.Series(numbers, dtype=pl.Decimal(38, 9)),
            "at": pl.Series(instants, dtype=pl.Datetime("us", "UTC")),
            "b": pl.Series(flags, dtype=pl.Boolean),
            "c": pl.Series(counts, dtype=pl.Int64),  # BILLING_SCHEMA's line_no: Int64 into integer
            "i": pl.Series(range(len(rows)), dtype=pl.Int64),
        }
    )
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TEMP TABLE copy_csv (t varchar(40), n numeric(24, 9), at timestamptz, b boolean,"
                " c integer, i bigint) ON COMMIT DROP"
            )
            conn.exec_driver_sql("CREATE TEMP TABLE copy_binary (LIKE copy_csv) ON COMMIT DROP")
            bulk.copy_csv_into(conn, "copy_csv", frame.with_columns(bulk.pg_time("at")))
            bulk.copy_binary_into(conn, "copy_binary", frame)
            query = "SELECT t, n, n::text, at, b, c, i FROM {} ORDER BY i"
            by_csv = conn.exec_driver_sql(query.format("copy_csv")).all()
            by_binary = conn.exec_driver_sql(query.format("copy_binary")).all()
    finally:
        engine.dispose()
    assert by_binary == by_csv
    assert [r[0] for r in by_binary] == texts
    assert [r[1] for r in by_binary] == numbers
    assert [r[3] for r in by_binary] == instants


@pytest.mark.postgres
def test_binary_copy_refuses_what_it_cannot_store_exactly(pg_url: str) -> None:
    """A column type without a binary form here, a column the table lacks, a float where a numeric
    goes and an integer beyond the column's range are errors — nothing is stored —, never a value
    silently changed."""
    from service.db import make_engine

    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TEMP TABLE copy_odd (d date, n numeric(24, 9), c integer) ON COMMIT DROP"
            )
            day = pl.DataFrame({"d": [dt.date(2025, 9, 1)]})
            with pytest.raises(TypeError, match=r"no binary form for column 'd' \(date\)"):
                bulk.copy_binary_into(conn, "copy_odd", day)
            with pytest.raises(TypeError, match=r"it has no column 'x'"):
                bulk.copy_binary_into(conn, "copy_odd", pl.DataFrame({"x": [1]}))
            with pytest.raises(TypeError, match=r"column 'n' is Float64, not a Decimal"):
                bulk.copy_binary_into(conn, "copy_odd", pl.DataFrame({"n": [0.1]}))
            with pytest.raises(pl.exceptions.InvalidOperationError):
                bulk.copy_binary_into(conn, "copy_odd", pl.DataFrame({"c": [2**31]}))
            assert conn.exec_driver_sql("SELECT count(*) FROM copy_odd").scalar_one() == 0
    finally:
        engine.dispose()
