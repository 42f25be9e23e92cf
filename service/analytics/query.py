"""A grouped ledger query: window × granularity × groupBy × filter under an access scope, run as one
SQL GROUP BY."""

from __future__ import annotations

import datetime as dt
import functools
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Label,
    Select,
    Subquery,
    and_,
    case,
    false,
    literal,
    null,
    or_,
    select,
    tuple_,
)

from service.analytics.access import Access
from service.analytics.dims import NO_FILTER, Dimension, Granularity, LedgerFilter
from service.analytics.paging import WHOLE, Key, Page
from service.analytics.window import Window, ledger_source, period_key, period_start

PERIOD = "period_key"
P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class LedgerQuery:
    """What to aggregate: ``window`` bucketed by ``granularity``, grouped by ``group_by``.

    ``access`` (keyword, no default) is whose rows may be read: the source restricts them in SQL, so
    no query built on a LedgerQuery can forget the caller's scope.
    """

    window: Window
    granularity: Granularity = Granularity.TOTAL
    group_by: tuple[Dimension, ...] = ()
    filter: LedgerFilter = field(default=NO_FILTER)
    #: False forces the hourly path (tests prove both paths agree; some measures are not additive).
    rollup: bool = True
    access: Access = field(kw_only=True)

    def __post_init__(self) -> None:
        # A dimension named twice would only duplicate a GROUP BY term.
        object.__setattr__(self, "group_by", tuple(dict.fromkeys(self.group_by)))

    def source(self, *, rollup: bool | None = None, per_device: bool = False) -> Subquery:
        """The rows to aggregate: the group rollups where they serve (the caller reads only their
        columns: :data:`~service.analytics.window.GROUP_SOURCE_COLUMNS`), else device level;
        ``per_device`` or ``rollup=False``: always device level."""
        use_rollup = self.rollup if rollup is None else rollup
        group_by = None if per_device else self.group_by
        return ledger_source(
            self.window, self.granularity, self.filter, self.access, rollup=use_rollup, group_by=group_by
        )


@dataclass(frozen=True)
class GroupKey:
    """Where a result row sits: its period (None for TOTAL) and its grouped dimension values.

    ``order``: the row's ORDER BY values as SQL returned them (period key, dimensions, extra keys),
    which its cursor carries; not part of the key's identity (a row rebuilt in Python has none).
    """

    period_start: dt.datetime | None
    dims: tuple[tuple[Dimension, str | None], ...]
    order: Key = field(default=(), compare=False, repr=False)

    def value(self, dim: Dimension) -> str | None:
        return dict(self.dims).get(dim)


def key_columns(
    src: Any,
    q: LedgerQuery,
    extra: Sequence[ColumnElement[Any]] = (),
    *,
    free: ColumnElement[bool] | None = None,
) -> list[ColumnElement[Any]]:
    """The GROUP BY terms, labelled: period, grouped dimensions, then ``extra``.

    ``free``: where it holds, workload dimensions read NULL (unallocated time belongs to nobody).
    """
    cols: list[ColumnElement[Any]] = []
    period = period_key(src, q.granularity)
    if period is not None:
        cols.append(period.label(PERIOD))
    for d in q.group_by:
        col: ColumnElement[Any] = src.c[d.column]
        if free is not None and d.is_workload:
            col = case((free, null()), else_=col)
        cols.append(col.label(d.name.lower()))
    return cols + list(extra)


def grouped_select(
    src: Any,
    q: LedgerQuery,
    measures: Sequence[ColumnElement[Any]],
    extra: Sequence[ColumnElement[Any]] = (),
    *,
    free: ColumnElement[bool] | None = None,
    page: Page = WHOLE,
) -> Select[Any]:
    """SELECT keys, measures FROM src GROUP BY keys ORDER BY keys (NULLs first on every database),
    the groups of ``page``: those after its cursor's key (:func:`keyset_after`), at most
    ``page.fetch`` of them."""
    keys = key_columns(src, q, extra, free=free)
    stmt = select(*keys, *measures)
    if keys:
        stmt = stmt.group_by(*keys).order_by(*map(_ascending, keys))
    after = page.after_key([int if isinstance(k.type, Integer) else str for k in keys])
    if after is not None and not keys:
        return stmt.limit(0)  # TOTAL without groupBy: one row (even over no rows), none after it
    if after is not None:
        stmt = stmt.where(keyset_after([_expression(k) for k in keys], after))
    return stmt if page.fetch is None else stmt.limit(page.fetch)


def _ascending(key: ColumnElement[Any]) -> ColumnElement[Any]:
    """``key NULLS FIRST``, or just ``key`` for a NOT NULL column: the same order, and the one a
    plain ascending index has, so PostgreSQL can stream groups out of it (HOUR × DEVICE reads
    ``ix_ledger_hour_hour_device``) instead of sorting them all."""
    return key if getattr(_expression(key), "nullable", True) is False else key.nulls_first()


def _expression(key: ColumnElement[Any]) -> ColumnElement[Any]:
    return key.element if isinstance(key, Label) else key


def keyset_after(keys: Sequence[ColumnElement[Any]], after: Key) -> ColumnElement[bool]:
    """Rows whose ``keys`` come after ``after`` in the order ``ORDER BY keys NULLS FIRST``.

    In the WHERE clause, before grouping: a key is a function of the row, so keeping the rows after
    the key keeps exactly the groups after it, and the database reads only those.

    With no NULL in ``after``: the row-value comparison ``(k1, k2) > (v1, v2)``. SQL compares row
    values left to right and stops at the first unequal or NULL pair, NULL giving unknown (row
    left out): exactly NULLs-first order, since a NULL key there sorts before the non-NULL value.
    PostgreSQL serves it as one index range (``ix_ledger_hour_hour_device`` for HOUR × DEVICE:
    the page then streams out of the index and stops after LIMIT groups).

    With a NULL in ``after``, the expanded form: ``k1 > v1 OR (k1 = v1 AND k2 > v2) …`` with
    ``IS NOT NULL`` for "after NULL" and ``IS NULL`` for "equal to NULL", plus the first key as a
    plain range (``k1 >= v1``) an index can serve.
    """
    if not keys:
        return false()
    if all(v is not None for v in after):
        if len(keys) == 1:
            return keys[0] > after[0]
        return tuple_(*keys) > tuple_(*(literal(v, k.type) for k, v in zip(keys, after, strict=True)))
    before: list[ColumnElement[bool]] = []
    later: list[ColumnElement[bool]] = []
    for key, value in zip(keys, after, strict=True):
        later.append(and_(*before, key.is_not(None) if value is None else key > value))
        before.append(key.is_(None) if value is None else key == value)
    predicate = or_(*later)
    return predicate if after[0] is None else and_(keys[0] >= after[0], predicate)


def fetch_columns(conn: Connection, stmt: Select[Any], page: Page = WHOLE) -> dict[str, Sequence[Any]]:
    """``stmt`` (paged by :func:`grouped_select`) as its columns by label: one list per column, no
    per-row mapping; RESULT_TOO_LARGE when an answer without ``first`` exceeds ``page``'s cap."""
    result = conn.execute(stmt)
    names = list(result.keys())
    rows = page.check(result.all())
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return dict(zip(names, columns, strict=True))


def column_count(columns: dict[str, Sequence[Any]]) -> int:
    return len(next(iter(columns.values()), ()))


def group_keys(
    q: LedgerQuery, columns: dict[str, Sequence[Any]], extra: Sequence[str] = ()
) -> list[GroupKey]:
    """The :class:`GroupKey` of each row of ``columns`` (as :func:`fetch_columns` returns them), in
    order; ``extra``: the labels of the extra ORDER BY keys :func:`grouped_select` was given, in order."""
    n = column_count(columns)
    order_columns = [columns[PERIOD]] if PERIOD in columns else []
    if PERIOD in columns:
        periods = columns[PERIOD]
        starts = {k: period_start(q.granularity, k) for k in set(periods)}
        period: Sequence[Any] = [starts[k] for k in periods]
    else:
        period = [None] * n
    dims = q.group_by
    values = [columns[d.name.lower()] for d in dims]
    order_columns += [*values, *(columns[name] for name in extra)]
    orders = zip(*order_columns, strict=True) if order_columns else [()] * n
    return [
        GroupKey(p, tuple(zip(dims, vs, strict=True)), order)
        for order, p, *vs in zip(orders, period, *values, strict=True)
    ]


def collector_paused(fn: Callable[P, T]) -> Callable[P, T]:
    """Run ``fn`` with Python's cyclic garbage collector paused.

    A large answer allocates a few objects per row, none in a cycle and all kept: the collector's
    passes over them cost as much again as building them (720k rows: measured about half the time).
    Collection resumes when ``fn`` returns; with threads, one that ends its pause first only resumes
    collection early for the others, and one that found it paused leaves it so.
    """

    @functools.wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> T:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused
