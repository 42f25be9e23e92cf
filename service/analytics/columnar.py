"""The analytic answers as polars frames: one column per field, the rows of the row functions.

Each frame runs the SELECT its row function runs, built by the same measure functions
(:func:`~service.analytics.usage.answer_measures`, :func:`~service.analytics.idle.idle_measures`,
:func:`~service.analytics.effective.effective_measures`, :func:`~service.analytics.cost.part_measures`),
reads it with :func:`~service.analytics.frames.read_frame` and derives the computed fields as
column expressions that mirror the row classes' properties. Same rows, same order, same values:
floats are the same doubles (unrounded: the API rounds them for display), money is exact
``Decimal(38, 9)``, metric names are the domain's (``sm_active``), period starts UTC instants.

These answers keep a Python step, because it *is* their definition:

* ``cost`` under a SHARE policy or with currency conversion: pools are shared and amounts
  converted by :func:`~service.analytics.cost.cost` (largest-remainder allocation in ``Decimal``);
  its rows become the frame. Under SEPARATE without conversion the frame is read column-wise.
* ``idle_waste`` and ``effective_cost`` with currency conversion: their rows, converted per day
  and folded in Python (:func:`~service.analytics.fx.convert_day_buckets`), become the frame.
* ``effective_cost``'s per-hour prices: ``Decimal`` division rounded half-even, per group (the
  answer is never bucketed by period, so it has one row per group and currency).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from service.analytics import device_hours, frames
from service.analytics.cost import CostRow, cost, part_measures
from service.analytics.dims import IdlePolicy
from service.analytics.effective import effective_cost, effective_measures, per_gpu_hour
from service.analytics.fx import NO_CURRENCY
from service.analytics.idle import _idle_plan, idle_measures, idle_waste, streak_select
from service.analytics.paging import WHOLE, Page
from service.analytics.query import PERIOD, LedgerQuery, grouped_select
from service.analytics.usage import answer_measures, metric_columns
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT

STREAK = "longest_idle_streak_hours"


def pct_column(part: str, whole: str) -> pl.Expr:
    """``usage.pct`` of two columns, row by row: the same operations in the same order, so the
    same doubles (null where ``whole`` is not positive)."""
    return pl.when(pl.col(whole) > 0).then(pl.col(part) / pl.col(whole) * 100.0)


def currency_column(name: str = "currency") -> pl.Expr:
    """``cur or NO_CURRENCY``: unpriced time is XXX."""
    col = pl.col(name)
    return pl.when(col.is_null() | (col == "")).then(pl.lit(NO_CURRENCY)).otherwise(col).alias(name)


def usage_frame(
    conn: Any, q: LedgerQuery, metric: str | None = None, *, page: Page = WHOLE, order_key: bool = False
) -> pl.DataFrame:
    """:func:`~service.analytics.usage.usage` as columns: ``period_start``, the grouped dimensions
    (lower-case names), ``gpu_hours``, ``observed_gpu_hours``, ``effective_gpu_hours``,
    ``utilization_pct``, ``idle_gpu_hours``, ``energy_kwh``, ``coverage_pct``, ``metric``; with
    ``order_key``, also ``period_key`` (unless TOTAL): with the dimensions, each row's order key."""
    raw = device_hours.usage_frame(conn, q, metric_columns(metric), page)
    if raw is None:
        src = q.source()
        # page: its cursor too (GraphQL pages read this frame; an export has none)
        raw = frames.read_frame(conn, grouped_select(src, q, answer_measures(src, metric), page=page), page)
    return raw.select(
        *frames.key_columns(q),
        "gpu_hours",
        "observed_gpu_hours",
        "effective_gpu_hours",
        pct_column("effective_gpu_hours", "observed_gpu_hours").alias("utilization_pct"),
        "idle_gpu_hours",
        "energy_kwh",
        pct_column("observed_gpu_hours", "gpu_hours").alias("coverage_pct"),
        frames.metric_label(metric, "min_default_metric", "max_default_metric").alias("metric"),
        *([PERIOD] if order_key and PERIOD in raw.columns else []),
    )


def idle_frame(
    conn: Any,
    q: LedgerQuery,
    metric: str | None = None,
    threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    *,
    ledger_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    page: Page = WHOLE,
    streak: bool = True,
    currency: str | None = None,
) -> pl.DataFrame:
    """:func:`~service.analytics.idle.idle_waste` as columns: ``period_start``, the grouped
    dimensions, ``currency``, ``idle_gpu_hours``, ``idle_cost``, ``allocated_idle_gpu_hours``,
    ``allocated_idle_cost``, ``unallocated_idle_gpu_hours``, ``unallocated_idle_cost``,
    ``longest_idle_streak_hours`` (null unless ``streak``), ``metric``. With ``currency`` the
    answer's rows (converted in Python by ``idle_waste``) become the frame."""
    if currency is not None:
        rows = idle_waste(
            conn, q, metric, threshold_pct, ledger_threshold_pct=ledger_threshold_pct, page=page,
            streak=streak, currency=currency,
        )  # fmt: skip
        return rows_frame(rows, q, IDLE_ROW_COLUMNS)
    buckets = _idle_plan(metric, threshold_pct, ledger_threshold_pct)
    src, measures = idle_measures(q, metric, buckets, conn.dialect.name)
    raw = frames.read_frame(conn, grouped_select(src, q, measures, [src.c.currency.label("currency")]), page)
    if streak:
        raw = _with_streaks(raw, frames.read_frame(conn, streak_select(q, metric, buckets)), q)
    else:
        raw = raw.with_columns(pl.lit(None, dtype=pl.Int64).alias(STREAK))
    return raw.select(
        *frames.key_columns(q),
        currency_column(),
        (pl.col("alloc_h") + pl.col("free_h")).alias("idle_gpu_hours"),
        (pl.col("alloc_cost") + pl.col("free_cost")).alias("idle_cost"),
        pl.col("alloc_h").alias("allocated_idle_gpu_hours"),
        pl.col("alloc_cost").alias("allocated_idle_cost"),
        pl.col("free_h").alias("unallocated_idle_gpu_hours"),
        pl.col("free_cost").alias("unallocated_idle_cost"),
        STREAK,
        frames.metric_label(metric, "dm_min", "dm_max").alias("metric"),
    )


def _with_streaks(raw: pl.DataFrame, runs: pl.DataFrame, q: LedgerQuery) -> pl.DataFrame:
    """``raw`` with each group's longest run (0 where the group has none), as ``_streaks`` looks
    them up by GroupKey: NULL keys match NULL keys."""
    runs = runs.rename({"longest": STREAK})
    keys = [PERIOD] if PERIOD in runs.columns else []
    keys += [d.name.lower() for d in q.group_by]
    if keys:
        joined = raw.join(runs, on=keys, how="left", nulls_equal=True, maintain_order="left")
    else:  # one group: the whole answer
        longest = runs[STREAK][0] if runs.height else None
        joined = raw.with_columns(pl.lit(longest, dtype=pl.Int64).alias(STREAK))
    return joined.with_columns(pl.col(STREAK).cast(pl.Int64).fill_null(0))


def effective_frame(
    conn: Any, q: LedgerQuery, metric: str | None = None, *, page: Page = WHOLE, currency: str | None = None
) -> pl.DataFrame:
    """:func:`~service.analytics.effective.effective_cost` as columns: ``period_start`` (null), the
    grouped dimensions, ``currency``, ``gpu_hours``, ``effective_gpu_hours``, ``cost``,
    ``cost_per_gpu_hour``, ``cost_per_effective_gpu_hour``, ``metric``. With ``currency`` the
    answer's rows (converted in Python by ``effective_cost``) become the frame."""
    if currency is not None:
        return rows_frame(
            effective_cost(conn, q, metric, page=page, currency=currency), q, EFFECTIVE_ROW_COLUMNS
        )
    src, measures, currency_key = effective_measures(q, metric)
    raw = frames.read_frame(conn, grouped_select(src, q, measures, [currency_key]), page)
    raw = raw.with_columns(currency_column())
    costs, cur = raw["cost"].to_list(), raw["currency"].to_list()

    def per(hours: str) -> pl.Series:
        values = [per_gpu_hour(c, h, x) for c, h, x in zip(costs, raw[hours].to_list(), cur, strict=True)]
        return pl.Series(values, dtype=frames.MONEY)

    return raw.with_columns(
        per("gpu_hours").alias("cost_per_gpu_hour"),
        per("effective_gpu_hours").alias("cost_per_effective_gpu_hour"),
    ).select(
        *frames.key_columns(q),
        "currency",
        "gpu_hours",
        "effective_gpu_hours",
        "cost",
        "cost_per_gpu_hour",
        "cost_per_effective_gpu_hour",
        frames.metric_label(metric, "min_default_metric", "max_default_metric").alias("metric"),
    )


COST_COLUMNS = (
    "currency",
    "cost",
    "idle_cost",
    "shared_idle_cost",
    "gpu_hours",
    "unpriced_gpu_hours",
    "rate_source",
    "unallocated",
)


def cost_frame(
    conn: Any,
    q: LedgerQuery,
    policy: IdlePolicy = IdlePolicy.SEPARATE,
    currency: str | None = None,
    *,
    page: Page = WHOLE,
) -> pl.DataFrame:
    """:func:`~service.analytics.cost.cost` as columns: ``period_start``, the grouped dimensions,
    then :data:`COST_COLUMNS` (see the module docstring for which answers are read column-wise)."""
    if policy is not IdlePolicy.SEPARATE or currency is not None:
        return _cost_rows_frame(cost(conn, q, policy, currency, page=page), q)
    src, extra, measures = part_measures(q, by_day=False)
    stmt = grouped_select(src, q, measures, extra, free=src.c.workload_key == "")
    raw = frames.read_frame(conn, stmt, page)
    return raw.select(
        *frames.key_columns(q),
        currency_column(),
        "cost",
        "idle_cost",
        pl.lit(0, dtype=frames.MONEY).alias("shared_idle_cost"),
        "gpu_hours",
        "unpriced_gpu_hours",
        frames.one_of("rs_min", "rs_max").alias("rate_source"),
        pl.col("unallocated").cast(pl.Boolean),
    )


def _cost_rows_frame(rows: Sequence[CostRow], q: LedgerQuery) -> pl.DataFrame:
    def column(name: str, dtype: Any) -> pl.Series:
        return pl.Series(name, [getattr(r, name) for r in rows], dtype=dtype)

    dims = [pl.Series(d.name.lower(), [r.key.value(d) for r in rows], dtype=pl.String) for d in q.group_by]
    return pl.DataFrame(
        [
            pl.Series(frames.PERIOD_START, [r.key.period_start for r in rows], dtype=frames.INSTANT),
            *dims,
            column("currency", pl.String),
            column("cost", frames.MONEY),
            column("idle_cost", frames.MONEY),
            column("shared_idle_cost", frames.MONEY),
            column("gpu_hours", pl.Float64),
            column("unpriced_gpu_hours", pl.Float64),
            column("rate_source", pl.String),
            column("unallocated", pl.Boolean),
        ]
    )


#: (column, polars type, attribute) of a converted idle-waste row (:func:`rows_frame`).
IDLE_ROW_COLUMNS = (
    ("currency", pl.String, "currency"),
    ("idle_gpu_hours", pl.Float64, "idle_gpu_hours"),
    ("idle_cost", frames.MONEY, "idle_cost"),
    ("allocated_idle_gpu_hours", pl.Float64, "allocated_idle_gpu_hours"),
    ("allocated_idle_cost", frames.MONEY, "allocated_idle_cost"),
    ("unallocated_idle_gpu_hours", pl.Float64, "unallocated_idle_gpu_hours"),
    ("unallocated_idle_cost", frames.MONEY, "unallocated_idle_cost"),
    (STREAK, pl.Int64, "longest_idle_streak_hours"),
    ("metric", pl.String, "metric"),
)
#: The same for a converted effective-cost row.
EFFECTIVE_ROW_COLUMNS = (
    ("currency", pl.String, "currency"),
    ("gpu_hours", pl.Float64, "gpu_hours"),
    ("effective_gpu_hours", pl.Float64, "effective_gpu_hours"),
    ("cost", frames.MONEY, "cost"),
    ("cost_per_gpu_hour", frames.MONEY, "cost_per_gpu_hour"),
    ("cost_per_effective_gpu_hour", frames.MONEY, "cost_per_effective_gpu_hour"),
    ("metric", pl.String, "metric"),
)


def rows_frame(rows: Sequence[Any], q: LedgerQuery, columns: Sequence[tuple[str, Any, str]]) -> pl.DataFrame:
    """Answer rows computed in Python (converted answers) as a frame: ``period_start``, the grouped
    dimensions, then ``columns`` read from each row's attributes."""
    dims = [pl.Series(d.name.lower(), [r.key.value(d) for r in rows], dtype=pl.String) for d in q.group_by]
    return pl.DataFrame(
        [
            pl.Series(frames.PERIOD_START, [r.key.period_start for r in rows], dtype=frames.INSTANT),
            *dims,
            *(
                pl.Series(name, [getattr(r, attr) for r in rows], dtype=dtype)
                for name, dtype, attr in columns
            ),
        ]
    )
