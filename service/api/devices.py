"""``devices`` (a Relay connection over the inventory) and ``connectors`` (ingestion health)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import strawberry
from sqlalchemy import Connection
from strawberry.types import Info

from connectors.sdk import ConnectorStatus
from service.analytics import devices as analytics
from service.api.context import ApiContext
from service.models import ConnectorState
from service.models import Device as DeviceModel

# Listed from the enum, so a new status is documented in the schema the day it is added.
_STATUS_DESCRIPTION = (
    f"One of {', '.join(ConnectorStatus)}. After a failed run: INVALID_CONFIGURATION — fix the "
    "connector's config (not retried); FAILED_CONNECTION — the source is out of reach or refused "
    "the credentials (retried with back-off unless refused); PARSE_ERROR — the source sent data "
    "that could not be read (see lastError and the rejections); DEGRADED — imported, but more rows "
    "or cost were refused than the connector's max_refused_rows_pct / max_refused_cost_pct allow, or "
    "a file had no row accepted (lastError says which; the watermark moved); INTERNAL_ERROR — a "
    "bug, not the source's fault (the service log has its traceback; the next regular run tries again)."
)


@strawberry.type(description="One GPU or one MIG instance.")
class Device:
    device_id: str = strawberry.field(description="GPU-…/MIG-… UUID, or <instance-id>/gpu<index>.")
    source: str = strawberry.field(description="Connector instance that reported it.")
    environment: str = strawberry.field(description="onprem, aws, gcp or azure.")
    provider: str | None = strawberry.field(description="Cloud provider or on-prem operator.")
    account: str | None = strawberry.field(description="Cloud account / subscription / project.")
    region: str | None = strawberry.field(description="Cloud region or on-prem site.")
    cluster: str | None = strawberry.field(description="Cluster.")
    node: str | None = strawberry.field(description="Node / host.")
    instance_id: str | None = strawberry.field(description="Cloud VM id (joins billing).")
    instance_type: str | None = strawberry.field(description="Cloud instance type.")
    gpu_model: str | None = strawberry.field(description="GPU model.")
    gpu_index: int | None = strawberry.field(description="Index of the GPU on its node.")
    parent_device_id: str | None = strawberry.field(description="Parent GPU of a MIG instance.")
    mig_profile: str | None = strawberry.field(description="MIG profile, e.g. 1g.18gb.")
    gpu_fraction: float = strawberry.field(description="Share of a physical GPU: 1, or MIG slices / 7.")
    vendor: str | None = strawberry.field(description="nvidia, amd, intel or huawei (null: not known).")
    metrics: list[str] = strawberry.field(description="Metric keys seen for this device.")
    first_seen: dt.datetime = strawberry.field(description="First sample (UTC).")
    last_seen: dt.datetime = strawberry.field(description="Last sample (UTC).")

    @classmethod
    def of(cls, d: DeviceModel) -> Device:
        values = d.model_dump()
        values["metrics"] = [m for m in (d.metrics or "").split(",") if m]
        names = set(cls.__annotations__)
        return cls(**{k: v for k, v in values.items() if k in names})


@strawberry.type(description="Relay page information.")
class PageInfo:
    has_next_page: bool = strawberry.field(description="More devices follow endCursor.")
    has_previous_page: bool = strawberry.field(description="Devices precede this page (after was given).")
    start_cursor: str | None = strawberry.field(description="Cursor of the first edge.")
    end_cursor: str | None = strawberry.field(description="Cursor of the last edge: pass it as `after`.")


@strawberry.type(description="A device and its cursor.")
class DeviceEdge:
    cursor: str = strawberry.field(description="Opaque cursor of this device.")
    node: Device = strawberry.field(description="The device.")


@strawberry.type(description="A page of devices ordered by deviceId.")
class DeviceConnection:
    edges: list[DeviceEdge] = strawberry.field(description="The devices of this page.")
    page_info: PageInfo = strawberry.field(description="Paging state.")
    total_count: int = strawberry.field(description="Devices matching the filter, all pages.")


@strawberry.input(description="Keep devices whose values are among the given ones; null or [] = any.")
class DeviceFilter:
    device_id: list[str] | None = strawberry.field(default=None, description="device ids")
    environment: list[str] | None = strawberry.field(default=None, description="environments")
    provider: list[str] | None = strawberry.field(default=None, description="providers")
    account: list[str] | None = strawberry.field(default=None, description="accounts")
    region: list[str] | None = strawberry.field(default=None, description="regions / sites")
    cluster: list[str] | None = strawberry.field(default=None, description="clusters")
    node: list[str] | None = strawberry.field(default=None, description="nodes")
    gpu_model: list[str] | None = strawberry.field(default=None, description="GPU models")
    instance_type: list[str] | None = strawberry.field(default=None, description="instance types")
    vendor: list[str] | None = strawberry.field(default=None, description="vendors")
    source: list[str] | None = strawberry.field(default=None, description="connector instances")


@strawberry.type(description="Health and progress of one connector instance.")
class Connector:
    name: str = strawberry.field(description="Configured connector name.")
    type: str = strawberry.field(description="Connector type (entry-point name).")
    status: str = strawberry.field(description=_STATUS_DESCRIPTION)
    watermark: dt.datetime | None = strawberry.field(description="Ingested up to here (UTC).")
    last_run_at: dt.datetime | None = strawberry.field(description="Last run started (UTC).")
    last_success_at: dt.datetime | None = strawberry.field(description="Last successful run (UTC).")
    last_error: str | None = strawberry.field(
        description="Last error message, if the last run failed, or why it is DEGRADED."
    )
    last_run_findings: int | None = strawberry.field(
        default=None,
        description="Data-quality findings of the last finished run: rows it imported although they "
        "break a rule (dataQuality lists them); null before the first run.",
    )
    notice: str | None = strawberry.field(
        description="What the last run imported but the operator should know, e.g. billing lines in"
        " currencies without an FX rate to the main one."
    )

    @classmethod
    def of(cls, s: ConnectorState, findings: int | None = None) -> Connector:
        names = set(cls.__annotations__)
        return cls(**{k: v for k, v in s.model_dump().items() if k in names}, last_run_findings=findings)


@strawberry.type
class DeviceQuery:
    @strawberry.field(
        description="Devices ordered by deviceId, a page at a time. `first` above the server's page "
        "size limit (default 500) is the error PAGE_SIZE_TOO_LARGE, never silently clamped. A caller "
        "scoped to projects or teams sees the devices they held in the ledger."
    )
    async def devices(
        self,
        info: Info[ApiContext, None],
        filter: Annotated[DeviceFilter | None, strawberry.argument(description="Device filter.")] = None,  # noqa: A002
        first: Annotated[int, strawberry.argument(description="Page size.")] = 50,
        after: Annotated[
            str | None, strawberry.argument(description="endCursor of the previous page.")
        ] = None,
        search: Annotated[
            str | None,
            strawberry.argument(
                description="Only devices whose id, node, instance id, cluster, region, account, instance "
                "type, GPU model or connector contains this text (case-insensitive, at most 200 "
                "characters; blank = any)."
            ),
        ] = None,
    ) -> DeviceConnection:
        ctx = info.context
        filters = {k: v for k, v in vars(filter).items() if v} if filter is not None else {}
        page = await ctx.read(
            lambda conn: analytics.devices_page(
                conn,
                filters,
                access=ctx.access,
                first=first,
                after=after,
                page_size_max=ctx.settings.page_size_max,
                search=search.strip() if search else None,
            )
        )
        edges = [
            DeviceEdge(cursor=analytics.encode_cursor(d.device_id), node=Device.of(d)) for d in page.devices
        ]
        return DeviceConnection(
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
        description="Every configured connector's status, watermark and last error (account-wide: "
        "needs the `read` scope, else FORBIDDEN)."
    )
    async def connectors(self, info: Info[ApiContext, None]) -> list[Connector]:
        access = info.context.access

        def read(conn: Connection) -> tuple[list[ConnectorState], dict[str, int]]:
            return analytics.connector_states(conn, access), analytics.last_run_findings(conn)

        states, findings = await info.context.read(read)
        return [Connector.of(s, findings.get(s.name)) for s in states]
