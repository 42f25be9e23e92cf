"""``cost`` (with idle policies and currency conversion) and ``effectiveCost``."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics import cost as cost_q
from service.analytics import dims
from service.analytics import effective as effective_q
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


@strawberry.enum(description="What happens to the cost of unallocated GPU time (nobody held the device).")
class IdlePolicy(Enum):
    SEPARATE = strawberry.enum_value("SEPARATE", description="keep it as its own row(s), unallocated = true")
    SHARE_BY_USAGE = strawberry.enum_value(
        "SHARE_BY_USAGE",
        description="spread it over the allocated rows of its scope in proportion to their cost",
    )
    SHARE_EVENLY = strawberry.enum_value(
        "SHARE_EVENLY", description="spread it in equal parts over the allocated rows of its scope"
    )


@strawberry.type(
    description=(
        "Cost of one bucket in one currency. Rows add up exactly (to 1e-9) to the total of the same "
        "window without groupBy, under every idle policy. The unallocated pool of a period and currency "
        "is shared within the values of any non-workload dimensions grouped by (an on-prem pool never "
        "lands on cloud rows); a scope without allocated rows keeps its pool as an unallocated row."
    )
)
class CostRow(LedgerBucket):
    cost: Money = strawberry.field(
        description="Cost incl. energy, plus the shared pool under SHARE_* policies."
    )
    idle_cost: Money = strawberry.field(
        description="Part of cost spent idle; under SHARE_* it also holds the row's whole share of the pool."
    )
    shared_idle_cost: Money = strawberry.field(
        description="Share of the unallocated pool received (0 for SEPARATE)."
    )
    gpu_hours: float = strawberry.field(
        description="GPU-hours of the row's own ledger time (the pool's GPU-hours are never redistributed)."
    )
    unpriced_gpu_hours: float = strawberry.field(description="GPU-hours without a price (counted as cost 0).")
    rate_source: str | None = strawberry.field(
        description='The single rate source, "mixed", or null if unpriced.'
    )
    unallocated: bool = strawberry.field(description="True for the unallocated pool's own row(s).")

    @classmethod
    def page(cls, rows: Sequence[cost_q.CostRow], cursors: Sequence[str]) -> list[CostRow]:
        """The rows of a page, ``cursors[i]`` the cursor of ``rows[i]`` (built column by column)."""
        fields: dict[str, Sequence[object]] = {
            "cost": [Money.of(r.cost, r.currency) for r in rows],
            "idle_cost": [Money.of(r.idle_cost, r.currency) for r in rows],
            "shared_idle_cost": [Money.of(r.shared_idle_cost, r.currency) for r in rows],
            "gpu_hours": [gql_float(r.gpu_hours) for r in rows],
            "unpriced_gpu_hours": [gql_float(r.unpriced_gpu_hours) for r in rows],
            "rate_source": [r.rate_source for r in rows],
            "unallocated": [r.unallocated for r in rows],
        }
        return bucket_objects(cls, [r.key for r in rows], cursors, fields)


@strawberry.type(description="Cost per GPU-hour and per effective GPU-hour of one group, in one currency.")
class EffectiveCostRow(LedgerBucket):
    gpu_hours: float = strawberry.field(description="GPU-hours present.")
    effective_gpu_hours: float = strawberry.field(description="Busy GPU-hours of the metric.")
    cost: Money = strawberry.field(description="Cost of those GPU-hours.")
    cost_per_gpu_hour: Money | None = strawberry.field(
        description="cost ÷ gpuHours (rounded half-even to 1e-9); null if 0 GPU-hours or unpriced (XXX)."
    )
    cost_per_effective_gpu_hour: Money | None = strawberry.field(
        description="cost ÷ effectiveGpuHours (rounded half-even to 1e-9); null if 0 or unpriced."
    )
    metric: str = strawberry.field(description=METRIC_DESCRIPTION)

    @classmethod
    def page(
        cls, rows: Sequence[effective_q.EffectiveCostRow], cursors: Sequence[str]
    ) -> list[EffectiveCostRow]:
        """The rows of a page, ``cursors[i]`` the cursor of ``rows[i]`` (built column by column)."""
        fields: dict[str, Sequence[object]] = {
            "gpu_hours": [gql_float(r.gpu_hours) for r in rows],
            "effective_gpu_hours": [gql_float(r.effective_gpu_hours) for r in rows],
            "cost": [Money.of(r.cost, r.currency) for r in rows],
            "cost_per_gpu_hour": [Money.maybe(r.cost_per_gpu_hour, r.currency) for r in rows],
            "cost_per_effective_gpu_hour": [
                Money.maybe(r.cost_per_effective_gpu_hour, r.currency) for r in rows
            ],
            "metric": [r.metric.upper() for r in rows],
        }
        return bucket_objects(cls, [r.key for r in rows], cursors, fields)


@strawberry.type
class CostQuery:
    @strawberry.field(
        description="Cost per period and group, split per currency unless `currency` is given. Under "
        "SHARE_* or with `currency`, the policy and conversion work on the whole answer, so each page "
        "(`first`/`after`) costs the whole answer's work: narrow the window or groupBy rather than page "
        "through a large one (SEPARATE without `currency` pages in SQL). A project- or team-scoped "
        "caller gets its own rows and, under SHARE_*, its own share of the pool."
    )
    async def cost(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        granularity: Annotated[Granularity, strawberry.argument(description=GRANULARITY)] = Granularity.TOTAL,
        group_by: Annotated[Sequence[Dimension], strawberry.argument(description=GROUP_BY)] = (),
        filter: FILTER = None,  # noqa: A002
        idle_policy: Annotated[
            IdlePolicy, strawberry.argument(description="Where unallocated cost goes.")
        ] = IdlePolicy.SEPARATE,
        currency: Annotated[
            str | None,
            strawberry.argument(
                description="Convert to this ISO 4217 currency through the FX table, per day "
                "(MISSING_FX_RATE names a missing pair and day; UNKNOWN_CURRENCY for unknown codes)."
            ),
        ] = None,
        first: LEDGER_FIRST = None,
        after: AFTER = None,
    ) -> list[CostRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, granularity, group_by, filter, access=ctx.access)
        policy = dims.IdlePolicy[idle_policy.name]  # names are the values
        page = ledger_page(ctx.settings, "cost", q, first, after, policy, currency)
        rows = await ctx.read(lambda conn: cost_q.cost(conn, q, policy, currency, page=page))
        return CostRow.page(rows, page.key_cursors(r.key.order for r in rows))

    @strawberry.field(
        description="Cost per GPU-hour and per effective GPU-hour over the window, split per currency "
        "unless `currency` is given (then costs are converted per day before the per-hour prices are "
        "divided, and pages cost the whole answer's work, as `cost` with `currency`)."
    )
    async def effective_cost(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        group_by: Annotated[Sequence[Dimension], strawberry.argument(description=GROUP_BY)] = (
            Dimension.ENVIRONMENT,
            Dimension.GPU_MODEL,
        ),
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        first: LEDGER_FIRST = None,
        after: AFTER = None,
        currency: CURRENCY = None,
    ) -> list[EffectiveCostRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, Granularity.TOTAL, group_by, filter, access=ctx.access)
        page = ledger_page(ctx.settings, "effectiveCost", q, first, after, metric, currency)
        rows = await ctx.read(
            lambda conn: effective_q.effective_cost(conn, q, metric_key(metric), page=page, currency=currency)
        )
        return EffectiveCostRow.page(rows, page.key_cursors(r.key.order for r in rows))
