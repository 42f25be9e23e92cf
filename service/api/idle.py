"""``idleWaste``: idle GPU-hours and cost, allocated vs unallocated, and the longest idle streak."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import strawberry
from strawberry.types import Info
from strawberry.types.nodes import SelectedField, Selection

from service.analytics import idle as analytics
from service.api.context import ApiContext
from service.api.types import (
    AFTER,
    CURRENCY,
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
    Money,
    TimeWindow,
    bucket_objects,
    gql_float,
    ledger_page,
    ledger_query,
    metric_key,
)


@strawberry.type(description="Idle waste of one bucket in one currency (XXX: unpriced time).")
class IdleWasteRow(LedgerBucket):
    idle_gpu_hours: float = strawberry.field(description="Observed GPU-hours below the threshold.")
    idle_cost: Money = strawberry.field(
        description="Cost of those hours = allocatedIdleCost + unallocatedIdleCost."
    )
    allocated_idle_gpu_hours: float = strawberry.field(
        description="Idle GPU-hours while a workload held the device."
    )
    allocated_idle_cost: Money = strawberry.field(description="Their cost.")
    unallocated_idle_gpu_hours: float = strawberry.field(
        description="Idle GPU-hours while nobody held the device."
    )
    unallocated_idle_cost: Money = strawberry.field(description="Their cost.")
    longest_idle_streak_hours: int = strawberry.field(
        description="Longest run of consecutive hours in which one device of the bucket was idle for all its "
        "observed time (an unobserved or absent hour ends a run)."
    )
    threshold_pct: float = strawberry.field(description="The idle threshold used.")
    metric: str = strawberry.field(description=METRIC_DESCRIPTION)

    @classmethod
    def page(
        cls, rows: Sequence[analytics.IdleRow], threshold_pct: float, cursors: Sequence[str]
    ) -> list[IdleWasteRow]:
        """The rows of a page at ``threshold_pct``, ``cursors[i]`` the cursor of ``rows[i]``."""
        fields: dict[str, Sequence[object]] = {
            "idle_gpu_hours": [gql_float(r.idle_gpu_hours) for r in rows],
            "idle_cost": [Money.of(r.idle_cost, r.currency) for r in rows],
            "allocated_idle_gpu_hours": [gql_float(r.allocated_idle_gpu_hours) for r in rows],
            "allocated_idle_cost": [Money.of(r.allocated_idle_cost, r.currency) for r in rows],
            "unallocated_idle_gpu_hours": [gql_float(r.unallocated_idle_gpu_hours) for r in rows],
            "unallocated_idle_cost": [Money.of(r.unallocated_idle_cost, r.currency) for r in rows],
            # None: not selected, so never read (see IdleQuery.idle_waste).
            "longest_idle_streak_hours": [r.longest_idle_streak_hours or 0 for r in rows],
            "threshold_pct": [threshold_pct] * len(rows),
            "metric": [r.metric.upper() for r in rows],
        }
        return bucket_objects(cls, [r.key for r in rows], cursors, fields)


def selects(selections: Sequence[Selection], name: str) -> bool:
    """Whether ``name`` is selected under these fields, through fragments too (directives aside:
    a field under ``@skip``/``@include`` counts as selected, which only computes more)."""
    for s in selections:
        if isinstance(s, SelectedField) and s.name == name:
            return True
        if selects(s.selections, name):
            return True
    return False


@strawberry.type
class IdleQuery:
    @strawberry.field(
        description="Idle GPU-hours and their cost per period, group and currency (one currency with "
        "`currency`: then each page costs the whole answer's work, as `cost` with `currency`)."
    )
    async def idle_waste(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        granularity: Annotated[Granularity, strawberry.argument(description=GRANULARITY)] = Granularity.TOTAL,
        group_by: Annotated[Sequence[Dimension], strawberry.argument(description=GROUP_BY)] = (),
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        threshold_pct: Annotated[
            float,
            strawberry.argument(
                description="Idle below this utilization %. With the default metric: a histogram edge "
                "(1, 5, 10, 25, 50, 75, 100); with an explicit metric only the ledger's threshold (5); else "
                "UNSUPPORTED_THRESHOLD. Away from 5 %, idle cost = Σ cost × idle seconds ÷ present seconds "
                "per ledger hour, rounded half-even to 1e-9 after summing."
            ),
        ] = 5.0,
        first: LEDGER_FIRST = None,
        after: AFTER = None,
        currency: CURRENCY = None,
    ) -> list[IdleWasteRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, granularity, group_by, filter, access=ctx.access)
        page = ledger_page(ctx.settings, "idleWaste", q, first, after, metric, threshold_pct, currency)
        ledger_pct = ctx.settings.idle_threshold_pct
        streak = selects(info.selected_fields, "longestIdleStreakHours")
        rows = await ctx.read(
            lambda conn: analytics.idle_waste(
                conn,
                q,
                metric_key(metric),
                threshold_pct,
                ledger_threshold_pct=ledger_pct,
                page=page,
                streak=streak,
                currency=currency,
            )
        )
        return IdleWasteRow.page(rows, threshold_pct, page.key_cursors(r.key.order for r in rows))
