"""``reconciliation`` (billed vs metered, docs/design.md §5), ``billingLines`` (a Relay connection over the
normalized bill) and ``rates`` (the per-GPU-hour prices the ledger applies)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from service.analytics.window import check_window
from service.api.context import ApiContext
from service.api.devices import PageInfo
from service.api.types import (
    AFTER,
    CURRENCY,
    CURSOR,
    FIRST,
    WINDOW,
    Money,
    TimeWindow,
    aggregate_page,
    gql_float,
)
from service.billing import queries as billing_q
from service.billing import reconcile as recon
from service.models import BillingLine as BillingLineModel
from service.models import GpuRate as GpuRateModel


@strawberry.enum(description="What reconciliation rows are grouped by.")
class ReconciliationDimension(Enum):
    PROVIDER = strawberry.enum_value("PROVIDER", description="aws, gcp or azure")
    ACCOUNT = strawberry.enum_value("ACCOUNT", description="account / project / subscription")
    RESOURCE = strawberry.enum_value("RESOURCE", description="billing resource id = the instance id")
    DAY = strawberry.enum_value("DAY", description="UTC day (a billing line counts on the day it starts)")


@strawberry.enum(description="How billed and metered GPU-hours compare (docs/design.md §5).")
class ReconciliationStatus(Enum):
    MATCHED = strawberry.enum_value("MATCHED", description="within tolerancePct of billed")
    UNBILLED_USAGE = strawberry.enum_value(
        "UNBILLED_USAGE", description="metered > billed: billing lag or a mis-mapped resource"
    )
    UNMONITORED_SPEND = strawberry.enum_value(
        "UNMONITORED_SPEND", description="billed > metered: a blind spot (no agent, broken exporter)"
    )
    NO_METRICS = strawberry.enum_value("NO_METRICS", description="billed GPU resource never seen in metrics")
    NO_BILLING = strawberry.enum_value("NO_BILLING", description="metered cloud GPUs without a billing line")
    UNKNOWN_INSTANCE_TYPE = strawberry.enum_value(
        "UNKNOWN_INSTANCE_TYPE", description="a GPU-looking instance type the catalog does not know"
    )
    UNUSED_COMMITMENT = strawberry.enum_value(
        "UNUSED_COMMITMENT", description="unused reservation / savings plan: commitment waste, no resource"
    )
    ACCOUNT_ADJUSTMENT = strawberry.enum_value(
        "ACCOUNT_ADJUSTMENT", description="credits, refunds and tax of an account (no resource): not GPU cost"
    )


@strawberry.input(description="Keep rows whose values are among the given ones; null or [] = any.")
class ReconciliationFilter:
    provider: list[str] | None = strawberry.field(default=None, description="providers")
    account: list[str] | None = strawberry.field(default=None, description="accounts")
    resource: list[str] | None = strawberry.field(default=None, description="resource (instance) ids")


@strawberry.type(description="Billed against metered GPU-hours and cost for one group, in one currency.")
class ReconciliationRow:
    provider: str | None = strawberry.field(description="Provider (null unless grouped by it).")
    account: str | None = strawberry.field(description="Account (null unless grouped by it).")
    resource: str | None = strawberry.field(description="Resource id (null unless grouped by it).")
    day: dt.date | None = strawberry.field(description="UTC day (null unless grouped by it).")
    billed_gpu_hours: float = strawberry.field(description="GPU-hours on the bill.")
    metered_gpu_hours: float = strawberry.field(description="Observed GPU-hours in the metrics.")
    gpu_hours_variance: float = strawberry.field(description="metered − billed GPU-hours.")
    gpu_hours_variance_pct: float | None = strawberry.field(description="Variance in % of billed; null if 0.")
    billed_cost: Money = strawberry.field(description="Effective (amortized) cost on the bill.")
    ledger_cost: Money = strawberry.field(description="Cost in the ledger, unmonitored spend included.")
    cost_variance: Money = strawberry.field(description="ledgerCost − billedCost.")
    cost_variance_pct: float | None = strawberry.field(description="Cost variance in % of billed cost.")
    billing_lines: int = strawberry.field(description="Billing lines counted.")
    status: ReconciliationStatus = strawberry.field(description="How billed and metered compare.")
    cursor: str = strawberry.field(description=CURSOR)

    @classmethod
    def of(cls, r: recon.ReconRow, cursor: str) -> ReconciliationRow:
        pct = r.cost_variance_pct
        return cls(
            cursor=cursor,
            provider=r.provider,
            account=r.account,
            resource=r.resource,
            day=r.day,
            billed_gpu_hours=gql_float(float(r.billed_gpu_hours)),
            metered_gpu_hours=gql_float(r.metered_gpu_hours),
            gpu_hours_variance=gql_float(r.gpu_hours_variance),
            gpu_hours_variance_pct=gql_float(r.gpu_hours_variance_pct),
            billed_cost=Money.of(r.billed_cost, r.currency),
            ledger_cost=Money.of(r.ledger_cost, r.currency),
            cost_variance=Money.of(r.cost_variance, r.currency),
            cost_variance_pct=None if pct is None else gql_float(float(pct)),
            billing_lines=r.billing_lines,
            status=ReconciliationStatus[r.status.value],
        )


@strawberry.type(description="One normalized billing line item.")
class BillingLine:
    source: str = strawberry.field(description="Billing connector instance.")
    source_file: str = strawberry.field(description="Export file it came from.")
    line_no: int = strawberry.field(description="Line / record number in that file.")
    provider: str = strawberry.field(description="aws, gcp or azure.")
    account: str | None = strawberry.field(description="Usage account / project / subscription.")
    charge_start: dt.datetime = strawberry.field(description="Charge period start (UTC).")
    charge_end: dt.datetime = strawberry.field(description="Charge period end, exclusive (UTC).")
    charge_category: str = strawberry.field(description="FOCUS ChargeCategory.")
    charge_type: str | None = strawberry.field(description="The source's own line type.")
    pricing_model: str | None = strawberry.field(description="on_demand, commitment, spot or other.")
    resource_id: str | None = strawberry.field(description="Resource id (joins the instance id).")
    resource_name: str | None = strawberry.field(description="Resource name.")
    sku_description: str | None = strawberry.field(description="SKU / meter description.")
    instance_type: str | None = strawberry.field(description="Instance type.")
    region: str | None = strawberry.field(description="Region.")
    usage_quantity: str | None = strawberry.field(description="Usage quantity (decimal string).")
    usage_unit: str | None = strawberry.field(description="Unit of the quantity.")
    gpu_count: int | None = strawberry.field(description="GPUs per instance.")
    gpu_hours: str | None = strawberry.field(description="GPU-hours billed (decimal string).")
    billed_cost: Money = strawberry.field(description="Invoice basis (FOCUS BilledCost).")
    effective_cost: Money = strawberry.field(description="Amortized cost (FOCUS EffectiveCost).")
    list_cost: Money | None = strawberry.field(description="Public on-demand equivalent.")

    @classmethod
    def of(cls, b: BillingLineModel) -> BillingLine:
        names = set(cls.__annotations__) - {"billed_cost", "effective_cost", "list_cost"}
        values: dict[str, Any] = {k: v for k, v in b.model_dump().items() if k in names}
        for k in ("usage_quantity", "gpu_hours"):
            values[k] = None if values[k] is None else format(values[k], "f")
        return cls(
            **values,
            billed_cost=Money.of(b.billed_cost, b.currency),
            effective_cost=Money.of(b.effective_cost, b.currency),
            list_cost=Money.maybe(b.list_cost, b.currency),
        )


@strawberry.type(description="A billing line and its cursor.")
class BillingLineEdge:
    cursor: str = strawberry.field(description="Opaque cursor of this line.")
    node: BillingLine = strawberry.field(description="The line.")

    @classmethod
    def of(cls, line: BillingLineModel) -> BillingLineEdge:
        assert line.id is not None, "lines read from the database have their id"
        return cls(cursor=billing_q.encode_line_cursor(line.id), node=BillingLine.of(line))


@strawberry.type(description="A page of billing lines ordered by charge start, then import order.")
class BillingLineConnection:
    edges: list[BillingLineEdge] = strawberry.field(description="The lines of this page.")
    page_info: PageInfo = strawberry.field(description="Paging state.")
    total_count: int = strawberry.field(description="Lines matching the filter, all pages.")


@strawberry.input(description="Keep billing lines matching every given field; null or [] = any.")
class BillingLineFilter:
    window: TimeWindow | None = strawberry.field(default=None, description="Lines whose charge overlaps it.")
    provider: list[str] | None = strawberry.field(default=None, description="providers")
    account: list[str] | None = strawberry.field(default=None, description="accounts")
    resource: list[str] | None = strawberry.field(default=None, description="resource ids")
    charge_category: list[str] | None = strawberry.field(default=None, description="FOCUS charge categories")


@strawberry.type(
    description="A price per GPU-hour for devices matching its scope during [validFrom, validTo)."
)
class GpuRate:
    source_kind: str = strawberry.field(description="billing or rate_card.")
    source_ref: str = strawberry.field(description="Billing source or rate card name.")
    precedence: int = strawberry.field(description="Lower wins: billing 10, rate cards 20.")
    environment: str = strawberry.field(description="Environment it applies to.")
    instance_id: str | None = strawberry.field(description="Instance scope (billing rates).")
    instance_type: str | None = strawberry.field(description="Instance type scope.")
    gpu_model: str | None = strawberry.field(description="GPU model scope.")
    valid_from: dt.datetime = strawberry.field(description="Inclusive start (UTC).")
    valid_to: dt.datetime | None = strawberry.field(description="Exclusive end (UTC); null = open.")
    effective_per_gpu_hour: Money = strawberry.field(description="Amortized price per GPU-hour.")
    billed_per_gpu_hour: Money | None = strawberry.field(description="Invoice price per GPU-hour.")
    list_per_gpu_hour: Money | None = strawberry.field(description="On-demand price per GPU-hour.")

    @classmethod
    def of(cls, r: GpuRateModel) -> GpuRate:
        names = set(cls.__annotations__) - {
            "effective_per_gpu_hour",
            "billed_per_gpu_hour",
            "list_per_gpu_hour",
        }
        return cls(
            **{k: v for k, v in r.model_dump().items() if k in names},
            effective_per_gpu_hour=Money.of(r.effective_per_gpu_hour, r.currency),
            billed_per_gpu_hour=Money.maybe(r.billed_per_gpu_hour, r.currency),
            list_per_gpu_hour=Money.maybe(r.list_per_gpu_hour, r.currency),
        )


@strawberry.input(description="Keep rates matching every given field; null or [] = any.")
class RateFilter:
    source_kind: list[str] | None = strawberry.field(default=None, description="billing, rate_card")
    environment: list[str] | None = strawberry.field(default=None, description="environments")
    instance_id: list[str] | None = strawberry.field(default=None, description="instance ids")
    instance_type: list[str] | None = strawberry.field(default=None, description="instance types")
    gpu_model: list[str] | None = strawberry.field(default=None, description="GPU models")


@strawberry.type
class ReconciliationQuery:
    @strawberry.field(
        description="Billed vs metered GPU-hours and bill vs ledger cost per provider, account, resource "
        "and day (groupBy picks which), with a status per row (docs/design.md §5). Account-wide: needs the "
        "`read` scope, else FORBIDDEN."
    )
    async def reconciliation(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        group_by: Annotated[
            Sequence[ReconciliationDimension],
            strawberry.argument(description="Keys to keep; the rest are summed."),
        ] = (
            ReconciliationDimension.PROVIDER,
            ReconciliationDimension.ACCOUNT,
            ReconciliationDimension.RESOURCE,
            ReconciliationDimension.DAY,
        ),
        filter: Annotated[  # noqa: A002
            ReconciliationFilter | None, strawberry.argument(description="Row filter.")
        ] = None,
        tolerance_pct: Annotated[
            float, strawberry.argument(description="MATCHED when |metered − billed| ≤ this % of billed.")
        ] = 5.0,
        first: FIRST = None,
        after: AFTER = None,
        currency: CURRENCY = None,
    ) -> list[ReconciliationRow]:
        ctx = info.context
        w = check_window(window.start, window.end, max_days=ctx.settings.max_window_days)
        keys = tuple(recon.Key[d.name] for d in group_by)  # names are the values
        filters = {k: v for k, v in vars(filter).items() if v} if filter is not None else {}
        tol = Decimal(repr(tolerance_pct))
        share, access = ctx.settings.gpu_cost_share, ctx.access
        page = aggregate_page(ctx.settings, "reconciliation", first, after)
        rows = await ctx.read(
            lambda conn: recon.reconcile(
                conn, w, keys, filters, tol, gpu_cost_share=share, access=access, page=page, currency=currency
            )
        )
        return [ReconciliationRow.of(r, c) for r, c in zip(rows, page.cursors(len(rows)), strict=True)]

    @strawberry.field(
        description="Normalized billing lines, a page at a time (ordered by import). `first` above the "
        "page size limit is the error PAGE_SIZE_TOO_LARGE. Account-wide: needs `read`, else FORBIDDEN."
    )
    async def billing_lines(
        self,
        info: Info[ApiContext, None],
        filter: Annotated[  # noqa: A002
            BillingLineFilter | None, strawberry.argument(description="Line filter.")
        ] = None,
        first: Annotated[int, strawberry.argument(description="Page size.")] = 50,
        after: Annotated[
            str | None, strawberry.argument(description="endCursor of the previous page.")
        ] = None,
    ) -> BillingLineConnection:
        ctx = info.context
        w = None
        filters: dict[str, Any] = {}
        if filter is not None:
            if filter.window is not None:
                w = check_window(
                    filter.window.start, filter.window.end, max_days=ctx.settings.max_window_days
                )
            filters = {k: getattr(filter, k) for k in billing_q.LINE_FILTER_COLUMNS if getattr(filter, k)}
        access, size_max = ctx.access, ctx.settings.page_size_max
        page = await ctx.read(
            lambda conn: billing_q.billing_lines_page(
                conn, w, filters, access=access, first=first, after=after, page_size_max=size_max
            )
        )
        edges = [BillingLineEdge.of(b) for b in page.lines]
        return BillingLineConnection(
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next_page,
                has_previous_page=after is not None,
                start_cursor=edges[0].cursor if edges else None,
                end_cursor=edges[-1].cursor if edges else None,
            ),
            total_count=page.total_count,
        )

    @strawberry.field(
        description="Per-GPU-hour rates (billing-derived and rate cards) valid in the window. "
        "Account-wide: needs `read`, else FORBIDDEN."
    )
    async def rates(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        filter: Annotated[RateFilter | None, strawberry.argument(description="Rate filter.")] = None,  # noqa: A002
    ) -> list[GpuRate]:
        ctx = info.context
        w = check_window(window.start, window.end, max_days=ctx.settings.max_window_days)
        filters = {k: getattr(filter, k) for k in billing_q.RATE_FILTER_COLUMNS} if filter is not None else {}
        access = ctx.access
        rows = await ctx.read(lambda conn: billing_q.rates_in(conn, w, filters, access=access))
        return [GpuRate.of(r) for r in rows]
