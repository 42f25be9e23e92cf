"""``forecast``: GPU-hours, effective GPU-hours and cost per group for the days after a history.

History: the daily totals of the window (whole UTC days), per group of ``q.group_by``, read by
the same aggregates as ``usage`` and ``cost`` at DAY granularity (from the group rollups where
they serve: their size is groups × days, whatever the fleet's). Days without rows are 0. Each
series is forecast on its own by :func:`service.analytics.forecast_model.forecast_series`
(docs/forecast.md).

Money: with ``currency`` the history is converted per day by the FX table exactly as ``cost``
converts (errors MISSING_FX_RATE / UNKNOWN_CURRENCY), then fitted as one series; without it,
each currency a group was charged in is its own series (an EUR site and a USD cloud are never
added without a rate). Unpriced time (XXX) has no cost series. GPU-hours are never split by
currency.

Bounds: at most :data:`MAX_GROUPS` groups (more: TOO_MANY_GROUPS, found from the capped SQL
answer before any fit), :data:`MAX_HORIZON_DAYS` days ahead, :data:`MAX_LEVELS` interval levels;
fitting stops with QUERY_TIMEOUT once ``deadline`` (``time.monotonic()``) has passed.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

import numpy as np
from sqlalchemy import Connection

from service.analytics import cost as cost_q
from service.analytics import usage as usage_q
from service.analytics.dims import Dimension, Granularity, IdlePolicy
from service.analytics.errors import InvalidArgument, QueryError, WindowNotAligned
from service.analytics.forecast_model import MIN_DAYS, HistoryTooShort, SeriesForecast, forecast_series
from service.analytics.fx import NO_CURRENCY
from service.analytics.paging import Page, ResultTooLarge
from service.analytics.query import GroupKey, LedgerQuery
from service.analytics.window import HOURS_PER_DAY
from service.timeutil import EPOCH

MAX_HORIZON_DAYS = 92
MAX_GROUPS = 25
MAX_LEVELS = 4
#: Currencies of one group's history (a bound on the SQL answer read, not a rule of pricing).
MAX_CURRENCIES = 8
DEFAULT_LEVELS: tuple[float, ...] = (80.0, 95.0)
ZERO = Decimal("0E-9")

Dims = tuple[tuple[Dimension, str | None], ...]


class TooManyGroups(QueryError):
    code = "TOO_MANY_GROUPS"


@dataclass(frozen=True)
class History:
    """Daily totals of the window, one row per group (index ``g``), one column per day."""

    first_day: int  # day_index of column 0
    groups: list[Dims]
    gpu_hours: np.ndarray  # (groups, days) float
    effective_gpu_hours: np.ndarray  # (groups, days) float
    cost: dict[tuple[int, str], list[Decimal]]  # (group, currency) → amount per day, exact

    @property
    def days(self) -> int:
        return int(self.gpu_hours.shape[1])


@dataclass(frozen=True)
class GroupForecast:
    """One group's forecasts; ``cost`` per currency (sorted), one entry when converted."""

    dims: Dims
    gpu_hours: SeriesForecast
    effective_gpu_hours: SeriesForecast
    cost: tuple[tuple[str, SeriesForecast], ...]

    @property
    def key(self) -> GroupKey:
        return GroupKey(None, self.dims)


@dataclass(frozen=True)
class Forecast:
    """``groups`` forecast for the ``horizon_days`` days from ``first_day`` (UTC midnight) on."""

    first_day: dt.datetime
    horizon_days: int
    history_days: int
    levels: tuple[float, ...]
    groups: list[GroupForecast]

    def day(self, h: int) -> dt.datetime:
        return self.first_day + dt.timedelta(days=h)


def check_arguments(q: LedgerQuery, horizon_days: int, levels: Sequence[float]) -> tuple[float, ...]:
    """Refuse what cannot be forecast before any SQL: the window's edges must be UTC midnights."""
    if not 1 <= horizon_days <= MAX_HORIZON_DAYS:
        raise InvalidArgument(f"horizonDays must be between 1 and {MAX_HORIZON_DAYS}, not {horizon_days}")
    if not 1 <= len(levels) <= MAX_LEVELS:
        raise InvalidArgument(f"give 1 to {MAX_LEVELS} interval levels, not {len(levels)}")
    for level in levels:
        if not (math.isfinite(level) and 0 < level < 100):
            raise InvalidArgument(f"interval level {level} must be a percentage strictly between 0 and 100")
    for name, hour in (("start", q.window.start_hour), ("end", q.window.end_hour)):
        if hour % HOURS_PER_DAY:
            raise WindowNotAligned(
                f"forecast history {name} must be a UTC midnight (daily totals are fitted), not "
                f"{getattr(q.window, name).isoformat()}"
            )
    days = (q.window.end_hour - q.window.start_hour) // HOURS_PER_DAY
    if days < MIN_DAYS:
        raise HistoryTooShort(f"{days} days of history: a forecast needs at least {MIN_DAYS} whole UTC days")
    return tuple(sorted(set(levels)))


def _day_query(q: LedgerQuery) -> LedgerQuery:
    return replace(q, granularity=Granularity.DAY)


def history(
    conn: Connection, q: LedgerQuery, metric: str | None = None, currency: str | None = None
) -> History:
    """The daily series of ``q``'s window per group (see the module docstring)."""
    dq = _day_query(q)
    first_day = q.window.start_hour // HOURS_PER_DAY
    n = (q.window.end_hour - q.window.start_hour) // HOURS_PER_DAY
    # At most MAX_GROUPS groups × n days rows; one more means too many groups (refused below).
    page = Page(field="forecast", max_rows=MAX_GROUPS * n)
    try:
        usage_rows = usage_q.usage(conn, dq, metric, page=page)
    except ResultTooLarge:
        raise _too_many() from None
    index: dict[Dims, int] = {}
    cells: list[tuple[int, int, float, float]] = []
    for r in usage_rows:
        g = index.setdefault(r.key.dims, len(index))
        cells.append((g, _day(r.key) - first_day, r.gpu_hours, r.effective_gpu_hours))
    if len(index) > MAX_GROUPS:
        raise _too_many()
    # Rows per (day, group, currency, allocated or not): a cap far above what MAX_GROUPS allows.
    cost_page = Page(field="forecast", max_rows=MAX_GROUPS * n * 2 * MAX_CURRENCIES)
    try:
        cost_rows = cost_q.cost(conn, dq, IdlePolicy.SEPARATE, currency, page=cost_page)
    except ResultTooLarge:
        raise _too_many() from None
    costs: dict[tuple[int, str], list[Decimal]] = {}
    for c in cost_rows:
        if c.currency == NO_CURRENCY:
            continue
        # The pool's own rows (unallocated) fold into their group: a forecast has no idle policy.
        g = index.setdefault(c.key.dims, len(index))
        series = costs.setdefault((g, c.currency), [ZERO] * n)
        series[_day(c.key) - first_day] += c.cost
    if len(index) > MAX_GROUPS:
        raise _too_many()
    gpu = np.zeros((len(index), n))
    eff = np.zeros((len(index), n))
    for g, d, hours, busy in cells:
        gpu[g, d] += hours
        eff[g, d] += busy
    return History(first_day, list(index), gpu, eff, costs)


def _day(key: GroupKey) -> int:
    assert key.period_start is not None
    return (key.period_start - EPOCH).days


def _too_many() -> TooManyGroups:
    return TooManyGroups(
        f"more than {MAX_GROUPS} groups to forecast: each is fitted on its own, so narrow the filter "
        "or group by fewer dimensions"
    )


def forecast(
    conn: Connection,
    q: LedgerQuery,
    horizon_days: int,
    levels: Sequence[float] = DEFAULT_LEVELS,
    *,
    metric: str | None = None,
    currency: str | None = None,
    deadline: float | None = None,
) -> Forecast:
    """Forecast every group of ``q`` (window = history, whole UTC days) ``horizon_days`` ahead."""
    checked = check_arguments(q, horizon_days, levels)
    hist = history(conn, q, metric, currency)

    def fit(y: Sequence[float] | np.ndarray) -> SeriesForecast:
        if deadline is not None and time.monotonic() > deadline:
            raise QueryError(
                "forecast stopped at the time limit: group by fewer dimensions or narrow the filter",
                code="QUERY_TIMEOUT",
            )
        return forecast_series(y, horizon_days, checked)

    groups: list[GroupForecast] = []
    for g, dims in enumerate(hist.groups):
        money = sorted((cur, s) for (gi, cur), s in hist.cost.items() if gi == g)
        groups.append(
            GroupForecast(
                dims,
                fit(hist.gpu_hours[g]),
                fit(hist.effective_gpu_hours[g]),
                tuple((cur, fit([float(a) for a in s])) for cur, s in money),
            )
        )
    groups.sort(key=lambda f: tuple((v is not None, v or "") for _, v in f.dims))
    first = EPOCH + dt.timedelta(days=hist.first_day + hist.days)
    return Forecast(first, horizon_days, hist.days, checked, groups)
