"""``breakEven``: own or rent, per owned (site, GPU model) and renting option (docs/break-even.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics import break_even as be
from service.api.context import ApiContext
from service.api.types import (
    FILTER,
    METRIC,
    METRIC_DESCRIPTION,
    WINDOW,
    Granularity,
    Money,
    TimeWindow,
    gql_float,
    ledger_query,
    metric_key,
)

PER_HOUR = "per GPU-hour, rounded half-even to 1e-9"


@strawberry.type(
    description="One owned (site, GPU model) against one way of renting that GPU, at the window's measured "
    "position or the what-if one. Owning pays every present hour; renting only allocated hours. Amounts "
    f"in `currency`, {PER_HOUR}."
)
class BreakEvenRow:
    site: str = strawberry.field(description="The on-prem site (`[[sites]]`) whose TCO prices owning.")
    gpu_model: str = strawberry.field(description="The owned GPU model (as the ledger names it).")
    metric: str = strawberry.field(description=METRIC_DESCRIPTION)
    gpu_hours: float = strawberry.field(description="Present GPU-hours of the owned GPUs in the window.")
    allocated_gpu_hours: float = strawberry.field(description="Of those, hours some workload held a GPU.")
    measured_allocation_pct: float | None = strawberry.field(
        description="allocatedGpuHours ÷ gpuHours × 100, measured."
    )
    measured_utilization_pct: float | None = strawberry.field(
        description="Busy ÷ observed time of allocated hours × 100 by `metric`, measured; "
        "null if none was observed."
    )
    allocation_pct: float | None = strawberry.field(
        description="The allocation used: allocationPct or measured."
    )
    utilization_pct: float | None = strawberry.field(
        description="The utilization of allocated time used: utilizationPct or measured (0 if none measured)."
    )
    what_if: bool = strawberry.field(description="True when allocationPct or utilizationPct was given.")
    energy_basis: str = strawberry.field(
        description="MEASURED (busy and idle power fitted from the energy readings), MEASURED_MEAN (one "
        "mean power: the readings do not separate them), ASSUMED (TDP × the site's assumed_load: no "
        "energy measured), NONE (neither: energy left out)."
    )
    busy_power_w: float | None = strawberry.field(description="Draw of a busy GPU, watts.")
    idle_power_w: float | None = strawberry.field(description="Draw of an idle GPU, watts.")
    own_fixed: Money = strawberry.field(description=f"Capex amortization + opex, {PER_HOUR}: accrues always.")
    own_busy_energy: Money = strawberry.field(
        description=f"Energy (PUE included) of a busy hour, {PER_HOUR}."
    )
    own_idle_energy: Money = strawberry.field(
        description=f"Energy (PUE included) of an idle hour, {PER_HOUR}."
    )
    own_cost_per_gpu_hour: Money = strawberry.field(description="Owning, per present GPU-hour.")
    own_cost_per_allocated_gpu_hour: Money | None = strawberry.field(
        description="Owning, per allocated GPU-hour (compare with rentCostPerGpuHour)."
    )
    own_cost_per_effective_gpu_hour: Money | None = strawberry.field(
        description="Owning, per effective (busy) GPU-hour."
    )
    option: str | None = strawberry.field(
        description="ON_DEMAND, COMMITMENT_1Y, COMMITMENT_3Y, SPOT, BILLS (what the bills charged, "
        "commitments and discounts included); null when nothing prices this GPU model."
    )
    rate_source: str = strawberry.field(
        description="CATALOG (the public price catalog), BILLS, CONFIG (`[[rent_options]]`) or NONE."
    )
    rate_source_detail: str = strawberry.field(
        description="Which one: the catalog's version and date and the price's observation date, the rent "
        "option's name, or the bills' GPU-hours."
    )
    provider: str | None = strawberry.field(description="Cloud provider of the renting option.")
    instance_type: str | None = strawberry.field(description="Instance type of the renting option.")
    region: str | None = strawberry.field(description="Region of the renting option (null: any).")
    rent_cost_per_gpu_hour: Money | None = strawberry.field(description="Renting, per (allocated) GPU-hour.")
    rent_cost_per_effective_gpu_hour: Money | None = strawberry.field(
        description="Renting, per effective (busy) GPU-hour: rentCostPerGpuHour ÷ utilization."
    )
    break_even_allocation_pct: float | None = strawberry.field(
        description="Allocation above which owning is cheaper than this option at the used utilization; "
        "null when renting is cheaper even at 100 %."
    )
    outcome: str | None = strawberry.field(
        description="BREAKS_EVEN, RENT_ALWAYS (renting cheaper even at 100 % allocation) or OWN_ALWAYS."
    )
    cheaper_now: str | None = strawberry.field(
        description="At the used position: OWN, RENT or EQUAL (null at 0 % allocation)."
    )

    @classmethod
    def of(cls, rows: Sequence[be.BreakEvenRow]) -> list[BreakEvenRow]:
        out = []
        for r in rows:
            c = r.currency
            out.append(
                cls(
                    site=r.site,
                    gpu_model=r.gpu_model,
                    metric=r.metric.upper(),
                    gpu_hours=gql_float(r.gpu_hours),
                    allocated_gpu_hours=gql_float(r.allocated_gpu_hours),
                    measured_allocation_pct=gql_float(r.measured_allocation_pct),
                    measured_utilization_pct=gql_float(r.measured_utilization_pct),
                    allocation_pct=gql_float(r.allocation_pct),
                    utilization_pct=gql_float(r.utilization_pct),
                    what_if=r.what_if,
                    energy_basis=r.energy_basis,
                    busy_power_w=None if r.busy_power_w is None else float(r.busy_power_w),
                    idle_power_w=None if r.idle_power_w is None else float(r.idle_power_w),
                    own_fixed=Money.of(r.own_fixed, c),
                    own_busy_energy=Money.of(r.own_busy_energy, c),
                    own_idle_energy=Money.of(r.own_idle_energy, c),
                    own_cost_per_gpu_hour=Money.of(r.own_cost_per_gpu_hour, c),
                    own_cost_per_allocated_gpu_hour=Money.maybe(r.own_cost_per_allocated_gpu_hour, c),
                    own_cost_per_effective_gpu_hour=Money.maybe(r.own_cost_per_effective_gpu_hour, c),
                    option=r.option,
                    rate_source=r.rate_source,
                    rate_source_detail=r.rate_source_detail,
                    provider=r.provider,
                    instance_type=r.instance_type,
                    region=r.region,
                    rent_cost_per_gpu_hour=Money.maybe(r.rent_cost_per_gpu_hour, c),
                    rent_cost_per_effective_gpu_hour=Money.maybe(r.rent_cost_per_effective_gpu_hour, c),
                    break_even_allocation_pct=gql_float(r.break_even_allocation_pct),
                    outcome=r.outcome,
                    cheaper_now=r.cheaper_now,
                )
            )
        return out


PCT_ARGUMENT = "What if: use this percentage (0–100) instead of the measured one; else INVALID_ARGUMENT."


@strawberry.type
class BreakEvenQuery:
    @strawberry.field(
        description="Own or rent: per owned (site, GPU model), owning's cost split into the part that "
        "accrues always and the energy that scales with use, against every price of renting that GPU "
        "(the public catalog, the bills of the window, configured commitments and spot), at the window's "
        "measured allocation and utilization (or the what-if ones), with the break-even allocation per "
        "option (docs/break-even.md). Account-wide data: needs the `read` scope (FORBIDDEN otherwise). "
        "`filter` selects the owned GPUs (not by workload dimensions)."
    )
    async def break_even(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        currency: Annotated[
            str | None,
            strawberry.argument(
                description="Convert to this ISO 4217 currency through the FX table, per day "
                "(MISSING_FX_RATE names a missing pair and day; UNKNOWN_CURRENCY for unknown codes); "
                "null = each site's currency."
            ),
        ] = None,
        allocation_pct: Annotated[float | None, strawberry.argument(description=PCT_ARGUMENT)] = None,
        utilization_pct: Annotated[float | None, strawberry.argument(description=PCT_ARGUMENT)] = None,
    ) -> list[BreakEvenRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, Granularity.TOTAL, (), filter, access=ctx.access)
        what_if = be.WhatIf(allocation_pct, utilization_pct)
        planning = ctx.settings.planning
        rows = await ctx.read(
            lambda conn: be.break_even_rows(
                conn, q, planning, metric=metric_key(metric), currency=currency, what_if=what_if
            )
        )
        return BreakEvenRow.of(rows)
