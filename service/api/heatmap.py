"""``heatmap``: hour of the week (local time of an IANA zone) × utilization, allocation and idle cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics import heatmap as analytics
from service.api.context import ApiContext
from service.api.types import (
    CURRENCY,
    FILTER,
    METRIC,
    WINDOW,
    Granularity,
    Money,
    TimeWindow,
    gql_float,
    ledger_query,
    metric_key,
)


@strawberry.type(
    description="One local hour of the week. GPU-hours weight MIG instances by their fraction; ratios are "
    "ratios of the cell's sums."
)
class HeatmapCell:
    hour_of_week: int = strawberry.field(
        description="0 = Monday 00:00–01:00 local … 167 = Sunday 23:00–24:00."
    )
    weekday: int = strawberry.field(description="ISO weekday: 1 = Monday … 7 = Sunday.")
    hour: int = strawberry.field(description="Local hour of the day, 0–23.")
    window_hours: int = strawberry.field(
        description="UTC hours of the window that fell in this cell: a local hour skipped by a DST change "
        "adds none that week, one that occurs twice adds two."
    )
    gpu_hours: float = strawberry.field(description="GPU-hours present.")
    observed_gpu_hours: float = strawberry.field(description="GPU-hours observed by the metric.")
    effective_gpu_hours: float = strawberry.field(description="Busy GPU-hours of the metric.")
    utilization_pct: float | None = strawberry.field(
        description="effectiveGpuHours ÷ observedGpuHours × 100 (as `usage`); null when nothing was observed."
    )
    allocated_gpu_hours: float = strawberry.field(description="Observed GPU-hours a workload held.")
    allocated_pct: float | None = strawberry.field(
        description="allocatedGpuHours ÷ observedGpuHours × 100; null when nothing was observed."
    )
    idle_gpu_hours: float = strawberry.field(description="Observed GPU-hours below the idle threshold.")
    idle_cost: list[Money] = strawberry.field(
        description="Cost of those hours, one amount per currency (XXX: unpriced), or one in `currency`; "
        "[] when the cell holds no ledger time."
    )
    metric: str | None = strawberry.field(
        description="Metric used (as `usage`); null when the cell holds no ledger time."
    )

    @classmethod
    def of(cls, c: analytics.HeatmapCell) -> HeatmapCell:
        return cls(
            hour_of_week=c.hour_of_week,
            weekday=c.weekday,
            hour=c.hour,
            window_hours=c.window_hours,
            gpu_hours=gql_float(c.gpu_hours),
            observed_gpu_hours=gql_float(c.observed_gpu_hours),
            effective_gpu_hours=gql_float(c.effective_gpu_hours),
            utilization_pct=gql_float(c.utilization_pct),
            allocated_gpu_hours=gql_float(c.allocated_observed_gpu_hours),
            allocated_pct=gql_float(c.allocated_pct),
            idle_gpu_hours=gql_float(c.idle_gpu_hours),
            idle_cost=[Money.of(amount, cur) for cur, amount in c.idle_cost.items()],
            metric=None if c.metric is None else c.metric.upper(),
        )


def cells_of(cells: Sequence[analytics.HeatmapCell]) -> list[HeatmapCell]:
    return [HeatmapCell.of(c) for c in cells]


@strawberry.type
class HeatmapQuery:
    @strawberry.field(
        description="The window's ledger by local hour of the week in `timeZone`: 168 cells, Monday 00 "
        "first. A UTC hour counts in the local hour it starts in (docs/heatmap.md: DST and half-hour "
        "zones). The cells add up to `usage` and `idleWaste` of the same window, filter and metric. A "
        "project- or team-scoped caller gets its own rows only."
    )
    async def heatmap(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        time_zone: Annotated[
            str,
            strawberry.argument(
                description="IANA time zone (Europe/Berlin, America/New_York, UTC); else INVALID_ARGUMENT."
            ),
        ],
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        threshold_pct: Annotated[
            float,
            strawberry.argument(description="Idle below this utilization %, as `idleWaste` takes it."),
        ] = 5.0,
        currency: CURRENCY = None,
    ) -> list[HeatmapCell]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, Granularity.HOUR, (), filter, access=ctx.access)
        ledger_pct = ctx.settings.idle_threshold_pct
        cells = await ctx.read(
            lambda conn: analytics.heatmap(
                conn,
                q,
                time_zone,
                metric_key(metric),
                threshold_pct,
                currency,
                ledger_threshold_pct=ledger_pct,
            )
        )
        return cells_of(cells)
