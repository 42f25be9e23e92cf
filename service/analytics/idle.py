"""Idle waste: idle GPU-hours and their cost, allocated vs unallocated, and the longest idle streak.

Idle seconds at ``threshold_pct``:

* default metric at the ledger's own threshold (``ledger_threshold_pct``, 5 % by default): the
  ``idle_s`` / ``idle_cost`` columns — additive, so the daily rollup can serve;
* default metric at another histogram edge (1, 5, 10, 25, 50, 75, 100): the sum of the histogram
  buckets below it; idle cost = Σ cost × idle_s_T ÷ present_s per ledger row, summed, rounded
  half-even to 1e-9 once. A ratio per row is not additive over a day, so this reads ``ledger_hour``;
* an explicit metric: ``idle_s_<metric>``, which the ledger keeps only at its own threshold; cost
  as above (hourly).

**Currency.** With ``currency`` the SQL groups also by UTC day and currency, and every day's
idle cost of a source currency — allocated and unallocated buckets together, one column — is
converted once and split back (:func:`service.analytics.fx.convert_day_buckets`, as ``cost``
converts): so a converted answer's idle cost adds up to ``cost``'s converted idle cost of the same
window and rows, whatever the grouping. Unpriced time (XXX, amount 0) joins the target's row. The
answer is then folded and paged in Python (a row's cursor is its position): each page costs the
whole answer's SQL, as ``cost`` with ``currency`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, case, func, select

from service.analytics.dims import metric_label
from service.analytics.errors import UnsupportedThreshold
from service.analytics.fx import NO_CURRENCY, FxTable, check_currency, convert_day_buckets
from service.analytics.paging import WHOLE, Page
from service.analytics.query import (
    GroupKey,
    LedgerQuery,
    collector_paused,
    column_count,
    fetch_columns,
    group_keys,
    grouped_select,
    key_columns,
)
from service.analytics.usage import floats, metric_columns, metric_labels
from service.analytics.window import hours, money_share_sum, money_sum
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT, HIST_COLUMNS, HIST_EDGES_PCT

#: An hour counts towards a streak when idle seconds reach observed seconds within this slack.
STREAK_SLACK_S = 1e-3
ZERO = Decimal("0E-9")


@dataclass(frozen=True)
class IdleRow:
    """One bucket of :func:`idle_waste` in ``currency`` (``XXX``: unpriced time, cost 0)."""

    key: GroupKey
    currency: str
    allocated_idle_gpu_hours: float
    unallocated_idle_gpu_hours: float
    allocated_idle_cost: Decimal
    unallocated_idle_cost: Decimal
    #: None when the caller did not ask for it (``idle_waste(..., streak=False)``).
    longest_idle_streak_hours: int | None
    metric: str

    @property
    def idle_gpu_hours(self) -> float:
        return self.allocated_idle_gpu_hours + self.unallocated_idle_gpu_hours

    @property
    def idle_cost(self) -> Decimal:
        return self.allocated_idle_cost + self.unallocated_idle_cost


def _idle_plan(metric: str | None, threshold_pct: float, ledger_threshold_pct: float) -> int | None:
    """Validate the threshold: None = use the ledger's idle column, n = sum the first n histogram buckets."""
    if threshold_pct == ledger_threshold_pct:
        return None
    if metric is not None:
        raise UnsupportedThreshold(
            f"idle time of an explicit metric ({metric}) is kept only at the ledger's threshold "
            f"{ledger_threshold_pct:g} %; other thresholds come from the histogram of each device's "
            "default metric: leave metric null"
        )
    edges = HIST_EDGES_PCT[1:]
    if threshold_pct not in edges:
        raise UnsupportedThreshold(
            f"thresholdPct {threshold_pct:g} is not a histogram bucket edge; use one of "
            + ", ".join(f"{e:g}" for e in edges)
        )
    return edges.index(threshold_pct) + 1


def _idle_seconds(src: Any, metric: str | None, buckets: int | None) -> ColumnElement[Any]:
    if buckets is None:
        return src.c[metric_columns(metric)[2]]
    expr: ColumnElement[Any] = src.c[HIST_COLUMNS[0]]
    for col in HIST_COLUMNS[1:buckets]:
        expr = expr + src.c[col]
    return expr


def _streaks(
    conn: Connection, q: LedgerQuery, metric: str | None, buckets: int | None
) -> dict[GroupKey, int]:
    """Longest run of consecutive hours a device of the group was idle all its observed time.

    Gaps and islands over ``ledger_hour``: for each (group, device) the idle hours minus their
    ROW_NUMBER are constant along a run; the longest run per group is MAX(COUNT(*)).
    """
    c = fetch_columns(conn, streak_select(q, metric, buckets))
    return {k: int(n or 0) for k, n in zip(group_keys(q, c), c["longest"], strict=True)}


def streak_select(q: LedgerQuery, metric: str | None, buckets: int | None) -> Select[Any]:
    """The query of :func:`_streaks`: the answer's key columns and ``longest`` (NULL: no idle hour)."""
    src = q.source(rollup=False)
    idle = _idle_seconds(src, metric, buckets)
    observed = src.c[metric_columns(metric)[0]]
    keys = key_columns(src, q)
    device_hours = (
        select(*keys, src.c.device_id.label("dev"), src.c.hour_index.label("h"))
        .group_by(*keys, src.c.device_id, src.c.hour_index)
        .having(func.sum(observed) > 0, func.sum(idle) >= func.sum(observed) - STREAK_SLACK_S)
        .subquery("idle_hours")
    )
    key_names = [k.name for k in keys]
    partition = [device_hours.c[n] for n in key_names] + [device_hours.c.dev]
    island = device_hours.c.h - func.row_number().over(partition_by=partition, order_by=device_hours.c.h)
    islands = select(*partition, island.label("island")).subquery("islands")
    runs = (
        select(*(islands.c[n] for n in key_names), func.count().label("run"))
        .select_from(islands)
        .group_by(*(islands.c[n] for n in key_names), islands.c.dev, islands.c.island)
        .subquery("runs")
    )
    run_keys = [runs.c[n] for n in key_names]
    stmt = select(*run_keys, func.max(runs.c.run).label("longest"))
    return stmt.group_by(*run_keys) if run_keys else stmt


def idle_measures(
    q: LedgerQuery, metric: str | None, buckets: int | None, dialect: str
) -> tuple[Any, list[Any]]:
    """The source and measures of an idle answer (:func:`idle_waste`, and the export's frame);
    ``buckets`` as :func:`_idle_plan` validated the threshold."""
    additive = buckets is None and metric is None  # idle_s / idle_cost columns: the rollup serves
    src = q.source() if additive else q.source(rollup=False)
    idle = _idle_seconds(src, metric, buckets)
    free = src.c.workload_key == ""
    if additive:
        alloc_cost = money_sum(case((free, None), else_=src.c.idle_cost))
        free_cost = money_sum(case((free, src.c.idle_cost), else_=None))
    else:
        alloc_cost = money_share_sum(case((free, None), else_=src.c.cost), idle, src.c.present_s, dialect)
        free_cost = money_share_sum(case((free, src.c.cost), else_=None), idle, src.c.present_s, dialect)
    measures = [
        hours(case((free, 0.0), else_=idle), src).label("alloc_h"),
        hours(case((free, idle), else_=0.0), src).label("free_h"),
        alloc_cost.label("alloc_cost"),
        free_cost.label("free_cost"),
        func.min(src.c.default_metric).label("dm_min"),
        func.max(src.c.default_metric).label("dm_max"),
    ]
    return src, measures


@collector_paused
def idle_waste(
    conn: Connection,
    q: LedgerQuery,
    metric: str | None = None,
    threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    *,
    ledger_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    page: Page = WHOLE,
    streak: bool = True,
    currency: str | None = None,
) -> list[IdleRow]:
    """Idle waste per (period, group, currency) of the rows ``q.access`` may read.

    A scoped caller's rows hold no unallocated time (nobody's project): the pool is account-wide.
    Paged in SQL (by position with ``currency``: see the module docstring). ``streak``: whether to
    compute the longest idle streak (a second query, window functions over ``ledger_hour``: most
    of the cost of this answer); False leaves it None. It runs over every group of the answer and
    only the page's groups are looked up in it. ``currency``: idle cost converted per UTC day
    (MISSING_FX_RATE, UNKNOWN_CURRENCY as ``cost``).
    """
    buckets = _idle_plan(metric, threshold_pct, ledger_threshold_pct)
    target = check_currency(conn, currency) if currency is not None else None
    if target is not None:
        rows = _converted(conn, q, metric, buckets, target, page)
    else:
        src, measures = idle_measures(q, metric, buckets, conn.dialect.name)
        stmt = grouped_select(src, q, measures, [src.c.currency.label("currency")], page=page)
        c = fetch_columns(conn, stmt, page)
        rows = list(
            map(
                IdleRow,
                group_keys(q, c, ["currency"]),
                [cur or NO_CURRENCY for cur in c["currency"]],
                floats(c["alloc_h"]),
                floats(c["free_h"]),
                c["alloc_cost"],
                c["free_cost"],
                [None] * column_count(c),
                metric_labels(metric, c["dm_min"], c["dm_max"]),
            )
        )
    if not streak:
        return rows
    longest = _streaks(conn, q, metric, buckets)
    return [replace(r, longest_idle_streak_hours=longest.get(r.key, 0)) for r in rows]


def count_groups(conn: Connection, src: Any, q: LedgerQuery) -> int:
    """The groups of ``q``'s answer (period × dimensions), counted in SQL."""
    keys = key_columns(src, q)
    if not keys:
        return 1
    groups = select(*keys).group_by(*keys).subquery("groups")
    return int(conn.execute(select(func.count()).select_from(groups)).scalar_one())


def _converted(
    conn: Connection, q: LedgerQuery, metric: str | None, buckets: int | None, target: str, page: Page
) -> list[IdleRow]:
    """The rows in ``target`` (see the module docstring), ``page`` of them by position."""
    src, measures = idle_measures(q, metric, buckets, conn.dialect.name)
    if page.first is None and page.max_rows is not None:
        page.refuse_above(count_groups(conn, src, q) - page.offset)
    extra = [src.c.currency.label("currency"), src.c.day_index.label("day")]
    c = fetch_columns(conn, grouped_select(src, q, measures, extra))
    keys = group_keys(q, c)
    n = len(keys)
    currencies = [cur or NO_CURRENCY for cur in c["currency"]]
    days = [int(d) for d in c["day"]]
    fx = FxTable(conn, target, set(currencies), days)
    # Allocated and unallocated idle cost are buckets of one column: one rounding per day.
    [costs] = convert_day_buckets(fx, [[*c["alloc_cost"], *c["free_cost"]]], currencies * 2, days * 2)
    folded: dict[GroupKey, list[Any]] = {}
    for i, key in enumerate(keys):  # SQL ordered by the keys: a group's rows are adjacent
        acc = folded.setdefault(key, [0.0, 0.0, ZERO, ZERO, set()])
        acc[0] += float(c["alloc_h"][i])
        acc[1] += float(c["free_h"][i])
        acc[2] += costs[i]
        acc[3] += costs[n + i]
        acc[4].update(m for m in (c["dm_min"][i], c["dm_max"][i]) if m is not None)
    offset = page.offset
    return [
        IdleRow(
            replace(key, order=(offset + i,)),
            target,
            alloc_h,
            free_h,
            alloc_cost,
            free_cost,
            None,
            metric_label(metric, min(seen, default=None), max(seen, default=None)),
        )
        for i, (key, (alloc_h, free_h, alloc_cost, free_cost, seen)) in enumerate(
            page.slice(list(folded.items()))
        )
    ]
