"""``usage``: GPU-hours, effective GPU-hours, utilization, idle, energy and coverage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, cast

import polars as pl
import strawberry
from strawberry.types import Info

from service.analytics import columnar
from service.analytics import usage as analytics
from service.analytics.paging import Page
from service.analytics.query import LedgerQuery
from service.api.context import ApiContext
from service.api.frame_rows import UpperText, bucket_columns, floats
from service.api.leaf_lists import ColumnRows
from service.api.types import (
    AFTER,
    FILTER,
    GRANULARITY,
    GROUP_BY,
    LEDGER_FIRST,
    METRIC,
    METRIC_DESCRIPTION,
    WINDOW,
    Dimension,
    Granularity,
    LedgerBucket,
    TimeWindow,
    bucket_objects,
    gql_float,
    ledger_page,
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
    def page(cls, rows: Sequence[analytics.UsageRow], cursors: Sequence[str]) -> list[UsageRow]:
        """The rows of a page, ``cursors[i]`` the cursor of ``rows[i]`` (built column by column)."""
        fields: dict[str, Sequence[object]] = {
            "gpu_hours": [gql_float(r.gpu_hours) for r in rows],
            "effective_gpu_hours": [gql_float(r.effective_gpu_hours) for r in rows],
            "utilization_pct": [gql_float(r.utilization_pct) for r in rows],
            "idle_gpu_hours": [gql_float(r.idle_gpu_hours) for r in rows],
            "energy_kwh": [gql_float(r.energy_kwh) for r in rows],
            "coverage_pct": [gql_float(r.coverage_pct) for r in rows],
            "metric": [r.metric.upper() for r in rows],
        }
        return bucket_objects(cls, [r.key for r in rows], cursors, fields)

    @classmethod
    def columns(cls, frame: pl.DataFrame, q: LedgerQuery, page: Page) -> ColumnRows:
        """The rows of a page read as a frame (``columnar.usage_frame``), the values ``page``
        gives the same rows."""
        measures = ("gpu_hours", "effective_gpu_hours", "utilization_pct", "idle_gpu_hours")
        return bucket_columns(
            cls,
            frame,
            q,
            page,
            {
                **{name: floats(name) for name in (*measures, "energy_kwh", "coverage_pct")},
                "metric": UpperText("metric"),
            },
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
        first: LEDGER_FIRST = None,
        after: AFTER = None,
    ) -> list[UsageRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, granularity, group_by, filter, access=ctx.access)
        page = ledger_page(ctx.settings, "usage", q, first, after, metric)
        frame = await ctx.read(
            lambda conn: columnar.usage_frame(conn, q, metric_key(metric), page=page, order_key=True)
        )
        # Columns, not objects: a page of 50,000 rows builds no row (service.api.leaf_lists).
        return cast(list[UsageRow], UsageRow.columns(frame, q, page))
