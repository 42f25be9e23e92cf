"""Demand vs capacity: per hour and pool, the GPUs workloads held against the GPUs installed.

A **pool** is a group of ``q.group_by`` over device dimensions (default environment × GPU model:
GPUs a job could be moved between). For each UTC hour and pool, from the ledger:

* ``installed_gpus`` = Σ present_s × gpu_fraction ÷ 3600 over all its rows: the GPUs the ledger
  saw present that hour (a GPU there for half the hour counts ½, a 1g MIG slice 1/7);
* ``allocated_gpus`` = the same over the rows a workload held (``workload_key`` ≠ '').

``allocated_gpus`` never exceeds ``installed_gpus`` (a GPU-second is held or not), so "allocated
≥ installed" is an hour with no free GPU-second in the pool: every GPU held all hour. That is
the queueing signal — more work would have waited — which a planner reads as "buy" (or rent).
With ``threshold_pct`` (``allocationPct`` in the API) below 100 an hour counts when allocated ≥
that % of installed. A tolerance of :data:`TOLERANCE_GPU_S` GPU-seconds absorbs the ledger's
microsecond rounding.

The hourly figures come from the group rollups (``ledger_group_hour``: pools × hours rows); a
period of the answer sums its hours, counts the saturated ones and keeps the peaks. Installed
capacity is account-wide: it includes every project's time, so it is refused to a project- or
team-scoped caller (FORBIDDEN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl
from sqlalchemy import Connection, Float, case, cast, func, select

from service.analytics.dims import Dimension, Granularity
from service.analytics.errors import InvalidArgument
from service.analytics.paging import WHOLE, Page
from service.analytics.query import (
    PERIOD,
    GroupKey,
    LedgerQuery,
    collector_paused,
    fetch_columns,
    group_keys,
    grouped_select,
)
from service.timeutil import HOUR_S

#: GPU-seconds by which allocated may fall short of the threshold and still count (rounding).
TOLERANCE_GPU_S = 0.5
DEFAULT_POOL: tuple[Dimension, ...] = (Dimension.ENVIRONMENT, Dimension.GPU_MODEL)


@dataclass(frozen=True)
class CapacityRow:
    """One (period, pool). GPU-hours sum the period's hours; peaks are the largest hourly values."""

    key: GroupKey
    hours: int  # hours of the period in which the pool had any GPU present
    installed_gpu_hours: float
    allocated_gpu_hours: float
    peak_installed_gpus: float
    peak_allocated_gpus: float
    saturated_hours: int  # hours with allocated ≥ threshold × installed

    @property
    def allocated_pct(self) -> float | None:
        if self.installed_gpu_hours <= 0:
            return None
        return self.allocated_gpu_hours / self.installed_gpu_hours * 100.0


def check_pool(group_by: Sequence[Dimension], threshold_pct: float) -> None:
    workload = [d.name for d in group_by if d.is_workload]
    if workload:
        raise InvalidArgument(
            f"a capacity pool is a set of GPUs: group by device dimensions, not {', '.join(workload)}"
        )
    if not (math.isfinite(threshold_pct) and 0 < threshold_pct <= 100):
        raise InvalidArgument(f"allocationPct must be in (0, 100], not {threshold_pct}")


@collector_paused
def demand_capacity(
    conn: Connection, q: LedgerQuery, threshold_pct: float = 100.0, *, page: Page = WHOLE
) -> list[CapacityRow]:
    """Per (period of ``q.granularity``, pool of ``q.group_by``); see the module docstring."""
    check_pool(q.group_by, threshold_pct)
    q.access.require_everything("installed capacity")
    hourly = replace(q, granularity=Granularity.HOUR)
    src = hourly.source()
    gpu_s = src.c.present_s * src.c.gpu_fraction
    held_s = case((src.c.workload_key == "", 0.0), else_=gpu_s)
    keys: list[Any] = [src.c.day_index.label("day_index"), src.c.month_index.label("month_index")]
    per_hour = grouped_select(
        src,
        hourly,
        [
            func.sum(cast(gpu_s, Float)).label("installed_s"),
            func.sum(cast(held_s, Float)).label("allocated_s"),
        ],
        keys,
    ).subquery("per_hour")
    # period_key reads hour_index/day_index/month_index: give the per-hour rows those names.
    hours_src = select(
        per_hour.c[PERIOD].label("hour_index"),
        *(per_hour.c[k] for k in ("day_index", "month_index")),
        *(per_hour.c[d.name.lower()].label(d.column) for d in q.group_by),
        per_hour.c.installed_s,
        per_hour.c.allocated_s,
    ).subquery("hours")
    share = threshold_pct / 100.0
    saturated = case(
        (hours_src.c.allocated_s >= share * hours_src.c.installed_s - TOLERANCE_GPU_S, 1), else_=0
    )
    measures: list[Any] = [
        func.count().label("hours"),
        (func.sum(hours_src.c.installed_s) / float(HOUR_S)).label("installed_gpu_hours"),
        (func.sum(hours_src.c.allocated_s) / float(HOUR_S)).label("allocated_gpu_hours"),
        (func.max(hours_src.c.installed_s) / float(HOUR_S)).label("peak_installed_gpus"),
        (func.max(hours_src.c.allocated_s) / float(HOUR_S)).label("peak_allocated_gpus"),
        func.sum(saturated).label("saturated_hours"),
    ]
    c = fetch_columns(conn, grouped_select(hours_src, q, measures, page=page), page)
    return list(
        map(
            CapacityRow,
            group_keys(q, c),
            map(int, c["hours"]),
            map(float, c["installed_gpu_hours"]),
            map(float, c["allocated_gpu_hours"]),
            map(float, c["peak_installed_gpus"]),
            map(float, c["peak_allocated_gpus"]),
            map(int, c["saturated_hours"]),
        )
    )


#: The export's measure columns (after ``period_start`` and the pool's dimensions).
CAPACITY_COLUMNS: tuple[str, ...] = (
    "hours",
    "installed_gpu_hours",
    "allocated_gpu_hours",
    "allocated_pct",
    "peak_installed_gpus",
    "peak_allocated_gpus",
    "saturated_hours",
    "allocation_pct_threshold",
)


def capacity_frame(
    conn: Connection, q: LedgerQuery, threshold_pct: float = 100.0, *, page: Page = WHOLE
) -> pl.DataFrame:
    """:func:`demand_capacity` as columns: ``period_start``, one per pool dimension, then
    :data:`CAPACITY_COLUMNS` (pools × periods rows: small, built from the rows)."""
    rows = demand_capacity(conn, q, threshold_pct, page=page)
    columns: dict[str, pl.Series] = {
        "period_start": pl.Series([r.key.period_start for r in rows], dtype=pl.Datetime("us", "UTC")),
    }
    for i, d in enumerate(q.group_by):
        columns[d.name.lower()] = pl.Series([r.key.dims[i][1] for r in rows], dtype=pl.String)
    columns |= {
        "hours": pl.Series([r.hours for r in rows], dtype=pl.Int64),
        "installed_gpu_hours": pl.Series([r.installed_gpu_hours for r in rows], dtype=pl.Float64),
        "allocated_gpu_hours": pl.Series([r.allocated_gpu_hours for r in rows], dtype=pl.Float64),
        "allocated_pct": pl.Series([r.allocated_pct for r in rows], dtype=pl.Float64),
        "peak_installed_gpus": pl.Series([r.peak_installed_gpus for r in rows], dtype=pl.Float64),
        "peak_allocated_gpus": pl.Series([r.peak_allocated_gpus for r in rows], dtype=pl.Float64),
        "saturated_hours": pl.Series([r.saturated_hours for r in rows], dtype=pl.Int64),
        "allocation_pct_threshold": pl.Series([threshold_pct] * len(rows), dtype=pl.Float64),
    }
    return pl.DataFrame(columns)
