"""GPU-hours, effective GPU-hours, utilization, idle and coverage per period and group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func

from service.analytics import device_hours
from service.analytics.dims import metric_label
from service.analytics.errors import InvalidArgument
from service.analytics.paging import WHOLE, Page
from service.analytics.query import (
    GroupKey,
    LedgerQuery,
    collector_paused,
    fetch_columns,
    group_keys,
    grouped_select,
)
from service.analytics.window import hours
from service.metrics_catalog import UTIL_METRICS

J_PER_KWH = 3_600_000.0


def metric_columns(metric: str | None) -> tuple[str, str, str]:
    """(observed, busy, idle) column names for ``metric``; None = each row's default metric."""
    if metric is None:
        return "observed_s", "busy_s", "idle_s"
    if metric not in {m.value for m in UTIL_METRICS}:
        raise InvalidArgument(f"unknown utilization metric {metric!r}")
    return f"obs_s_{metric}", f"busy_s_{metric}", f"idle_s_{metric}"


def pct(part: float, whole: float) -> float | None:
    return part / whole * 100.0 if whole > 0 else None


def answer_measures(src: Any, metric: str | None) -> list[Any]:
    """The measures of a usage answer (:func:`usage`, and the export's frame): :func:`usage_measures`
    and energy."""
    return [*usage_measures(src, metric), (func.sum(src.c.energy_j) / J_PER_KWH).label("energy_kwh")]


def usage_measures(src: Any, metric: str | None) -> list[Any]:
    """GPU-hour measures (MIG-fraction weighted) shared by usage and effective cost."""
    obs, busy, idle = metric_columns(metric)
    return [
        hours(src.c.present_s, src).label("gpu_hours"),
        hours(src.c[obs], src).label("observed_gpu_hours"),
        hours(src.c[busy], src).label("effective_gpu_hours"),
        hours(src.c[idle], src).label("idle_gpu_hours"),
        func.min(src.c.default_metric).label("min_default_metric"),
        func.max(src.c.default_metric).label("max_default_metric"),
    ]


@dataclass(frozen=True)
class UsageRow:
    """One bucket of :func:`usage`. Hours are GPU-hours (a 1g MIG instance-hour = 1/7)."""

    key: GroupKey
    gpu_hours: float
    observed_gpu_hours: float
    effective_gpu_hours: float
    idle_gpu_hours: float
    energy_kwh: float | None
    metric: str

    @property
    def utilization_pct(self) -> float | None:
        """Busy ÷ observed time of the metric, × 100 (None when nothing was observed)."""
        return pct(self.effective_gpu_hours, self.observed_gpu_hours)

    @property
    def coverage_pct(self) -> float | None:
        """Observed ÷ present time, × 100 (None when nothing was present)."""
        return pct(self.observed_gpu_hours, self.gpu_hours)


@collector_paused
def usage(
    conn: Connection, q: LedgerQuery, metric: str | None = None, *, page: Page = WHOLE
) -> list[UsageRow]:
    """Usage per (period, group) of the rows ``q.access`` may read: one GROUP BY, paged in SQL
    (per device and hour: the day segments, :mod:`service.analytics.device_hours`)."""
    frame = device_hours.usage_frame(conn, q, metric_columns(metric), page)
    if frame is not None:
        c: dict[str, Sequence[Any]] = dict(frame.to_dict(as_series=False))
    else:
        src = q.source()
        c = fetch_columns(conn, grouped_select(src, q, answer_measures(src, metric), page=page), page)
    labels = metric_labels(metric, c["min_default_metric"], c["max_default_metric"])
    energy = [None if e is None else float(e) for e in c["energy_kwh"]]
    return list(
        map(
            UsageRow,
            group_keys(q, c),
            floats(c["gpu_hours"]),
            floats(c["observed_gpu_hours"]),
            floats(c["effective_gpu_hours"]),
            floats(c["idle_gpu_hours"]),
            energy,
            labels,
        )
    )


def floats(column: Sequence[Any]) -> list[float]:
    return list(map(float, column))


def metric_labels(metric: str | None, mins: Sequence[str | None], maxs: Sequence[str | None]) -> list[str]:
    return [metric_label(metric, lo, hi) for lo, hi in zip(mins, maxs, strict=True)]
