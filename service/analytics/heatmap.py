"""Hour-of-week heatmap: utilization, allocated share and idle cost by local hour of the week.

A cell is one local hour of an ISO week (``hour_of_week`` 0 = Monday 00:00–01:00 local, 167 =
Sunday 23:00–24:00) in an IANA time zone. The database groups the ledger's UTC hours by their
local hour of the week — one ``GROUP BY`` over ``ledger_group_hour`` when the filter and scope
involve only rollup dimensions, else over ``ledger_hour`` — so the answer costs the same whatever
the fleet's size and the window's length, and Python only maps 168 cells.

**Which local hour a UTC hour lands in.** Each UTC hour ``[h, h+1)`` counts in the local hour in
which it *starts*: ``local = h + ⌊offset_s / 3600⌋`` with the zone's UTC offset at that instant.
The offset is piecewise constant over the window (it changes at DST transitions), so SQL gets it
as a ``CASE`` over the window's few offset segments (computed with :mod:`zoneinfo`), and the cell
is ``(local_hour_index + 72) mod 168`` (hour 0 of 1970-01-01 was Thursday 00:00 = hour 72 of an
ISO week).

* A local hour that occurs **twice** (autumn: Berlin's 02:00–03:00 on the last Sunday of October)
  gets both UTC hours: that week the cell holds two hours of data.
* A local hour that **never occurs** (spring: Berlin's 02:00–03:00 on the last Sunday of March)
  gets none: that week the cell holds no data.
* Zones whose offset is not a whole hour (Asia/Kolkata +05:30) put a UTC hour in the local hour
  it starts in (00:00 UTC → 05:30 local → the 05:00 cell).

``window_hours`` says how many UTC hours of the window each cell received, so a reader can tell a
quiet cell from one the calendar skipped, and ratios (utilization, allocated share) are ratios of
sums, unaffected by how many hours a cell got.

Every measure is the very SQL expression ``usage`` and ``idleWaste`` sum (same source choice,
same metric, same threshold), so the cells add up to their answers: GPU-hours to ``usage``'s
(up to float summation order), idle cost exactly to ``idleWaste``'s per currency, and with
``currency`` to its converted total (each UTC day × source currency converted once:
:func:`service.analytics.fx.convert_day_buckets`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl
from sqlalchemy import ColumnElement, Connection, case, literal, select

from service.analytics.dims import Granularity, metric_label
from service.analytics.errors import InvalidArgument
from service.analytics.fx import NO_CURRENCY, FxTable, check_currency, convert_day_buckets
from service.analytics.idle import _idle_plan, idle_measures
from service.analytics.query import LedgerQuery, collector_paused, fetch_columns
from service.analytics.usage import metric_columns, pct, usage_measures
from service.analytics.window import hours
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT
from service.timeutil import HOUR_S, hour_start

HOURS_PER_WEEK = 168
#: Hour 0 of the epoch (1970-01-01 00:00, a Thursday) is hour 72 of an ISO (Monday) week.
EPOCH_HOUR_OF_WEEK = 72
#: Longest zone name accepted (the longest IANA name is ~32 characters).
MAX_ZONE_CHARS = 64
ZERO = Decimal("0E-9")


@dataclass(frozen=True)
class HeatmapCell:
    """One local hour of the week. Hours are GPU-hours; idle cost per currency (``XXX``: unpriced)."""

    hour_of_week: int
    window_hours: int
    gpu_hours: float
    observed_gpu_hours: float
    effective_gpu_hours: float
    allocated_observed_gpu_hours: float
    idle_gpu_hours: float
    idle_cost: dict[str, Decimal]
    metric: str | None

    @property
    def weekday(self) -> int:
        """ISO weekday: 1 = Monday … 7 = Sunday."""
        return self.hour_of_week // 24 + 1

    @property
    def hour(self) -> int:
        """Local hour of the day, 0–23."""
        return self.hour_of_week % 24

    @property
    def utilization_pct(self) -> float | None:
        """Busy ÷ observed time of the metric × 100 (as ``usage``); None when nothing was observed."""
        return pct(self.effective_gpu_hours, self.observed_gpu_hours)

    @property
    def allocated_pct(self) -> float | None:
        """Observed GPU-hours a workload held ÷ observed GPU-hours × 100; None when nothing was observed."""
        return pct(self.allocated_observed_gpu_hours, self.observed_gpu_hours)


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (``Europe/Berlin``, ``UTC``), else INVALID_ARGUMENT saying why."""
    text = name.strip()
    shown = repr(text[:MAX_ZONE_CHARS]) + ("…" if len(text) > MAX_ZONE_CHARS else "")
    if (
        not text
        or len(text) > MAX_ZONE_CHARS
        or "\x00" in text
        or text.startswith(("/", "."))
        or ".." in text
    ):
        raise InvalidArgument(f"timeZone {shown} is not an IANA time zone name (e.g. Europe/Berlin, UTC)")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(
            f"timeZone {shown} is not a known IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)"
        ) from None


def hour_shifts(zone: ZoneInfo, start_hour: int, end_hour: int) -> list[tuple[int, int]]:
    """``[(first_hour_index, shift_h), …]``: from each first hour on (until the next), a UTC hour
    ``h`` of ``[start_hour, end_hour)`` lies in local hour ``h + shift_h`` (see the module
    docstring). One entry per offset segment: a few per year, one per window hour at most."""
    segments: list[tuple[int, int]] = []
    for h in range(start_hour, end_hour):
        offset = hour_start(h).astimezone(zone).utcoffset() or dt.timedelta(0)
        shift = int(offset.total_seconds()) // HOUR_S  # floor: -03:30 → -4
        if not segments or segments[-1][1] != shift:
            segments.append((h, shift))
    return segments


def _cell_expression(hour_index: Any, segments: list[tuple[int, int]]) -> ColumnElement[int]:
    """``(hour_index + shift + 72) mod 168`` with the shift of the hour's segment, in SQL."""
    shift: ColumnElement[int]
    if len(segments) == 1:
        shift = literal(segments[0][1])
    else:
        whens = [
            (hour_index < nxt, literal(s)) for (_, s), (nxt, _) in zip(segments, segments[1:], strict=False)
        ]
        shift = case(*whens, else_=literal(segments[-1][1]))
    return (hour_index + shift + EPOCH_HOUR_OF_WEEK) % HOURS_PER_WEEK


def _window_hours(segments: list[tuple[int, int]], end_hour: int) -> list[int]:
    """How many UTC hours of the window each cell receives (at most ~10,000 hours: a few ms)."""
    counts = [0] * HOURS_PER_WEEK
    bounds = [*(first for first, _ in segments[1:]), end_hour]
    for (first, shift), stop in zip(segments, bounds, strict=True):
        for h in range(first, stop):
            counts[(h + shift + EPOCH_HOUR_OF_WEEK) % HOURS_PER_WEEK] += 1
    return counts


@collector_paused
def heatmap(
    conn: Connection,
    q: LedgerQuery,
    time_zone: str,
    metric: str | None = None,
    threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    currency: str | None = None,
    *,
    ledger_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
) -> list[HeatmapCell]:
    """The 168 cells of ``q``'s window, filter and access in ``time_zone`` (Monday 00 first).

    ``q``'s granularity and groupBy are not used (a cell is the only bucket). ``metric`` and
    ``threshold_pct`` as ``usage``/``idleWaste`` take them (UNSUPPORTED_THRESHOLD alike);
    ``currency``: idle cost converted per UTC day (MISSING_FX_RATE, UNKNOWN_CURRENCY as ``cost``).
    """
    zone = zone_of(time_zone)
    metric_columns(metric)  # INVALID_ARGUMENT for an unknown metric, before any SQL
    buckets = _idle_plan(metric, threshold_pct, ledger_threshold_pct)
    target = check_currency(conn, currency) if currency is not None else None
    hq = replace(q, granularity=Granularity.HOUR, group_by=())
    window = q.window
    segments = hour_shifts(zone, window.start_hour, window.end_hour)
    src, idle = idle_measures(hq, metric, buckets, conn.dialect.name)
    cell = _cell_expression(src.c.hour_index, segments).label("cell")
    observed = src.c[metric_columns(metric)[0]]
    allocated = hours(case((src.c.workload_key == "", 0.0), else_=observed), src).label("alloc_obs_h")
    keys: list[Any] = [cell, src.c.currency.label("currency")]
    if target is not None:
        keys.append(src.c.day_index.label("day"))
    stmt = select(*keys, *usage_measures(src, metric), allocated, *idle).group_by(*keys)
    c = fetch_columns(conn, stmt)
    n = len(c["cell"])
    days = c["day"] if target is not None else [0] * n
    idle_costs = [a + b for a, b in zip(c["alloc_cost"], c["free_cost"], strict=True)]
    currencies = [cur or NO_CURRENCY for cur in c["currency"]]
    if target is not None:
        fx = FxTable(conn, target, set(currencies), days)
        [idle_costs] = convert_day_buckets(fx, [idle_costs], currencies, days)
        currencies = [target] * n
    return _cells(c, idle_costs, currencies, _window_hours(segments, window.end_hour), metric)


def _cells(
    c: dict[str, Any],
    idle_costs: list[Decimal],
    currencies: list[str],
    window_hours: list[int],
    metric: str | None,
) -> list[HeatmapCell]:
    """Fold the SQL groups (cell × currency [× day]) into 168 cells; the float sums are added in
    the groups' order."""
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0] * 6)
    costs: dict[int, dict[str, Decimal]] = defaultdict(dict)
    defaults: dict[int, set[str]] = defaultdict(set)
    measures = ("gpu_hours", "observed_gpu_hours", "effective_gpu_hours", "alloc_obs_h", "alloc_h", "free_h")
    for i, k in enumerate(c["cell"]):
        k = int(k)
        acc = sums[k]
        for j, name in enumerate(measures):
            acc[j] += float(c[name][i])
        cur = currencies[i]
        costs[k][cur] = costs[k].get(cur, ZERO) + idle_costs[i]
        defaults[k].update(
            m for m in (c["min_default_metric"][i], c["max_default_metric"][i]) if m is not None
        )
    out = []
    for k in range(HOURS_PER_WEEK):
        g, obs, eff, alloc, idle_a, idle_f = sums.get(k, [0.0] * 6)
        seen = sorted(defaults.get(k, ()))
        label = metric_label(metric, seen[0], seen[-1]) if seen else metric
        out.append(
            HeatmapCell(
                hour_of_week=k,
                window_hours=window_hours[k],
                gpu_hours=g,
                observed_gpu_hours=obs,
                effective_gpu_hours=eff,
                allocated_observed_gpu_hours=alloc,
                idle_gpu_hours=idle_a + idle_f,
                idle_cost=dict(sorted(costs.get(k, {}).items())),
                metric=label,
            )
        )
    return out


#: The columns of :func:`heatmap_frame` (an export row is one cell in one currency).
COLUMNS = (
    "hour_of_week",
    "weekday",
    "hour",
    "window_hours",
    "currency",
    "gpu_hours",
    "observed_gpu_hours",
    "effective_gpu_hours",
    "utilization_pct",
    "allocated_gpu_hours",
    "allocated_pct",
    "idle_gpu_hours",
    "idle_cost",
    "metric",
)


def heatmap_frame(cells: list[HeatmapCell]) -> pl.DataFrame:
    """The cells as columns: one row per cell and currency (a cell without ledger time: one row,
    currency and idle cost null), ratios as the cells compute them, metric upper-case."""
    rows = [(c, cur, amount) for c in cells for cur, amount in (c.idle_cost.items() or [(None, None)])]

    def column(name: str, dtype: Any, values: list[Any]) -> pl.Series:
        return pl.Series(name, values, dtype=dtype)

    return pl.DataFrame(
        [
            column("hour_of_week", pl.Int64, [c.hour_of_week for c, _, _ in rows]),
            column("weekday", pl.Int64, [c.weekday for c, _, _ in rows]),
            column("hour", pl.Int64, [c.hour for c, _, _ in rows]),
            column("window_hours", pl.Int64, [c.window_hours for c, _, _ in rows]),
            column("currency", pl.String, [cur for _, cur, _ in rows]),
            column("gpu_hours", pl.Float64, [c.gpu_hours for c, _, _ in rows]),
            column("observed_gpu_hours", pl.Float64, [c.observed_gpu_hours for c, _, _ in rows]),
            column("effective_gpu_hours", pl.Float64, [c.effective_gpu_hours for c, _, _ in rows]),
            column("utilization_pct", pl.Float64, [c.utilization_pct for c, _, _ in rows]),
            column("allocated_gpu_hours", pl.Float64, [c.allocated_observed_gpu_hours for c, _, _ in rows]),
            column("allocated_pct", pl.Float64, [c.allocated_pct for c, _, _ in rows]),
            column("idle_gpu_hours", pl.Float64, [c.idle_gpu_hours for c, _, _ in rows]),
            column("idle_cost", pl.Decimal(38, 9), [amount for _, _, amount in rows]),
            column("metric", pl.String, [None if c.metric is None else c.metric.upper() for c, _, _ in rows]),
        ]
    )
