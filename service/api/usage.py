"""``usage``: GPU-hours, effective GPU-hours, utilization, idle, energy and coverage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics import usage as analytics
from service.api.context import ApiContext
from service.api.types import (
    AFTER,
    FILTER,
    FIRST,
    GRANULARITY,
    GROUP_BY,
    METRIC,
    METRIC_DESCRIPTION,
    WINDOW,
    Dimension,
    Granularity,
    LedgerBucket,
    TimeWindow,
    aggregate_page,
    bucket_fields,
    gql_float,
    ledger_query,
    metric_key,
)


@strawberry.type(
    description="Usage of one bucket. GPU-hours weight MIG instances by their fraction (1g = 1/7)."
)
class UsageRow(LedgerBucket):
    gpu_hours: float = strawberry.field(description="GPU-hours present (present seconds × fraction / 3600).")
    effective_gpu_hours: float = strawberry.field(
        description="Σ busy seconds × fraction / 3600 for the metric: 3600 s at 100 % = 1."
    )
    utilization_pct: float | None = strawberry.field(
        description="Busy ÷ observed time of the metric × 100; null when nothing was observed."
    )
    idle_gpu_hours: float = strawberry.field(description="Observed GPU-hours below the idle threshold (5 %).")
    energy_kwh: float | None = strawberry.field(
        description="Measured or estimated energy; null when unknown."
    )
    coverage_pct: float | None = strawberry.field(
        description="Observed ÷ present time × 100 for the metric; null when nothing was present."
    )
    metric: str = strawberry.field(description=METRIC_DESCRIPTION)

    @classmethod
    def of(cls, r: analytics.UsageRow, cursor: str) -> UsageRow:
        return cls(
            **bucket_fields(r.key, cursor),  # type: ignore[arg-type]  # its keys are the dimensions' names
            gpu_hours=gql_float(r.gpu_hours),
            effective_gpu_hours=gql_float(r.effective_gpu_hours),
            utilization_pct=gql_float(r.utilization_pct),
            idle_gpu_hours=gql_float(r.idle_gpu_hours),
            energy_kwh=gql_float(r.energy_kwh),
            coverage_pct=gql_float(r.coverage_pct),
            metric=r.metric.upper(),
        )


@strawberry.type
class UsageQuery:
    @strawberry.field(description="GPU-hours and how busy they were, per period and group.")
    async def usage(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        granularity: Annotated[Granularity, strawberry.argument(description=GRANULARITY)] = Granularity.TOTAL,
        group_by: Annotated[Sequence[Dimension], strawberry.argument(description=GROUP_BY)] = (),
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        first: FIRST = None,
        after: AFTER = None,
    ) -> list[UsageRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, granularity, group_by, filter, access=ctx.access)
        page = aggregate_page(ctx.settings, "usage", first, after)
        rows = await ctx.read(lambda conn: analytics.usage(conn, q, metric_key(metric), page=page))
        return [UsageRow.of(r, c) for r, c in zip(rows, page.cursors(len(rows)), strict=True)]
