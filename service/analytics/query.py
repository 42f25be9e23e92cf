"""A grouped ledger query: window × granularity × groupBy × filter under an access scope, run as one
SQL GROUP BY."""

from __future__ import annotations

import datetime as dt
import functools
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import ColumnElement, Connection, Select, Subquery, case, null, select

from service.analytics.access import Access
from service.analytics.dims import NO_FILTER, Dimension, Granularity, LedgerFilter
from service.analytics.paging import WHOLE, Page
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
    """Where a result row sits: its period (None for TOTAL) and its grouped dimension values."""

    period_start: dt.datetime | None
    dims: tuple[tuple[Dimension, str | None], ...]

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
) -> Select[Any]:
    """SELECT keys, measures FROM src GROUP BY keys ORDER BY keys (NULLs first on every database)."""
    keys = key_columns(src, q, extra, free=free)
    stmt = select(*keys, *measures)
    if keys:
        stmt = stmt.group_by(*keys).order_by(*(k.nulls_first() for k in keys))
    return stmt


def fetch_columns(conn: Connection, stmt: Select[Any], page: Page = WHOLE) -> dict[str, Sequence[Any]]:
    """``stmt`` paged by ``page``, as its columns by label: one list per column, no per-row mapping."""
    result = conn.execute(page.apply(stmt))
    names = list(result.keys())
    rows = page.check(result.all())
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return dict(zip(names, columns, strict=True))


def column_count(columns: dict[str, Sequence[Any]]) -> int:
    return len(next(iter(columns.values()), ()))


def group_keys(q: LedgerQuery, columns: dict[str, Sequence[Any]]) -> list[GroupKey]:
    """The :class:`GroupKey` of each row of ``columns`` (as :func:`fetch_columns` returns them), in order."""
    n = column_count(columns)
    if PERIOD in columns:
        periods = columns[PERIOD]
        starts = {k: period_start(q.granularity, k) for k in set(periods)}
        period: Sequence[Any] = [starts[k] for k in periods]
    else:
        period = [None] * n
    dims = q.group_by
    values = [columns[d.name.lower()] for d in dims]
    return [GroupKey(p, tuple(zip(dims, vs, strict=True))) for p, *vs in zip(period, *values, strict=True)]


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
