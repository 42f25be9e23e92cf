"""Query windows, period buckets and the ledger source every aggregate reads.

:func:`ledger_source` picks the cheapest source that answers exactly:

* **group rollups** — when the caller names its ``group_by`` (it promises to read only
  :data:`GROUP_SOURCE_COLUMNS`: additive measures and rollup dimensions) and the grouping, the
  filter and the access scope involve only :data:`ROLLUP_DIMENSIONS`: ``ledger_group_day`` rows for
  the whole UTC days of the window UNION ALL ``ledger_group_hour`` rows for its partial-day edges
  (all of it from ``ledger_group_hour`` for granularity HOUR). Their size is groups × periods,
  whatever the fleet's size;
* **device level** — otherwise: ``ledger_hour`` rows, or for granularity DAY and coarser
  ``ledger_day`` rows for the whole days UNION ALL ``ledger_hour`` rows for the edges.

Every rollup holds the same sums as its hours, so all paths give the same answers for additive
measures (money exactly); ``rollup=False`` forces ``ledger_hour`` alone. The group source has no
device-level column (device_id, node, instance_id, workload_key's value, hour rows per device…):
a measure that needs one fails to build on it instead of answering wrongly, and
:func:`money_share_sum` (a per-row ratio, not additive) refuses it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    Integer,
    Numeric,
    Select,
    Subquery,
    Table,
    case,
    cast,
    false,
    func,
    literal,
    or_,
    type_coerce,
    union_all,
)
from sqlalchemy import select as sa_select

from service.analytics.access import Access
from service.analytics.dims import Dimension, Granularity, LedgerFilter
from service.analytics.errors import HoursPruned, InvalidWindow, WindowNotAligned, WindowTooLarge
from service.dbtypes import table_of
from service.ledger import retention
from service.ledger.rollups import GROUP_KEYS, MAXED, SUMMED
from service.models import LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHour
from service.money import Money
from service.timeutil import EPOCH, HOUR_S, floor_hour, hour_index, hour_start, is_hour_aligned, month_start

HOURS_PER_DAY = 24
#: day_index 0 (1970-01-01) was a Thursday: ISO week = (day_index + 3) // 7, starting on Monday.
WEEK_OFFSET_DAYS = 3

HOUR_TABLE: Table = table_of(LedgerHour)
DAY_TABLE: Table = table_of(LedgerDay)
_HOUR_ONLY = {"id", "hour_start", "hour_index", "power_avg_w", "mem_used_avg_b"}
#: Columns both tables carry (dimensions, measures, day_index, month_index), in table order.
SHARED_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in HOUR_TABLE.columns if c.name not in _HOUR_ONLY and c.name in DAY_TABLE.c
)
GROUP_HOUR_TABLE: Table = table_of(LedgerGroupHour)
GROUP_DAY_TABLE: Table = table_of(LedgerGroupDay)
#: Dimensions the group rollups are keyed by: every one but the device-level ones.
ROLLUP_DIMENSIONS: frozenset[Dimension] = frozenset(d for d in Dimension if d.column in GROUP_KEYS)
#: Columns of the group source (``workload_key`` is '' for unallocated time, '*' otherwise).
GROUP_SOURCE_COLUMNS: tuple[str, ...] = (
    *GROUP_KEYS,
    *SUMMED,
    *MAXED,
    "energy_estimated",
    "workload_key",
    "day_index",
    "month_index",
    "hour_index",
)
GROUP_SOURCE = "grp"
ALLOCATED_KEY = "*"


@dataclass(frozen=True)
class Window:
    """A half-open UTC interval [start, end) of whole hours."""

    start: dt.datetime
    end: dt.datetime

    @property
    def start_hour(self) -> int:
        return hour_index(self.start)

    @property
    def end_hour(self) -> int:
        return hour_index(self.end)

    @property
    def whole_days(self) -> tuple[int, int] | None:
        """[first, last) day_index of the UTC days entirely inside the window, or None."""
        first = -(-self.start_hour // HOURS_PER_DAY)
        last = self.end_hour // HOURS_PER_DAY
        return (first, last) if first < last else None


def check_window(start: dt.datetime, end: dt.datetime, *, max_days: int) -> Window:
    """A validated window: timezone-aware, end after start, at most ``max_days``, whole hours.

    Unaligned bounds are refused (``WINDOW_NOT_ALIGNED``) rather than silently widened: the
    ledger's unit is the hour, and an answer for a window the caller did not ask for misleads.
    """
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise InvalidWindow(f"window {name} {value.isoformat()} has no timezone; give UTC (…Z)")
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    if end <= start:
        raise InvalidWindow(f"window end {end.isoformat()} must be after start {start.isoformat()}")
    if end - start > dt.timedelta(days=max_days):
        raise WindowTooLarge(
            f"window of {(end - start).days} days is larger than the maximum of {max_days} days"
        )
    for name, value in (("start", start), ("end", end)):
        if not is_hour_aligned(value):
            floor = floor_hour(value)
            raise WindowNotAligned(
                f"window {name} {value.isoformat()} is not a whole UTC hour; "
                f"use {floor.isoformat()} or {(floor + dt.timedelta(hours=1)).isoformat()}"
            )
    return Window(start, end)


# --- filters and the source -------------------------------------------------------------------------


def filter_conditions(table: Any, flt: LedgerFilter) -> list[ColumnElement[bool]]:
    """WHERE terms for ``flt`` on a table or subquery with the ledger's column names (or a group
    rollup, which says unallocated by its own column)."""
    terms: list[ColumnElement[bool]] = []
    for dim, values in flt.values.items():
        if values:
            terms.append(table.c[dim.column].in_(list(values)))
    grouped = "unallocated" in table.c
    if flt.unallocated is True:
        terms.append(table.c.unallocated.is_(True) if grouped else table.c.workload_key == "")
    elif flt.unallocated is False:
        terms.append(table.c.unallocated.is_(False) if grouped else table.c.workload_key != "")
    return terms


def access_conditions(table: Any, access: Access) -> list[ColumnElement[bool]]:
    """WHERE terms keeping the rows ``access`` may read: project IN … OR team IN … (none if everything).

    Rows nobody held (project and team NULL) match neither list, so a scoped caller never sees the
    unallocated pool's own rows.
    """
    if access.everything:
        return []
    terms: list[ColumnElement[bool]] = []
    if access.projects:
        terms.append(table.c.project.in_(sorted(access.projects)))
    if access.teams:
        terms.append(table.c.team.in_(sorted(access.teams)))
    return [or_(*terms)] if terms else [false()]


#: Where ``gpu-ledger prune`` dropped the earliest hours: how to learn the first hour ``ledger_hour``
#: holds, for the reads being served (:func:`hours_kept_from`); None: not checked.
_HOURS_KEPT_FROM: ContextVar[Callable[[], int | None] | None] = ContextVar("hours_kept_from", default=None)


@contextmanager
def hours_kept_from(first_hour: Callable[[], int | None]) -> Iterator[None]:
    """Within it, a read of device-level hours before ``first_hour()`` (None: nothing pruned)
    raises ``HOURS_PRUNED`` instead of answering from the hours that are left: the API serves each
    request in one (``ApiContext.read``). ``first_hour`` is called once, at the first device-level
    read, so answers from the rollups alone pay nothing. A context variable, not a query field,
    because the boundary is the database's, read on the request's connection, and every
    ``ledger_hour`` read of any query must see it."""
    token = _HOURS_KEPT_FROM.set(functools.cache(first_hour))
    try:
        yield
    finally:
        _HOURS_KEPT_FROM.reset(token)


@contextmanager
def pruned_hours_refused(conn: Connection) -> Iterator[None]:
    """:func:`hours_kept_from` at this database's prune boundary, looked up on ``conn`` at the first
    device-level read: what every reader of answers (the API, ``gpu-ledger export``, reports)
    serves its reads in, so none of them sums only the hours a prune left."""
    with hours_kept_from(lambda: retention.first_kept_hour(conn)):
        yield


def first_kept_hour(conn: Connection) -> int | None:
    """The first hour ``ledger_hour`` holds after a prune (None: none ran): the lookup of the reads
    being served where there is one (:func:`hours_kept_from`: asked once a request), else asked of
    ``conn``."""
    first_hour = _HOURS_KEPT_FROM.get()
    return first_hour() if first_hour is not None else retention.first_kept_hour(conn)


def check_hours_kept(lo: int) -> None:
    """Raise ``HOURS_PRUNED`` when hour ``lo`` is before the first hour ``ledger_hour`` holds."""
    first_hour = _HOURS_KEPT_FROM.get()
    kept = first_hour() if first_hour is not None else None
    if kept is not None and lo < kept:
        raise HoursPruned(
            f"this answer reads device-level hours from {hour_start(lo):%Y-%m-%dT%H:%MZ}, but the ledger's "
            f"hours before {hour_start(kept):%Y-%m-%d} were pruned (gpu-ledger prune): ask for whole UTC "
            "days, or group and filter only by dimensions the rollups keep (not DEVICE, NODE or WORKLOAD), "
            "or start the window at the boundary"
        )


def _hour_select(flt: LedgerFilter, access: Access, lo: int, hi: int) -> Select[Any]:
    check_hours_kept(lo)
    t = HOUR_TABLE
    cols = [t.c[name] for name in SHARED_COLUMNS] + [t.c.hour_index]
    terms = [*filter_conditions(t, flt), *access_conditions(t, access)]
    # hour_start too: the partition key of ledger_hour on PostgreSQL, so only the window's months
    # are read
    span = [t.c.hour_start >= hour_start(lo), t.c.hour_start < hour_start(hi)]
    return sa_select(*cols).where(t.c.hour_index >= lo, t.c.hour_index < hi, *span, *terms)


def _day_select(flt: LedgerFilter, access: Access, lo: int, hi: int) -> Select[Any]:
    t = DAY_TABLE
    cols = [t.c[name] for name in SHARED_COLUMNS] + [cast(literal(None), Integer).label("hour_index")]
    terms = [*filter_conditions(t, flt), *access_conditions(t, access)]
    return sa_select(*cols).where(t.c.day_index >= lo, t.c.day_index < hi, *terms)


def _group_columns(t: Table) -> list[ColumnElement[Any]]:
    cols: list[ColumnElement[Any]] = []
    for name in GROUP_SOURCE_COLUMNS:
        if name == "workload_key":
            cols.append(case((t.c.unallocated, literal("")), else_=literal(ALLOCATED_KEY)).label(name))
        elif name in t.c:
            cols.append(t.c[name])
        else:  # hour_index of a day row
            cols.append(cast(literal(None), Integer).label(name))
    return cols


def _group_select(t: Table, flt: LedgerFilter, access: Access, column: str, lo: int, hi: int) -> Select[Any]:
    terms = [*filter_conditions(t, flt), *access_conditions(t, access)]
    return sa_select(*_group_columns(t)).where(t.c[column] >= lo, t.c[column] < hi, *terms)


def group_rollups_serve(group_by: Sequence[Dimension], flt: LedgerFilter, access: Access) -> bool:
    """Whether the group rollups hold every dimension the answer groups, filters or is scoped by."""
    scope = set() if access.everything else {Dimension.PROJECT, Dimension.TEAM}
    used = {*group_by, *(d for d, values in flt.values.items() if values), *scope}
    return used <= ROLLUP_DIMENSIONS


def _group_source(window: Window, granularity: Granularity, flt: LedgerFilter, access: Access) -> Subquery:
    days = window.whole_days if granularity is not Granularity.HOUR else None

    def hourly(lo: int, hi: int) -> Select[Any]:
        return _group_select(GROUP_HOUR_TABLE, flt, access, "hour_index", lo, hi)

    if days is None:
        return hourly(window.start_hour, window.end_hour).subquery(GROUP_SOURCE)
    first, last = days
    parts = [_group_select(GROUP_DAY_TABLE, flt, access, "day_index", first, last)]
    if window.start_hour < first * HOURS_PER_DAY:
        parts.append(hourly(window.start_hour, first * HOURS_PER_DAY))
    if last * HOURS_PER_DAY < window.end_hour:
        parts.append(hourly(last * HOURS_PER_DAY, window.end_hour))
    return union_all(*parts).subquery(GROUP_SOURCE)


def is_group_source(src: Any) -> bool:
    return getattr(src, "name", None) == GROUP_SOURCE


def ledger_source(
    window: Window,
    granularity: Granularity,
    flt: LedgerFilter,
    access: Access,
    *,
    rollup: bool = True,
    group_by: Sequence[Dimension] | None = None,
) -> Subquery:
    """The ledger rows of ``window`` matching ``flt`` that ``access`` may read, from the cheapest
    rollup that can serve (see the module docstring). ``access`` has no default: every reader of
    the ledger states whose rows. ``group_by``: the dimensions the caller groups by, given only by
    callers that read nothing but :data:`GROUP_SOURCE_COLUMNS` (None: a device-level source)."""
    if rollup and group_by is not None and group_rollups_serve(group_by, flt, access):
        return _group_source(window, granularity, flt, access)
    days = window.whole_days if rollup and granularity is not Granularity.HOUR else None
    if days is None:
        return _hour_select(flt, access, window.start_hour, window.end_hour).subquery("src")
    first, last = days
    parts: list[Select[Any]] = [_day_select(flt, access, first, last)]
    if window.start_hour < first * HOURS_PER_DAY:
        parts.append(_hour_select(flt, access, window.start_hour, first * HOURS_PER_DAY))
    if last * HOURS_PER_DAY < window.end_hour:
        parts.append(_hour_select(flt, access, last * HOURS_PER_DAY, window.end_hour))
    return union_all(*parts).subquery("src")


# --- periods ------------------------------------------------------------------------------------------


def period_key(src: Any, granularity: Granularity) -> ColumnElement[int] | None:
    """An integer bucket per row (integer division only: portable), None for TOTAL."""
    if granularity is Granularity.HOUR:
        return src.c.hour_index
    if granularity is Granularity.DAY:
        return src.c.day_index
    if granularity is Granularity.WEEK:
        return (src.c.day_index + WEEK_OFFSET_DAYS) // 7
    if granularity is Granularity.MONTH:
        return src.c.month_index
    return None


def period_start(granularity: Granularity, key: int | None) -> dt.datetime | None:
    """The UTC instant a bucket starts (a period may begin before the window it was clipped to)."""
    if key is None or granularity is Granularity.TOTAL:
        return None
    key = int(key)
    if granularity is Granularity.HOUR:
        return hour_start(key)
    if granularity is Granularity.DAY:
        return EPOCH + dt.timedelta(days=key)
    if granularity is Granularity.WEEK:
        return EPOCH + dt.timedelta(days=key * 7 - WEEK_OFFSET_DAYS)
    return month_start(key)


# --- aggregate helpers --------------------------------------------------------------------------------


def fsum(expr: ColumnElement[Any]) -> ColumnElement[float]:
    """SUM of a float expression, 0.0 over no rows."""
    return func.coalesce(func.sum(cast(expr, Float)), 0.0)


def hours(expr: ColumnElement[Any], src: Any) -> ColumnElement[float]:
    """Σ seconds × gpu_fraction / 3600: GPU-hours weighted by MIG fraction."""
    return fsum(expr * src.c.gpu_fraction) / float(HOUR_S)


def money_sum(expr: ColumnElement[Any]) -> ColumnElement[Any]:
    """SUM of a money column, exact (integer nanos on SQLite, NUMERIC on PostgreSQL); 0 over none."""
    return type_coerce(func.coalesce(func.sum(expr), 0), Money)


def money_share_sum(cost: Any, part_s: Any, whole_s: Any, dialect: str) -> ColumnElement[Any]:
    """Σ cost × part_s / whole_s, rounded half-even to 1e-9 once, after summing.

    PostgreSQL computes in NUMERIC (exact but for the division); SQLite in binary floating point over
    integer nanos (relative error ~1e-16, far below the nano quantum for realistic amounts). A ratio
    per ledger row: over a group rollup (rows summed over devices) it would be another number, so
    a group source is refused.
    """
    for expr in (cost, part_s, whole_s):
        if any(is_group_source(f) for f in getattr(expr, "_from_objects", ())):
            raise TypeError("money_share_sum is a per-row ratio: it needs a device-level ledger source")
    if dialect == "postgresql":
        share = cost * cast(part_s, Numeric) / func.nullif(cast(whole_s, Numeric), 0)
    else:
        share = cost * cast(part_s, Float) / func.nullif(cast(whole_s, Float), 0.0)
    return type_coerce(func.coalesce(func.sum(share), 0), Money)


def one_of(lo: str | None, hi: str | None) -> str | None:
    """From MIN and MAX of a text column: its single value, "mixed", or None (no values)."""
    if lo is None:
        return None
    return lo if lo == hi else "mixed"
