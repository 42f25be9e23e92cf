"""Shared GraphQL types: Money, the enums, the window and filter inputs, the bucket interface."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from enum import Enum, auto
from typing import Annotated, Any, TypeVar, overload

import strawberry

from connectors.sdk.shapes import dimension
from service.analytics import dims
from service.analytics.access import Access
from service.analytics.paging import Page, binding_of
from service.analytics.query import GroupKey, LedgerQuery, collector_paused
from service.analytics.window import check_window
from service.api.context import ApiSettings


@strawberry.type(description="An exact amount of money.")
class Money:
    amount: str = strawberry.field(description='Decimal string, 9 decimal places, e.g. "12.500000000".')
    currency: str = strawberry.field(
        description="ISO 4217 code; XXX marks unpriced ledger time (its amount is always 0)."
    )

    @classmethod
    def of(cls, amount: Decimal, currency: str) -> Money:
        return cls(amount=format(amount, "f"), currency=currency)

    @classmethod
    def maybe(cls, amount: Decimal | None, currency: str) -> Money | None:
        return None if amount is None else cls.of(amount, currency)


@strawberry.enum(description="A ledger dimension to group or filter by.")
class Dimension(Enum):
    # Each value's description comes from connectors.sdk.shapes.DIMENSIONS; the members are written
    # out so code and type checkers can name them (tests/test_shapes_agree.py checks the lists).
    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[Any]) -> Any:
        return strawberry.enum_value(name, description=dimension(name).description)

    ENVIRONMENT = auto()
    PROVIDER = auto()
    ACCOUNT = auto()
    REGION = auto()
    CLUSTER = auto()
    NODE = auto()
    DEVICE = auto()
    GPU_MODEL = auto()
    VENDOR = auto()
    INSTANCE_TYPE = auto()
    PROJECT = auto()
    TEAM = auto()
    USER = auto()
    NAMESPACE = auto()
    WORKLOAD = auto()
    OWNER_RULE = auto()

    def domain(self) -> dims.Dimension:
        return dims.Dimension[self.value]


@strawberry.enum(description="Period buckets, all in UTC.")
class Granularity(Enum):
    HOUR = strawberry.enum_value("HOUR", description="UTC hours")
    DAY = strawberry.enum_value("DAY", description="UTC days")
    WEEK = strawberry.enum_value("WEEK", description="ISO weeks, starting Monday 00:00 UTC")
    MONTH = strawberry.enum_value("MONTH", description="calendar months")
    TOTAL = strawberry.enum_value("TOTAL", description="one bucket for the whole window (periodStart null)")

    def domain(self) -> dims.Granularity:
        return dims.Granularity[self.name]  # names are the values


@strawberry.enum(description="Utilization metric for effective and idle figures (docs/design.md §2).")
class UtilMetric(Enum):
    GPU_UTIL = strawberry.enum_value("gpu_util", description="nvidia-smi GPU util: any kernel running")
    SM_ACTIVE = strawberry.enum_value("sm_active", description="SM activity (GPM / DCGM PROF)")
    TENSOR_ACTIVE = strawberry.enum_value("tensor_active", description="tensor-pipe activity")
    MEM_BW = strawberry.enum_value("mem_bw", description="DRAM bandwidth utilization")


def metric_key(metric: UtilMetric | None) -> str | None:
    # The metric keys are the member names in lower case (strawberry types .value as its definition).
    return None if metric is None else metric.name.lower()


METRIC_DESCRIPTION = (
    "Metric used: SM_ACTIVE, GPU_UTIL, TENSOR_ACTIVE, MEM_BW, or SM_ACTIVE_ELSE_GPU_UTIL when the "
    "bucket mixes devices whose default metric differs."
)


@strawberry.input(description="A half-open window [start, end) of whole UTC hours.")
class TimeWindow:
    start: dt.datetime = strawberry.field(
        description="Inclusive start, ISO 8601 with offset (…Z); a whole UTC hour, else WINDOW_NOT_ALIGNED."
    )
    end: dt.datetime = strawberry.field(description="Exclusive end, a whole hour after start.")


@strawberry.input(description="Keep ledger rows whose values are among the given ones; null or [] = any.")
class LedgerFilter:
    environment: list[str] | None = strawberry.field(default=None, description="environments")
    provider: list[str] | None = strawberry.field(default=None, description="providers")
    account: list[str] | None = strawberry.field(default=None, description="accounts")
    region: list[str] | None = strawberry.field(default=None, description="regions / sites")
    cluster: list[str] | None = strawberry.field(default=None, description="clusters")
    node: list[str] | None = strawberry.field(default=None, description="nodes")
    device: list[str] | None = strawberry.field(default=None, description="device ids")
    gpu_model: list[str] | None = strawberry.field(default=None, description="GPU models")
    vendor: list[str] | None = strawberry.field(default=None, description="vendors")
    instance_type: list[str] | None = strawberry.field(default=None, description="instance types")
    project: list[str] | None = strawberry.field(default=None, description="projects")
    team: list[str] | None = strawberry.field(default=None, description="teams")
    user: list[str] | None = strawberry.field(default=None, description="users")
    namespace: list[str] | None = strawberry.field(default=None, description="namespaces")
    workload: list[str] | None = strawberry.field(default=None, description="workloads")
    owner_rule: list[str] | None = strawberry.field(
        default=None, description="[[attribution]] rules that named the owner ('source': the connector)"
    )
    unallocated: bool | None = strawberry.field(
        default=None, description="true: only time nobody held a device; false: only allocated time"
    )

    def domain(self) -> dims.LedgerFilter:
        values = {d: getattr(self, d.name.lower()) for d in dims.Dimension if getattr(self, d.name.lower())}
        return dims.LedgerFilter(values, self.unallocated)


def ledger_query(
    settings: ApiSettings,
    window: TimeWindow,
    granularity: Granularity,
    group_by: Sequence[Dimension],
    flt: LedgerFilter | None,
    *,
    access: Access,
) -> LedgerQuery:
    """A validated analytics query over the rows ``access`` may read (raises INVALID_WINDOW /
    WINDOW_TOO_LARGE / WINDOW_NOT_ALIGNED)."""
    return LedgerQuery(
        check_window(window.start, window.end, max_days=settings.max_window_days),
        granularity.domain(),
        tuple(d.domain() for d in group_by),
        flt.domain() if flt is not None else dims.NO_FILTER,
        access=access,
    )


def aggregate_page(settings: ApiSettings, field: str, first: int | None, after: str | None) -> Page:
    """The checked page of an aggregate answer (PAGE_SIZE_TOO_LARGE, INVALID_ARGUMENT), capped at
    ``max_result_rows`` when ``first`` is null."""
    return Page.of(
        field, first, after, page_size_max=settings.page_size_max, max_rows=settings.max_result_rows
    )


def ledger_page(
    settings: ApiSettings, field: str, q: LedgerQuery, first: int | None, after: str | None, *args: object
) -> Page:
    """The checked page of a ledger aggregate (``usage``, ``cost``, ``idleWaste``, ``effectiveCost``):
    ``first`` up to ``aggregate_page_size_max``, ``after`` a cursor this field handed out for the
    same query (``q`` but its caller, and the field's other arguments ``args``)."""
    binding = binding_of(field, q.window, q.granularity, q.group_by, q.filter, q.rollup, *args)
    return Page.of(
        field,
        first,
        after,
        page_size_max=settings.aggregate_page_size_max,
        max_rows=settings.max_result_rows,
        binding=binding,
    )


WINDOW = "The window [start, end), whole UTC hours, at most max_window_days long."
GROUP_BY = "Dimensions to group by; [] = one row per period."
GRANULARITY = "Period buckets."
FILTER = Annotated[
    LedgerFilter | None, strawberry.argument(description="Row filter (applied before idle policies).")
]
FIRST = Annotated[
    int | None,
    strawberry.argument(
        description="Rows to return (at most the page size limit, else PAGE_SIZE_TOO_LARGE); null = "
        "every row, refused with RESULT_TOO_LARGE above max_result_rows (default 10000). A page "
        "shorter than `first` is the last."
    ),
]
LEDGER_FIRST = Annotated[
    int | None,
    strawberry.argument(
        description="Rows to return (at most the aggregate page size limit, default 50000, else "
        "PAGE_SIZE_TOO_LARGE); null = every row, refused with RESULT_TOO_LARGE above max_result_rows "
        "(default 10000). A page shorter than `first` is the last. Each page reads only the groups "
        "after `after`, so paging through a large answer costs about as much as one answer."
    ),
]
AFTER = Annotated[
    str | None,
    strawberry.argument(
        description="The `cursor` of the last row received: the answer continues after it "
        "(INVALID_ARGUMENT for a cursor this field did not hand out for the same arguments)."
    ),
]
CURSOR = "Opaque position of this row in the answer's order: pass it as `after` for the next rows."
METRIC = Annotated[
    UtilMetric | None,
    strawberry.argument(
        description="Utilization metric; null = each device's default (SM activity, else GPU util)."
    ),
]

CURRENCY = Annotated[
    str | None,
    strawberry.argument(
        description="Convert money to this ISO 4217 currency through the FX table, per UTC day, as "
        "`cost` does (MISSING_FX_RATE names a missing pair and day; UNKNOWN_CURRENCY for unknown "
        "codes); null = one row per source currency."
    ),
]


@overload
def gql_float(value: float) -> float: ...
@overload
def gql_float(value: float | None) -> float | None: ...
def gql_float(value: float | None) -> float | None:
    """Rounded to 6 decimals (3.6 ms in an hour figure): sums of binary floats should not print as
    21503.999999999 when the ledger holds seconds to 1 µs."""
    return None if value is None else round(value, 6)


def dim_field(description: str) -> str | None:
    return strawberry.field(default=None, description=f"{description} (null unless grouped by it)")


@strawberry.interface(description="A flat result row: a period and the values of the grouped dimensions.")
class LedgerBucket:
    period_start: dt.datetime | None = strawberry.field(
        default=None,
        description="Start of the period (UTC); null for TOTAL. A period may begin before the window.",
    )
    environment: str | None = dim_field("environment")
    provider: str | None = dim_field("provider")
    account: str | None = dim_field("account")
    region: str | None = dim_field("region")
    cluster: str | None = dim_field("cluster")
    node: str | None = dim_field("node")
    device: str | None = dim_field("device id")
    gpu_model: str | None = dim_field("GPU model")
    vendor: str | None = dim_field("accelerator vendor")
    instance_type: str | None = dim_field("instance type")
    project: str | None = dim_field("project")
    team: str | None = dim_field("team")
    user: str | None = dim_field("user")
    namespace: str | None = dim_field("namespace")
    workload: str | None = dim_field("workload")
    owner_rule: str | None = dim_field("the [[attribution]] rule that named the owner")
    cursor: str = strawberry.field(description=CURSOR)


B = TypeVar("B", bound=LedgerBucket)
#: Every dimension field of a bucket, null unless grouped by it.
_DIM_FIELDS = frozenset(d.name.lower() for d in dims.Dimension)


@collector_paused
def bucket_objects(
    cls: type[B], keys: Sequence[GroupKey], cursors: Sequence[str], fields: dict[str, Sequence[Any]]
) -> list[B]:
    """Objects of the bucket type ``cls``, row ``i`` at ``keys[i]`` and ``cursors[i]`` with
    ``fields[name][i]`` for each of its other fields (all of them: TypeError otherwise).

    Built column by column, each instance's ``__dict__`` holding only its own values: the
    dimensions not grouped by are read from the class, whose attribute is the field's default
    (None). A dataclass ``__init__`` of some twenty keyword arguments cost ~10 µs a row; the
    collector is paused meanwhile (see :func:`collector_paused`).
    """
    dim_names = [d.name.lower() for d, _ in keys[0].dims] if keys else []
    names = ("period_start", "cursor", *dim_names, *fields)
    missing = set(cls.__dataclass_fields__) - set(names) - _DIM_FIELDS
    if missing or any(getattr(cls, name, 0) is not None for name in _DIM_FIELDS):
        raise TypeError(f"{cls.__name__} rows built without {sorted(missing)} or a null default")
    starts = [k.period_start for k in keys]
    dim_columns = [[k.dims[i][1] for k in keys] for i in range(len(dim_names))]
    new = object.__new__
    out: list[B] = []
    for values in zip(starts, cursors, *dim_columns, *fields.values(), strict=True):
        obj = new(cls)
        obj.__dict__ = dict(zip(names, values, strict=True))
        out.append(obj)
    return out
