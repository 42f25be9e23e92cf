"""A page of an aggregate answer read as a polars frame, handed to GraphQL as columns.

:func:`bucket_columns` turns the frame of a ``service.analytics.columnar`` answer into a
:class:`~service.api.leaf_lists.ColumnRows` of a bucket type: no object, ``GroupKey`` or row
dataclass per row; each field's column is computed only if the query selects it. The values are
the ones the row path gives (``UsageRow.page``): floats rounded by :func:`gql_float`, instants
as UTC datetimes (and their ISO text, what the DateTime scalar serializes), cursors of the rows'
order keys.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np
import orjson
import polars as pl

from service.analytics.frames import PERIOD_START
from service.analytics.paging import Page, binding_of
from service.analytics.query import PERIOD, LedgerQuery
from service.api.leaf_lists import ColumnRows

#: ``datetime.isoformat()`` of a whole-second UTC instant (period starts are whole hours).
ISO_SECONDS = "%Y-%m-%dT%H:%M:%S+00:00"


#: Above this magnitude ``x * 1e6`` is no longer exact enough to round by: Python rounds it.
_SCALED_MAX = 1e9


def rounded(values: Sequence[float | None]) -> list[float | None]:
    """:func:`service.api.types.gql_float` of each value (Python's correctly rounded ``round``)."""
    if None in values:
        return [None if v is None else round(v, 6) for v in values]
    whole = cast(Sequence[float], values)
    return list(map(round, whole, repeat(6)))


def rounded_column(column: pl.Series) -> list[float | None]:
    """:func:`rounded` of a float column, the same doubles, vectorized.

    ``round(x, 6)`` is the double nearest to k / 10**6, k the integer nearest to the exact x × 10**6
    (ties to even). NumPy computes k = rint(x * 1e6) from the product rounded to a double, which
    is k itself unless that product lies within a rounding error of a half-integer; those values
    (and very large or non-finite ones) go through Python's ``round``. k / 1e6 is then one
    correctly rounded division of two exact doubles: the double nearest to k / 10**6.
    """
    x, out, risky = _scaled_round(column)
    values: list[float | None] = out.tolist()
    for i in np.flatnonzero(risky).tolist():
        v = x[i]
        values[i] = None if np.isnan(v) else round(float(v), 6)
    if column.null_count():
        for i in column.is_null().arg_true().to_list():
            values[i] = None
    return values


def _scaled_round(column: pl.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The column's values (nulls NaN), each rounded by ``rint(x * 1e6) / 1e6``, and where that
    may differ from ``round(x, 6)`` (:func:`rounded_column`)."""
    x = column.cast(pl.Float64).to_numpy()  # nulls read NaN
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x * 1e6
        k = np.rint(scaled)
        out = k / 1e6
        near_half = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) <= 4 * np.spacing(np.abs(scaled))
        risky = near_half | ~(np.abs(x) < _SCALED_MAX)
    return x, out, risky


def rounded_series(column: pl.Series) -> pl.Series | None:
    """:func:`rounded_column` as a Float64 series (nulls null), or None where the column holds a
    NaN or an infinity (whose serialization the scalar decides)."""
    if not bool(column.is_finite().all()):  # nulls are skipped
        return None
    x, out, risky = _scaled_round(column)
    for i in np.flatnonzero(risky & ~np.isnan(x)).tolist():
        out[i] = round(float(x[i]), 6)
    return pl.Series(column.name, out, dtype=pl.Float64, nan_to_null=True)


def _instants(frame: pl.DataFrame) -> Callable[[], list[Any]]:
    return lambda: frame[PERIOD_START].to_list()


def _iso(frame: pl.DataFrame) -> Callable[[], pl.Series] | None:
    """ISO text of the period starts, where each is a whole second (else the scalar serializes)."""
    column = frame[PERIOD_START]
    if column.null_count() == column.len():
        return lambda: pl.Series(PERIOD_START, [None] * frame.height, dtype=pl.String)
    if (column.dt.microsecond() != 0).any():
        return None
    # a page holds few distinct periods: format each once, then look them up
    distinct = column.drop_nulls().unique()
    texts = distinct.dt.strftime(ISO_SECONDS)
    return lambda: column.replace_strict(distinct, texts, return_dtype=pl.String)


class Floats:
    """A float column of the frame, rounded for display (:func:`rounded_column`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, frame: pl.DataFrame) -> list[float | None]:
        return rounded_column(frame[self.name])

    def series(self, frame: pl.DataFrame) -> pl.Series | None:
        """The same values as a series (None: not expressible so)."""
        return rounded_series(frame[self.name])


class UpperText:
    """A text column of the frame in upper case (metric names as GraphQL shows them)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, frame: pl.DataFrame) -> list[str | None]:
        return self.series(frame).to_list()

    def series(self, frame: pl.DataFrame) -> pl.Series:
        return frame[self.name].cast(pl.String).str.to_uppercase()


def bucket_columns(
    cls: type,
    frame: pl.DataFrame,
    q: LedgerQuery,
    page: Page,
    columns: dict[str, Callable[[pl.DataFrame], Sequence[Any]]],
) -> ColumnRows:
    """The rows of ``frame`` (a columnar answer read with ``order_key``) as ``cls`` objects:
    ``period_start``, ``cursor``, the grouped dimensions, and ``columns[name](frame)`` for each
    other field ``name``."""
    dims = [d.name.lower() for d in q.group_by]
    order = ([PERIOD] if PERIOD in frame.columns else []) + dims

    def cursors() -> list[str]:
        return cursor_column(page, frame, order)

    makers: dict[str, Callable[[], Sequence[Any]]] = {"period_start": _instants(frame), "cursor": cursors}
    for d in dims:
        makers[d] = _listed(frame, d)
    for name, make in columns.items():
        makers[name] = _applied(make, frame)
    iso = _iso(frame)
    # Text columns and finite float columns serialize to themselves (String, Float): no pass
    # over their values.
    plain = {"cursor", *dims}
    for name in columns:
        dtype = frame.schema.get(name)
        if _text(dtype) or (dtype == pl.Float64 and bool(frame[name].is_finite().all())):
            plain.add(name)
    wire = {"period_start": _listing(iso)} if iso is not None else None
    # The serialized values as series, for a response written as JSON by polars (ColumnRows.json).
    series: dict[str, Callable[[], pl.Series | None]] = {"cursor": lambda: cursor_series(page, frame, order)}
    if iso is not None:
        series["period_start"] = iso
    for d in dims:
        if _text(frame.schema[d]):
            series[d] = _series_of(frame, d)
    for name, make in columns.items():
        of = getattr(make, "series", None)
        if of is not None:
            series[name] = _applied_series(of, frame)
    return ColumnRows(cls, frame.height, makers, wire, frozenset(plain), series)


def _text(dtype: pl.DataType | None) -> bool:
    """Text, plain or dictionary-encoded (an Enum: device ids read from the day segments): both
    list and write as their text."""
    return dtype == pl.String or isinstance(dtype, pl.Enum)


def _listing(make: Callable[[], pl.Series]) -> Callable[[], list[Any]]:
    return lambda: make().to_list()


def _series_of(frame: pl.DataFrame, name: str) -> Callable[[], pl.Series]:
    return lambda: frame[name]


def _applied_series(
    of: Callable[[pl.DataFrame], pl.Series | None], frame: pl.DataFrame
) -> Callable[[], pl.Series | None]:
    return lambda: of(frame)


def cursor_column(page: Page, frame: pl.DataFrame, order: Sequence[str]) -> list[str]:
    """:meth:`Page.key_cursors` of the rows' order keys (the columns ``order``), the same text
    built column-wise: base64url of the JSON array ``[binding, key…]`` as orjson writes it."""
    return cursor_series(page, frame, order).to_list()


def cursor_series(page: Page, frame: pl.DataFrame, order: Sequence[str]) -> pl.Series:
    """:func:`cursor_column` as a String series."""
    if frame.height == 0:
        return pl.Series("cursor", [], dtype=pl.String)
    raw_binding = page.binding or binding_of(page.field)
    binding = orjson.dumps(raw_binding).decode()
    if not order:  # one row (TOTAL without groupBy): the key is empty
        return pl.Series("cursor", page.key_cursors([()] * frame.height), dtype=pl.String)
    split = _split_cursors(frame, order, raw_binding)
    if split is not None:
        return split
    parts: list[pl.Expr] = [pl.lit("[" + binding)]
    for name in order:
        parts += [pl.lit(","), _key_text(frame, name).fill_null(pl.lit("null"))]
    encoded = _base64url(pl.concat_str([*parts, pl.lit("]")]))
    return frame.select(encoded.alias("cursor"))["cursor"]


def _key_text(frame: pl.DataFrame, name: str) -> pl.Expr:
    """The JSON text of column ``name``'s values as orjson writes them (null where null)."""
    column = frame[name]
    if column.dtype.is_integer():
        return pl.col(name).cast(pl.String)
    if isinstance(column.dtype, pl.Enum):  # each dictionary value once, looked up by code
        return pl.lit(_enum_texts(column).gather(column.to_physical()))
    # each distinct value once through orjson: its JSON string, escapes and all
    distinct = column.drop_nulls().unique().to_list()
    return pl.col(name).replace_strict(
        distinct, [orjson.dumps(v).decode() for v in distinct], return_dtype=pl.String
    )


def _enum_texts(column: pl.Series) -> pl.Series:
    """The JSON text of each value of an Enum column's dictionary, in code order."""
    values = cast(pl.Enum, column.dtype).categories.to_list()
    return pl.Series([orjson.dumps(v).decode() for v in values], dtype=pl.String)


def _base64url(text: pl.Expr) -> pl.Expr:
    return text.str.encode("base64").str.replace_many(["+", "/"], ["-", "_"])


#: The split cursors are built when a page holds at most this share of distinct heads per row.
_HEADS_PER_ROW_MAX = 0.125


def _split_cursors(frame: pl.DataFrame, order: Sequence[str], binding: str) -> pl.Series | None:
    """The cursors built in two pieces, or None where the split does not apply (nulls in the key,
    many distinct heads, a last key column other than an Enum or with a dictionary larger than
    the page).

    The JSON ``[binding,k1,…,kn]`` is a head ``[binding,k1,…,k(n-1),`` (few distinct per page:
    the periods) and ``kn]`` (an Enum: few distinct values). base64 of bytes cut at a multiple
    of 3 is the base64 of each piece joined, so each head's first ``3m`` bytes are encoded once,
    and the tails (the head's last 0–2 bytes, the carry, and ``kn]``) once per (carry, value):
    a row's cursor is two looked-up texts joined, no per-row JSON nor base64.
    """
    *head, last = order
    column = frame[last]
    if not isinstance(column.dtype, pl.Enum) or any(frame[name].null_count() for name in order):
        return None
    if head:
        ids = frame.select(
            (pl.struct([pl.col(name).to_physical() for name in head]).rank("dense") - 1).cast(pl.UInt32)
        ).to_series()
        heads = frame.select(*head, ids.alias("_id")).unique(subset="_id").sort("_id")
        if heads.height > _HEADS_PER_ROW_MAX * frame.height:
            return None
        values = heads.select(head).rows()
    else:
        ids = pl.Series([0] * frame.height, dtype=pl.UInt32)  # one head for all: ["binding",
        values = [()]
    prefixes: list[str] = []
    carries: dict[bytes, int] = {}
    carry_of_head: list[int] = []
    for value in values:
        text = orjson.dumps([binding, *value])[:-1] + b","
        cut = len(text) - len(text) % 3
        carry = text[cut:]
        if not carry.isascii():  # a UTF-8 character cut in two: the tails are not text
            return None
        prefixes.append(base64.urlsafe_b64encode(text[:cut]).decode())
        carry_of_head.append(carries.setdefault(carry, len(carries)))
    texts = _enum_texts(column)
    count = texts.len()
    if count * len(carries) > frame.height:  # a dictionary larger than the page
        return None
    tails = pl.concat(
        [
            pl.select(
                _base64url(pl.concat_str([pl.lit(carry.decode()), pl.lit(texts), pl.lit("]")]))
            ).to_series()
            for carry in carries
        ]
    )
    carry_ids = pl.Series(carry_of_head, dtype=pl.UInt32).gather(ids)
    tail_ids = carry_ids * count + column.to_physical().cast(pl.UInt32)
    joined = pl.concat_str(
        [pl.lit(pl.Series(prefixes, dtype=pl.String).gather(ids)), pl.lit(tails.gather(tail_ids))]
    )
    return frame.select(joined.alias("cursor"))["cursor"]


def _listed(frame: pl.DataFrame, name: str) -> Callable[[], list[Any]]:
    return lambda: frame[name].to_list()


def _applied(
    make: Callable[[pl.DataFrame], Sequence[Any]], frame: pl.DataFrame
) -> Callable[[], Sequence[Any]]:
    return lambda: make(frame)


def floats(name: str) -> Floats:
    """A float column of the frame, rounded for display."""
    return Floats(name)
