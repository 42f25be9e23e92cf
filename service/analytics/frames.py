"""Aggregate answers as polars columns: a grouped SELECT read without a Python object per row.

The analytics functions build one small dataclass per answer row (GraphQL resolves them field by
field); an export of 720k rows wants columns instead. :func:`read_frame` runs the *same* grouped
SELECT (each question's ``*_select`` function) and reads its result column-wise:

* PostgreSQL: ``COPY (SELECT …) TO STDOUT`` as CSV, parsed by polars (in Rust, no row tuples).
  Floats are printed shortest-exact (``extra_float_digits``), so they parse to the very doubles
  the driver hands the analytics functions.
* SQLite (no COPY): the driver's tuples transposed into one series per column.

Each column gets the type of its SQL expression. Money (:class:`~service.money.ExactDecimal`)
becomes ``Decimal(38, 9)`` with the rounding ``ExactDecimal`` applies when it reads a value:
NUMERIC text rounded half-even to 1e-9 on PostgreSQL; integer nanos, or a float of nanos rounded
half-even to an integer, on SQLite. So a frame holds exactly the values the row builders see.

The remaining helpers are the vectorized forms of the per-row steps the row builders take
(period start, metric label, rate source): each names the scalar function it mirrors, and
tests/export checks that they agree value for value.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import polars as pl
from sqlalchemy import Boolean, Connection, Float, Integer, Numeric, Select, String
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

from service.analytics.dims import MIXED_DEFAULT_METRIC, Granularity
from service.analytics.paging import WHOLE, Page
from service.analytics.query import PERIOD, LedgerQuery
from service.analytics.window import HOURS_PER_DAY, WEEK_OFFSET_DAYS
from service.ledger import bulk
from service.money import ExactDecimal
from service.timeutil import HOUR_S

#: Money in frames: 29 integer digits, the ledger's 1e-9 quantum.
MONEY = pl.Decimal(38, 9)
#: Period starts in frames: UTC instants.
INSTANT = pl.Datetime("us", "UTC")
PERIOD_START = "period_start"
_NANO = pl.Series([Decimal("0.000000001")], dtype=MONEY)
_MONEY_TEXT = pl.String  # a money column while it is still the database's text or nanos


def _dtype(sql_type: TypeEngine[Any]) -> pl.DataType:
    """The polars type a column of ``sql_type`` is read as (money: see :func:`_money`)."""
    if isinstance(sql_type, ExactDecimal):
        return _MONEY_TEXT()
    if isinstance(sql_type, TypeDecorator):  # e.g. SQLModel's AutoString: the type it stores as
        return _dtype(sql_type.impl_instance)
    if isinstance(sql_type, Boolean):
        return pl.Boolean()
    if isinstance(sql_type, Integer):
        return pl.Int64()
    if isinstance(sql_type, Float) or (isinstance(sql_type, Numeric) and not sql_type.asdecimal):
        return pl.Float64()
    if isinstance(sql_type, String | NullType):
        return pl.String()
    raise TypeError(f"no frame type for SQL type {sql_type!r}")


def read_frame(conn: Connection, stmt: Select[Any], page: Page = WHOLE) -> pl.DataFrame:
    """``stmt`` (a grouped, ordered SELECT) as a frame in the SELECT's order, at most ``page.fetch``
    rows; ``page``'s cap is checked as :meth:`Page.check` does (RESULT_TOO_LARGE above ``max_rows``).
    """
    # ``page`` caps the rows here, unless grouped_select already cut the page (with its cursor:
    # GraphQL pages; LIMIT 0 after the one row of an answer without keys).
    if page.fetch is not None and stmt._limit_clause is None:
        stmt = stmt.limit(page.fetch)
    columns = [(str(c.key), c.type) for c in stmt.selected_columns]
    names = [name for name, _ in columns]
    money = {name for name, sql_type in columns if isinstance(sql_type, ExactDecimal)}
    schema = {name: _dtype(sql_type) for name, sql_type in columns}
    if conn.dialect.name == "postgresql":
        frame = bulk.copy_out_frame(conn, stmt, schema)
    else:
        frame = _driver_frame(conn, stmt, names, schema, money)
    if page.first is None:
        page.refuse_above(frame.height)
    return frame.with_columns(_money(frame[name], conn.dialect.name) for name in money)


def _driver_frame(
    conn: Connection,
    stmt: Select[Any],
    names: list[str],
    schema: dict[str, pl.DataType],
    money: set[str],
) -> pl.DataFrame:
    result = conn.execute(stmt)
    try:
        rows = result.cursor.fetchall()  # the driver's tuples: no SQLAlchemy row processing
    finally:
        result.close()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    series = []
    for name, values in zip(names, columns, strict=True):
        if name in money:
            series.append(_nanos(name, values))
        else:
            dtype = schema[name]
            series.append(pl.Series(name, values, dtype=dtype, strict=not dtype.is_float()))
    return pl.DataFrame(series)


def _nanos(name: str, values: tuple[Any, ...]) -> pl.Series:
    """A SQLite money column: integer nanos, or floats of nanos (a cost shared by a ratio; such a
    column's empty groups read the integer 0). Integers stay exact beyond 2**53 even beside floats."""
    kinds = set(map(type, values)) - {type(None)}
    if kinds <= {int}:
        return pl.Series(name, values, dtype=pl.Int64)
    if kinds <= {float}:
        return pl.Series(name, values, dtype=pl.Float64)
    whole = pl.Series(name, [v if type(v) is int else None for v in values], dtype=pl.Int64)
    shares = pl.Series(name, [v if type(v) is float else None for v in values], dtype=pl.Float64)
    return whole.fill_null(shares.round(0, mode="half_to_even").cast(pl.Int64))


def _money(column: pl.Series, dialect: str) -> pl.Series:
    """A money column read as ``ExactDecimal.process_result_value`` reads each value."""
    if dialect == "postgresql":
        return column.cast(MONEY)  # text → Decimal(38, 9): rounds half-even, as quantize does
    if column.dtype.is_float():
        column = column.round(0, mode="half_to_even").cast(pl.Int64)  # Python's round()
    return (column.cast(pl.Int64).cast(pl.Decimal(38, 0)) * _NANO).alias(column.name)


# --- the vectorized forms of the row builders' steps ------------------------------------------------


def period_start(granularity: Granularity) -> pl.Expr:
    """``window.period_start`` of the ``period_key`` column, as ``period_start`` (null for TOTAL)."""
    key = pl.col(PERIOD)
    seconds: pl.Expr
    if granularity is Granularity.TOTAL:
        return pl.lit(None, dtype=INSTANT).alias(PERIOD_START)
    if granularity is Granularity.MONTH:
        year = key // 12
        start = pl.datetime(1970 + year, key - year * 12 + 1, 1, time_unit="us", time_zone="UTC")
        return start.alias(PERIOD_START)
    if granularity is Granularity.HOUR:
        seconds = key * HOUR_S
    elif granularity is Granularity.DAY:
        seconds = key * (HOURS_PER_DAY * HOUR_S)
    else:  # WEEK: week k starts on day 7k - 3 (a Monday)
        seconds = (key * 7 - WEEK_OFFSET_DAYS) * (HOURS_PER_DAY * HOUR_S)
    return pl.from_epoch(seconds, time_unit="s").cast(INSTANT).alias(PERIOD_START)


def key_columns(q: LedgerQuery) -> list[pl.Expr]:
    """``period_start`` and the grouped dimensions (GroupKey's fields), from a frame of a grouped SELECT."""
    return [period_start(q.granularity), *(pl.col(d.name.lower()) for d in q.group_by)]


def metric_label(metric: str | None, lo: str, hi: str) -> pl.Expr:
    """``dims.metric_label`` of the MIN/MAX default metric columns ``lo``/``hi``."""
    if metric is not None:
        return pl.lit(metric, dtype=pl.String)
    same = pl.col(lo).is_not_null() & (pl.col(lo) == pl.col(hi))
    return pl.when(same).then(pl.col(lo)).otherwise(pl.lit(MIXED_DEFAULT_METRIC))


def one_of(lo: str, hi: str) -> pl.Expr:
    """``window.one_of`` of MIN/MAX text columns: the single value, ``mixed``, or null."""
    return (
        pl.when(pl.col(lo).is_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(pl.col(lo) == pl.col(hi))
        .then(pl.col(lo))
        .otherwise(pl.lit("mixed"))
    )
