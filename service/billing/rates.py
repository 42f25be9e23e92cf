"""Cloud GPU-hour rates from the bill, and the ledger re-priced with them (docs/design.md §4).

:func:`reprice` makes the cost of every cloud GPU resource come from its billing lines:

* **GPU resource**: a ``resource_id`` with a line that has ``gpu_count > 0`` or ``is_gpu_sku``.
  Its cost for a charge span is *all* its lines of that span (GCP: the GPU SKU, core, RAM and
  local-SSD rows and their credits; AWS: usage, Savings Plan negation…) times ``gpu_cost_share``,
  rounded half-even to 1e-9 once. Billed GPU-hours ``B`` are ``Σ gpu_hours`` (only the GPU-SKU rows
  when the resource has any, so a GCP core row can never count as GPUs).
* **Which hours a span covers.** An hourly line covers its hour. A longer line (AWS/Azure daily)
  covers ``B / gpu_count`` instance-hours of its span: first the hours in which the ledger has the
  instance present, then the earliest other hours (the fixture README's "a run starts at the
  beginning of its day"); a fractional instance-hour goes to the last hour taken. Cost, billed and
  list amounts are split over those hours by GPU-hours with the largest-remainder rule, so the
  hours add up to the span exactly.
* **Per resource-hour** with metered presence ``P`` (Σ present GPU-hours of the instance's real
  devices): the rate is ``cost / max(B, P)`` per GPU-hour, so the ledger never exceeds the bill.
  The hour's cost is split over the device rows by present GPU-µs and, when ``B > P``, an
  *unmonitored spend* row (device ``<resource_id>/unmonitored``) gets the ``B − P`` part — again
  with the largest-remainder rule, so ``Σ ledger cost of the hour == the hour's bill share``
  exactly (docs/design.md §4 Conservation). The unmonitored row has ``present_s = (B − P) × 3600`` at
  ``gpu_fraction`` 1 (so ``gpuHours`` shows the billed-but-unseen GPU-hours), ``observed_s`` 0.
* **Rates** are stored as ``GpuRate`` rows (``billing``, precedence 10, scoped by instance id), one
  per resource and run of hours with equal rates; a metrics ingest that arrives later prices its
  rows with them (:mod:`service.pricing.apply`). Only :func:`reprice` keeps the unmonitored row
  and the exact remainders right, so the ingestor should call it after ingesting cloud metrics.
* **Owners of unmonitored spend**: no metric saw those GPU-hours, so no workload names an owner;
  the bill's tags of the instance do (:mod:`service.billing.tags`: ``cloud.tag:<key>`` facts). The
  ``[[attribution]]`` rules give the unmonitored rows their project, team, user and ``owner_rule``
  from them, and the pseudo-device keeps them as its ``tags`` (``gpu-ledger reattribute`` reads
  them there). The metered rows of a billed instance see the same facts under the device's own
  tags (ingest and ``reattribute``); a bill that comes after the metrics re-applies the rules to
  its window.
* **Held by the instance**: where ``[[attribution]]`` rules are configured, the GPU-hours of an
  instance its bill tags that no workload held — its unmonitored rows and its metered rows with
  workload ``''`` alike — are *held* by the instance itself (workload ``cloud:<resource_id>``):
  rented whole by whoever its tags name, so their cost is that owner's, not the unallocated
  pool's (where answers null every workload dimension), whether or not metrics have arrived. An
  untagged instance's, and every instance's without rules, stay unallocated (``''``) as before;
  a re-pricing that finds an instance no longer held gives its rows back to the pool. Held or not
  is decided here, at re-pricing, never by ``reattribute`` (which only names owners).
* **Not GPU cost**: lines without a resource (unused RIs/Savings Plans, account credits, tax) and
  resources without GPUs (EBS, disks). Unused commitments are reported by reconciliation.

Idempotent: the window is widened to whole charge spans, its billing rates and unmonitored rows are
replaced, and every device row is priced from scratch, so running it twice equals running it once.
Rows priced from the bill by an earlier run whose lines have gone are priced again from the other
rates (rate cards), else left unpriced. The daily rollup is rebuilt for every touched day.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import polars as pl
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    bindparam,
    case,
    func,
    insert,
    null,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy import column as sql_column
from sqlalchemy import table as sql_table

from connectors.sdk.shapes import DEVICE
from connectors.sdk.vendors import vendor_expr
from service.attribution import OWNER_COLUMNS, AttributionRule
from service.attribution.reattribute import reattribute
from service.billing.catalog import InstanceCatalog, bundled_catalog
from service.billing.tags import resource_owners
from service.dbtypes import table_of
from service.ledger import bulk, partitions, store
from service.models import BillingLine, Device, GpuRate, LedgerHour
from service.money import Money, Quantity, from_nanos, to_nanos
from service.pricing.apply import INPUT_COLUMNS, PriceBook, price_rows
from service.pricing.common import PricingError
from service.pricing.rates import BILLING_KIND, BILLING_PRECEDENCE
from service.timeutil import ceil_hour, floor_hour, hour_index, hour_start

UNMONITORED_SUFFIX = "/unmonitored"
#: Workload key of a tagged instance's unmonitored spend: the instance itself held its GPUs.
CLOUD_WORKLOAD = "cloud:"
US_PER_HOUR = 3_600_000_000
_FRACTION_DENOMINATOR = 1000  # as service.pricing.apply: MIG k/7 stays exact

_LINE = table_of(BillingLine)
_HOUR = table_of(LedgerHour)
#: Sets one ledger row's price (executemany over ``_id``/``_cost``/``_idle``/``_cur``/``_src``).
_SET_PRICE = (
    update(_HOUR)
    .where(_HOUR.c.id == bindparam("_id"))
    .values(
        cost=bindparam("_cost"),
        idle_cost=bindparam("_idle"),
        energy_cost=None,
        currency=bindparam("_cur"),
        rate_source=bindparam("_src"),
    )
)
_RATE = table_of(GpuRate)
_DEVICE = table_of(Device)
#: What a bill says about an unmonitored instance's pseudo-device (the rest stays unknown).
BILLED_DEVICE_ATTRIBUTES = tuple(a.name for a in DEVICE if a.billed)


def unmonitored_device_id(resource_id: str) -> str:
    return f"{resource_id}{UNMONITORED_SUFFIX}"


def is_unmonitored(column: ColumnElement[str]) -> ColumnElement[bool]:
    """SQL: the row is an unmonitored-spend row (its device id ends with ``/unmonitored``)."""
    return column.like(f"%{UNMONITORED_SUFFIX}")


@dataclass(frozen=True)
class RepriceResult:
    """What one :func:`reprice` did, over the widened window ``[start, end)``."""

    start: dt.datetime
    end: dt.datetime
    resources: int
    rates: int
    device_rows: int
    unmonitored_rows: int


@dataclass
class _Span:
    """One resource's lines of one charge span, summed in SQL."""

    resource: str
    provider: str
    account: str | None
    region: str | None
    instance_type: str | None
    source: str
    h0: int
    h1: int
    currency: str
    effective: Decimal
    billed: Decimal
    list_cost: Decimal | None
    gpu_hours: Decimal
    gpu_count: int | None


@dataclass
class _Resource:
    provider: str
    account: str | None = None
    region: str | None = None
    instance_type: str | None = None
    gpu_model: str | None = None


def allocate_nanos(total: int, weights: Sequence[Fraction]) -> list[int]:
    """``total`` nanos split over non-negative ``weights`` (largest remainder, ties to the first):
    :func:`service.money.allocate` in exact integer/rational arithmetic. All-zero weights: evenly."""
    if not weights:
        return []
    if sum(weights) == 0:
        weights = [Fraction(1)] * len(weights)
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    floors = [e.numerator // e.denominator for e in exact]
    leftover = total - sum(floors)
    order = sorted(range(len(exact)), key=lambda i: (exact[i] - floors[i], -i), reverse=True)
    for i in order[:leftover]:
        floors[i] += 1
    return floors


def _gpu_resources(conn: Connection, start: dt.datetime, end: dt.datetime) -> list[str]:
    gpu = or_(_LINE.c.gpu_count > 0, _LINE.c.is_gpu_sku.is_(True))
    stmt = (
        select(_LINE.c.resource_id)
        .where(_LINE.c.charge_start < end, _LINE.c.charge_end > start, _LINE.c.resource_id.is_not(None), gpu)
        .distinct()
    )
    return sorted(conn.execute(stmt).scalars())


def _widen(
    conn: Connection, start: dt.datetime, end: dt.datetime
) -> tuple[dt.datetime, dt.datetime, list[str]]:
    """The window grown to whole charge spans of the GPU resources it touches (a fixed point)."""
    while True:
        resources = _gpu_resources(conn, start, end)
        if not resources:
            return start, end, resources
        lo, hi = conn.execute(
            select(func.min(_LINE.c.charge_start), func.max(_LINE.c.charge_end)).where(
                _LINE.c.charge_start < end, _LINE.c.charge_end > start, _LINE.c.resource_id.in_(resources)
            )
        ).one()
        new_start, new_end = min(start, floor_hour(lo)), max(end, ceil_hour(hi))
        if (new_start, new_end) == (start, end):
            return start, end, resources
        start, end = new_start, new_end


def _spans(conn: Connection, start: dt.datetime, end: dt.datetime, resources: list[str]) -> list[_Span]:
    c = _LINE.c
    gpu_sku = c.is_gpu_sku.is_(True)
    stmt = (
        select(
            c.resource_id,
            c.charge_start,
            c.charge_end,
            c.currency,
            func.max(c.provider).label("provider"),
            func.max(c.account).label("account"),
            func.max(c.region).label("region"),
            func.max(c.instance_type).label("instance_type"),
            func.min(c.source).label("source"),
            type_coerce(func.sum(c.effective_cost), Money).label("effective"),
            type_coerce(func.sum(c.billed_cost), Money).label("billed"),
            type_coerce(func.sum(c.list_cost), Money).label("list_cost"),
            func.count(c.list_cost).label("n_list"),
            func.count().label("n"),
            type_coerce(func.coalesce(func.sum(c.gpu_hours), 0), Quantity).label("gpu_hours"),
            type_coerce(func.coalesce(func.sum(case((gpu_sku, c.gpu_hours), else_=0)), 0), Quantity).label(
                "sku_gpu_hours"
            ),
            func.max(case((gpu_sku, 1), else_=0)).label("has_sku"),
            func.max(c.gpu_count).label("gpu_count"),
        )
        .where(c.charge_start < end, c.charge_end > start, c.resource_id.in_(resources))
        .group_by(c.resource_id, c.charge_start, c.charge_end, c.currency)
        .order_by(c.resource_id, c.charge_start, c.charge_end, c.currency)
    )
    rows = conn.execute(stmt).all()
    sku_resources = {r.resource_id for r in rows if r.has_sku}
    spans = []
    for r in rows:
        h0 = hour_index(floor_hour(r.charge_start))
        h1 = max(hour_index(ceil_hour(r.charge_end)), h0 + 1)
        spans.append(
            _Span(
                resource=r.resource_id,
                provider=r.provider,
                account=r.account,
                region=r.region,
                instance_type=r.instance_type,
                source=r.source,
                h0=h0,
                h1=h1,
                currency=r.currency,
                effective=r.effective,
                billed=r.billed,
                list_cost=r.list_cost if r.n_list == r.n else None,
                gpu_hours=r.sku_gpu_hours if r.resource_id in sku_resources else r.gpu_hours,
                gpu_count=r.gpu_count,
            )
        )
    return spans


def _device_rows(conn: Connection, start_h: int, end_h: int, resources: list[str]) -> pl.DataFrame:
    """The billed instances' metered device rows of the window, in id order (remainder ties go to
    the lower id): ``p_us``/``i_us`` present and idle µs, ``gpu_fraction``."""
    c = _HOUR.c
    stmt = (
        select(c.id, c.instance_id, c.hour_index, c.hour_start, c.present_s, c.idle_s, c.gpu_fraction)
        .where(
            c.hour_index >= start_h,
            c.hour_index < end_h,
            c.instance_id.in_(resources),
            ~is_unmonitored(c.device_id),
        )
        .order_by(c.id)
    )
    rows = conn.execute(stmt).all()
    schema: dict[str, pl.DataType] = {
        "id": pl.Int64(), "resource": pl.String(), "h": pl.Int64(), "hour_start": _UTC,
        "present_s": pl.Float64(), "idle_s": pl.Float64(), "gpu_fraction": pl.Float64(),
    }  # fmt: skip
    return pl.DataFrame([tuple(r) for r in rows], schema=schema, orient="row").with_columns(
        p_us=(pl.col("present_s") * 1e6).round(0).cast(pl.Int64).clip(lower_bound=0),
        i_us=(pl.col("idle_s").fill_null(0.0) * 1e6).round(0).cast(pl.Int64).clip(lower_bound=0),
    )


def _fraction(value: float) -> Fraction:
    return Fraction(value).limit_denominator(_FRACTION_DENOMINATOR)


# --- exact integer arithmetic on columns --------------------------------------------------------
#
# Every GPU-µs quantity is an Int128 count of 1/K µs, K (``scale``) chosen so each one is whole:
# a device row weighs ``p_us × gpu_fraction`` (a fraction n/d, d ≤ 1000, as service.pricing.apply
# reads it), a span's billed GPU-hours are whole nano-GPU-hours G, so G × 3.6e9 / 1e9 µs = 18·G/5;
# spread evenly over n hours, 18·G/(5n). K = lcm(5, every d, 5n of every evenly spread span).
# Largest remainder and half-even rounding are then integer floor division and remainders, equal
# to the rational arithmetic of :func:`allocate_nanos` and ``_round_half_even``.

_I128 = pl.Int128
_UTC = pl.Datetime("us", "UTC")
_NANO_GPU_HOUR = 10**9
#: |products| stay below this (Int128 holds 2^127): beyond it, the exact Python path.
_SAFE = 2**125


def _half_even(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """``numerator / denominator`` (``denominator`` > 0) rounded half to even, as integers."""
    q = numerator // denominator
    twice = (numerator - q * denominator) * 2
    up = (twice > denominator) | ((twice == denominator) & (q % 2 == 1))
    return q + up.cast(_I128)


def _allocate(
    frame: pl.DataFrame, group: list[str], totals: list[str], weight: str, order: str
) -> pl.DataFrame:
    """Each ``totals`` column (one value per group, null: null parts) split over the group's rows
    by ``weight`` (≥ 0; all zero: evenly) with the largest-remainder rule, remainder ties to the
    lowest ``order`` — :func:`allocate_nanos` per group. Adds ``<total>_part``; keeps row order."""
    w = pl.col(weight)
    frame = frame.with_columns(
        _w=pl.when(w.sum().over(group) == 0).then(pl.lit(1, _I128)).otherwise(w).cast(_I128),
        _row=pl.int_range(pl.len(), dtype=pl.Int64),
    ).with_columns(_s=pl.col("_w").sum().over(group))
    for total in totals:
        t = pl.col(total).cast(_I128)
        frame = frame.with_columns(_fl=(t * pl.col("_w")) // pl.col("_s")).with_columns(
            _rem=t * pl.col("_w") - pl.col("_fl") * pl.col("_s"),
            _left=t - pl.col("_fl").sum().over(group),
        )
        frame = frame.sort([*group, "_rem", order], descending=[*(False for _ in group), True, False])
        rank = pl.int_range(pl.len(), dtype=pl.Int64).over(group).cast(_I128)
        frame = frame.with_columns(
            (pl.col("_fl") + (rank < pl.col("_left")).cast(_I128)).alias(f"{total}_part")
        ).sort("_row")
    return frame.drop("_w", "_row", "_s", "_fl", "_rem", "_left", strict=False)


def _lcm(values: object) -> int:
    out = 1
    for v in values:  # type: ignore[attr-defined]
        out = math.lcm(out, int(v))
    return out


def _span_frame(spans: list[_Span], share: Decimal) -> pl.DataFrame:
    """The spans as columns: money ``× share`` as nanos (rounded half-even once, as before) and
    billed GPU-hours as whole nano-GPU-hours. One Python step per span for the Decimal products."""

    def nanos(values: list[Decimal | None]) -> list[int | None]:
        return [None if v is None else to_nanos(v * share) for v in values]

    gpu = [to_nanos(s.gpu_hours) for s in spans]
    if any(Decimal(g).scaleb(-9) != s.gpu_hours for g, s in zip(gpu, spans, strict=True)):
        raise PricingError("billed GPU-hours finer than 1e-9 cannot be priced exactly")  # Quantity's scale
    return pl.DataFrame(
        {
            "span": range(len(spans)),
            "resource": [s.resource for s in spans],
            "h0": [s.h0 for s in spans],
            "h1": [s.h1 for s in spans],
            "currency": [s.currency for s in spans],
            "source": [s.source for s in spans],
            "eff": nanos([s.effective for s in spans]),
            "billed": nanos([s.billed for s in spans]),
            "list": nanos([s.list_cost for s in spans]),
            "G": gpu,
            "g": [s.gpu_count for s in spans],
        },
        schema={"span": pl.Int64, "resource": pl.String, "h0": pl.Int64, "h1": pl.Int64,
                "currency": pl.String, "source": pl.String, "eff": _I128, "billed": _I128,
                "list": _I128, "G": _I128, "g": pl.Int64},
    )  # fmt: skip


def _resources_frame(spans: list[_Span], catalog: InstanceCatalog) -> pl.DataFrame:
    """Per resource, what its unmonitored rows say: the first span's provider, the first non-empty
    account, region and instance type (spans in order), the catalog's GPU model of that type."""
    book: dict[str, _Resource] = {}
    for span in spans:
        res = book.setdefault(span.resource, _Resource(span.provider))
        res.account = res.account or span.account
        res.region = res.region or span.region
        res.instance_type = res.instance_type or span.instance_type
    for res in book.values():
        entry = catalog.get(res.instance_type)
        res.gpu_model = entry.gpu_model if entry else None
    return pl.DataFrame(
        [(k, r.provider, r.account, r.region, r.instance_type, r.gpu_model) for k, r in book.items()],
        schema=dict.fromkeys(
            ["resource", "provider", "account", "region", "instance_type", "gpu_model"], pl.String
        ),
        orient="row",
    )


@dataclass(frozen=True)
class _Priced:
    """What re-pricing computed: device rows' new prices, unmonitored rows, rate runs."""

    updates: pl.DataFrame  # id, hour_start, cost (nanos), idle_cost (nanos), currency, rate_source
    unmonitored: pl.DataFrame  # resource, h, cost (nanos), gap (1/scale µs), currency, source, rate_source
    rates: pl.DataFrame  # runs of equal rates: resource, start_h, end_h, r_eff, r_billed, r_list, …
    scale: int
    resources: int


def _price(spans: list[_Span], devices: pl.DataFrame, share: Decimal) -> _Priced:
    """The bill's share per resource-hour and its split over device rows, column-wise."""
    frame = _span_frame(spans, share)
    fractions = {f: _fraction(f) for f in devices["gpu_fraction"].unique().to_list()}
    lengths = (
        frame.filter(pl.col("h1") - pl.col("h0") > 1)["h1"]
        - frame.filter(pl.col("h1") - pl.col("h0") > 1)["h0"]
    )
    scale = _lcm(
        [5, *(f.denominator for f in fractions.values()), *(5 * n for n in lengths.unique().to_list())]
    )
    frac = pl.DataFrame(
        {"gpu_fraction": list(fractions), "_fn": [f.numerator for f in fractions.values()],
         "_fd": [f.denominator for f in fractions.values()]},
        schema={"gpu_fraction": pl.Float64, "_fn": _I128, "_fd": _I128},
    )  # fmt: skip
    devices = devices.join(frac, on="gpu_fraction", how="left", maintain_order="left").with_columns(
        w=pl.col("p_us").cast(_I128) * pl.col("_fn") * (pl.lit(scale, _I128) // pl.col("_fd"))
    )
    present = devices.group_by("resource", "h").agg(P=pl.col("w").sum(), rows=pl.len())

    # --- spans → hours (module docstring: which hours a span covers)
    n = pl.col("h1") - pl.col("h0")
    hours = (
        frame.with_columns(h=pl.int_ranges("h0", "h1"))
        .explode("h")
        .join(present.select("resource", "h", "P"), on=["resource", "h"], how="left", maintain_order="left")
        .with_columns(pres=pl.col("P").fill_null(0) > 0, n=n)
    )
    g_nano = pl.col("g").cast(_I128) * _NANO_GPU_HOUR
    single = pl.col("n") == 1
    greedy = ~single & (pl.col("G") > 0) & pl.col("g").is_not_null() & (pl.col("g") != 0)
    greedy = greedy & (pl.col("G") <= g_nano * pl.col("n").cast(_I128))
    even = ~single & ~greedy & (pl.col("G") > 0)
    pres_i = pl.col("pres").cast(pl.Int64)
    position = (
        pl.when(pl.col("pres"))
        .then(pres_i.cum_sum().over("span") - 1)
        .otherwise(pres_i.sum().over("span") + (1 - pres_i).cum_sum().over("span") - 1)
    )
    left = pl.col("G") - position.cast(_I128) * g_nano
    hours = hours.with_columns(
        kind=pl.when(single).then(0).when(greedy).then(1).when(even).then(2).otherwise(3),
        left=left,
        g_nano=g_nano,
    )
    any_present = pl.col("pres").any().over("span")
    hours = hours.filter(
        pl.when(pl.col("kind") == 1)
        .then(pl.col("left") > 0)
        .when(pl.col("kind") == 3)
        .then(pl.col("pres") | ~any_present)
        .otherwise(True)
    )
    k = pl.lit(scale, _I128)
    hours = hours.with_columns(
        weight=pl.when(pl.col("kind") == 1)
        .then(pl.min_horizontal("g_nano", "left"))
        .otherwise(pl.lit(1, _I128)),
        b=pl.when(pl.col("kind") == 0)
        .then(pl.col("G") * 18 * k // 5)
        .when(pl.col("kind") == 1)
        .then(pl.min_horizontal("g_nano", "left") * 18 * k // 5)
        .when(pl.col("kind") == 2)
        .then(pl.col("G") * 18 * k // (5 * pl.col("n").cast(_I128)))
        .otherwise(pl.lit(0, _I128)),
    )
    _check_magnitude(hours, ["span"], ["eff", "billed", "list"], "weight")
    hours = _allocate(hours, ["span"], ["eff", "billed", "list"], "weight", "h")

    # --- per resource-hour: the bill's share (one currency), billed GPU-µs
    clash = hours.with_columns(first=pl.col("currency").sort_by("span").first().over("resource", "h")).filter(
        pl.col("currency") != pl.col("first")
    )
    if clash.height:
        row = clash.sort("span", "h").row(0, named=True)
        raise PricingError(
            f"billing lines of resource {row['resource']!r} are in {row['first']} and {row['currency']} for "
            f"the same hour; a GPU resource must be billed in one currency"
        )
    rh = (
        hours.group_by("resource", "h")
        .agg(
            B=pl.col("b").sum(),
            eff=pl.col("eff_part").sum(),
            billed=pl.col("billed_part").sum(),
            list=pl.when(pl.col("list_part").null_count() == 0).then(pl.col("list_part").sum()),
            currency=pl.col("currency").first(),
            source=pl.col("source").min(),
        )
        .join(present, on=["resource", "h"], how="left")
        .with_columns(P=pl.col("P").fill_null(pl.lit(0, _I128)), rows=pl.col("rows").fill_null(0))
        .with_columns(
            gap=pl.when(pl.col("B") > pl.col("P")).then(pl.col("B") - pl.col("P")).otherwise(pl.lit(0, _I128))
        )
        .with_columns(
            extra=(pl.col("gap") > 0)
            | ((pl.col("rows") == 0) & ((pl.col("eff") != 0) | (pl.col("billed") != 0))),
            rate_source=pl.lit(f"{BILLING_KIND}:") + pl.col("source"),
        )
        .sort("resource", "h")
    )

    # --- the hour's share over its device rows (by present GPU-µs) and the unmonitored gap
    parts = pl.concat(
        [
            devices.join(rh.select("resource", "h", "eff"), on=["resource", "h"], how="inner").select(
                "resource", "h", "id", "w", "eff", order="id"
            ),
            rh.filter("extra").select(
                "resource",
                "h",
                pl.lit(None, pl.Int64).alias("id"),
                pl.col("gap").alias("w"),
                "eff",
                order=pl.lit(2**62, pl.Int64),
            ),
        ]
    )
    _check_magnitude(parts, ["resource", "h"], ["eff"], "w")
    parts = _allocate(parts, ["resource", "h"], ["eff"], "w", "order")
    device_parts = parts.filter(pl.col("id").is_not_null()).join(
        devices.select("id", "hour_start", "p_us", "i_us"), on="id", how="left", maintain_order="left"
    )
    p = pl.col("p_us").cast(_I128)
    idle = pl.when(p > 0).then(
        _half_even(pl.col("eff_part") * pl.min_horizontal("i_us", "p_us").cast(_I128), p)
    )
    labels = rh.select("resource", "h", "currency", "rate_source")
    cost = pl.col("eff_part").alias("cost")
    updates = device_parts.join(labels, on=["resource", "h"], how="left", maintain_order="left").select(
        "id", "hour_start", cost, idle.fill_null(0).alias("idle_cost"), "currency", "rate_source"
    )
    unmonitored = (
        parts.filter(pl.col("id").is_null())
        .select("resource", "h", pl.col("eff_part").alias("cost"))
        .join(rh.select("resource", "h", "gap", "currency", "source", "rate_source"), on=["resource", "h"])
        .sort("resource", "h")
    )

    # --- rates: effective, billed and list per GPU-hour of max(B, P); runs of equal rates
    denominator = pl.max_horizontal("B", "P")
    per_hour = pl.lit(US_PER_HOUR * scale, _I128)

    def rate(column: str) -> pl.Expr:
        return pl.when((denominator > 0) & pl.col(column).is_not_null()).then(
            _half_even(pl.col(column) * per_hour, denominator)
        )

    per_hour_rh = rh.with_columns(_one=pl.lit(US_PER_HOUR * scale, _I128))
    _check_magnitude(per_hour_rh, ["resource", "h"], ["eff", "billed", "list"], "_one")
    priced = rh.with_columns(r_eff=rate("eff"), r_billed=rate("billed"), r_list=rate("list")).filter(
        pl.col("r_eff").is_not_null()
    )
    key = ["r_eff", "r_billed", "r_list", "currency", "source"]
    same = pl.all_horizontal(*(pl.col(c).eq_missing(pl.col(c).shift(1)) for c in key))
    new_run = (pl.col("resource") != pl.col("resource").shift(1)).fill_null(True) | ~same.fill_null(False)
    new_run = new_run | (pl.col("h") != pl.col("h").shift(1) + 1).fill_null(True)
    runs = (
        priced.with_columns(run=new_run.cum_sum())
        .group_by("run", maintain_order=True)
        .agg(
            pl.col("resource").first(),
            pl.col("h").min().alias("start_h"),
            (pl.col("h").max() + 1).alias("end_h"),
            *(pl.col(c).first() for c in key),
        )  # fmt: skip
    )
    providers = pl.DataFrame(
        _first_providers(spans), schema={"resource": pl.String, "provider": pl.String}, orient="col"
    )
    rates = runs.join(providers, on="resource", how="left", maintain_order="left").drop("run")
    return _Priced(updates, unmonitored, rates, scale, frame["resource"].n_unique())


def _first_providers(spans: list[_Span]) -> tuple[list[str], list[str]]:
    first: dict[str, str] = {}
    for span in spans:
        first.setdefault(span.resource, span.provider)
    return list(first), list(first.values())


def _float(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.Float64)


def _hour_start(h: pl.Expr) -> pl.Expr:
    """Hour index → its start, UTC (as ``service.timeutil.hour_start``)."""
    return pl.from_epoch(h * 3600, time_unit="s").dt.replace_time_zone("UTC").dt.cast_time_unit("us")


def _check_magnitude(frame: pl.DataFrame, group: list[str], totals: list[str], weight: str) -> None:
    """The Int128 products stay exact: per group, |total| × Σ|weights| below 2^125 (amounts beyond
    10^24 nanos with GPU fractions of many different denominators could pass it); else refuse."""
    if frame.is_empty():
        return
    bounds = frame.group_by(group).agg(
        (
            pl.col(weight).cast(pl.Float64).abs().sum().clip(lower_bound=1.0)
            * pl.col(t).cast(pl.Float64).abs().max()
        )
        .fill_null(0.0)
        .alias(t)
        for t in totals
    )
    if any((bounds[t].max() or 0.0) >= float(_SAFE) for t in totals):  # type: ignore[operator]
        raise PricingError(
            "billing amounts or GPU fractions too large to re-price exactly in 128-bit integers"
        )


#: The largest |rate| in nanos per GPU-hour that a money column holds on every database: SQLite keeps
#: nanos in a signed 64-bit integer (PostgreSQL's NUMERIC(24, 9) holds more).
MAX_RATE_NANOS = 2**63 - 1


def rate_overflow_message(resource: str, start_h: int) -> str:
    """The refusal of a bill whose rate per GPU-hour no money column can hold — GPU-hours tiny for
    the line's cost (1e-9 GPU-hours costing $17 is $17 billion per GPU-hour)."""
    return (
        f"{resource}: the bill's rate per GPU-hour from {hour_start(start_h):%Y-%m-%dT%H:%MZ} exceeds "
        f"{from_nanos(MAX_RATE_NANOS)} (its GPU-hours are too small for its cost); not re-priced"
    )


def check_rates_storable(runs: pl.DataFrame) -> None:
    """Refuse (a :class:`PricingError`, nothing written) rates no money column could store, naming
    the first such run by resource and start, instead of an integer overflow in the database."""
    if runs.is_empty():
        return
    rates = [c for c in ("r_eff", "r_billed", "r_list") if c in runs.columns]
    too_big = runs.filter(pl.any_horizontal(pl.col(c).abs() > MAX_RATE_NANOS for c in rates))
    if too_big.height:
        first = too_big.sort("resource", "start_h").row(0, named=True)
        raise PricingError(rate_overflow_message(first["resource"], first["start_h"]))


def reprice(
    engine: Engine,
    start: dt.datetime,
    end: dt.datetime,
    *,
    gpu_cost_share: Decimal | float | str = Decimal(1),
    catalog: InstanceCatalog | None = None,
    attribution_rules: Sequence[AttributionRule] = (),
) -> RepriceResult:
    """Price cloud GPU ledger hours in ``[start, end)`` (widened to whole charge spans) from the bill.

    One transaction: billing ``GpuRate`` rows and unmonitored-spend rows of the window are replaced,
    device rows of billed instances get their bill share, the day rollup is rebuilt.
    ``catalog`` (default: the bundled one) names the GPU model of unmonitored-spend rows;
    ``attribution_rules`` their owners, from the bill's tags.

    Column-wise: the bill's share per resource-hour, its split over device rows and the rates are
    Polars expressions over Int128 (exact: the same numbers as the rational arithmetic the module
    docstring states); the device rows' prices are written by one ``UPDATE … FROM`` a temporary
    table (loaded by ``COPY`` on PostgreSQL, one ``executemany`` on SQLite), the unmonitored rows by
    ``COPY``/one ``executemany``.
    """
    catalog = catalog or bundled_catalog()
    share = Decimal(str(gpu_cost_share)) if isinstance(gpu_cost_share, float) else Decimal(gpu_cost_share)
    if not 0 <= share <= 1:
        raise ValueError(f"gpu_cost_share must be within [0, 1], got {share}")
    start, end = floor_hour(start), ceil_hour(end)
    with engine.begin() as conn:
        start, end, resources = _widen(conn, start, end)
        start_h, end_h = hour_index(start), hour_index(end)
        spans = _spans(conn, start, end, resources) if resources else []
        devices = _device_rows(conn, start_h, end_h, resources)
        priced = _price(spans, devices, share)
        billed = _resources_frame(spans, catalog)
        owners = resource_owners(conn, billed["resource"].to_list(), start, end, attribution_rules)
        held = _held(owners, attribution_rules).select("resource", pl.lit(True).alias("held"))
        unmonitored = _unmonitored_rows(
            priced, billed.join(owners, on="resource", how="left").join(held, on="resource", how="left")
        )

        check_rates_storable(priced.rates)
        _replace_rates(conn, start, end, priced.rates)
        conn.execute(
            _HOUR.delete().where(
                _HOUR.c.hour_index >= start_h, _HOUR.c.hour_index < end_h, is_unmonitored(_HOUR.c.device_id)
            )
        )
        _set_prices(conn, priced.updates)
        _hold_by_instances(conn, start_h, end_h, _held(owners, attribution_rules)["resource"].to_list())
        if unmonitored.height:
            _insert_hours(conn, unmonitored)
            _upsert_devices(conn, unmonitored, _tags_of(owners))
        _reprice_orphans(conn, start_h, end_h)
        if conn.dialect.name == "sqlite":  # PostgreSQL drops it at commit
            conn.exec_driver_sql(f"DELETE FROM temp.{_PRICED}")
        if end_h > start_h:
            store.rebuild_days(conn, start_h // 24, (end_h - 1) // 24)
    if attribution_rules and resources:
        # the bill may have come after the metrics: the rules see its tags on the metered rows now
        # (service.billing.tags.with_bill_tags_frame); writes only the owners that change
        reattribute(engine, attribution_rules, start, end)
    return RepriceResult(
        start, end, priced.resources, priced.rates.height, priced.updates.height, unmonitored.height
    )


#: The temporary table the device rows' new prices go through (one ``UPDATE … FROM`` it).
_PRICED = "billing_repriced"


def _set_prices(conn: Connection, updates: pl.DataFrame) -> None:
    """``ledger_hour`` rows ``updates.id`` get their cost, idle cost, currency and rate source (and
    no energy cost) in one ``UPDATE … FROM`` a temporary table; the table keeps the ids for
    :func:`_reprice_orphans`."""
    dialect = conn.dialect.name
    frame = updates.select("id", "hour_start", "cost", "idle_cost", "currency", "rate_source")
    set_clause = (
        "cost = p.cost, idle_cost = p.idle_cost, energy_cost = NULL, currency = p.currency,"
        " rate_source = p.rate_source"
    )
    if dialect == "postgresql":
        conn.exec_driver_sql(
            f"CREATE TEMP TABLE IF NOT EXISTS {_PRICED} (id integer NOT NULL,"
            " hour_start timestamptz NOT NULL, cost numeric(24, 9), idle_cost numeric(24, 9),"
            " currency varchar(3), rate_source varchar(200))"
            " ON COMMIT DROP"
        )
        conn.exec_driver_sql(f"TRUNCATE {_PRICED}")
        bulk.copy_csv(
            conn,
            _PRICED,
            frame.with_columns(
                bulk.nanos_text("cost"), bulk.nanos_text("idle_cost"), bulk.pg_time("hour_start")
            ),
        )
        conn.exec_driver_sql(f"ANALYZE {_PRICED}")
        if frame.height:
            conn.exec_driver_sql(
                f"UPDATE ledger_hour AS h SET {set_clause} FROM {_PRICED} AS p"
                " WHERE h.id = p.id AND h.hour_start = p.hour_start"
            )
        return
    if dialect != "sqlite":
        raise PricingError(f"re-pricing supports PostgreSQL and SQLite, not {dialect}")
    conn.exec_driver_sql(
        f"CREATE TEMP TABLE IF NOT EXISTS {_PRICED} (id INTEGER PRIMARY KEY, hour_start TEXT,"
        " cost BIGINT, idle_cost BIGINT, currency VARCHAR(3), rate_source VARCHAR(200))"
    )
    conn.exec_driver_sql(f"DELETE FROM temp.{_PRICED}")
    if frame.height:
        bulk.insert_tuples(
            conn,
            f"{_PRICED}",
            frame.with_columns(pl.col("cost", "idle_cost").cast(pl.Int64), bulk.sqlite_time("hour_start")),
        )
        conn.exec_driver_sql(
            f"UPDATE ledger_hour AS h SET {set_clause} FROM temp.{_PRICED} AS p WHERE h.id = p.id"
        )


def _unmonitored_rows(priced: _Priced, resources: pl.DataFrame) -> pl.DataFrame:
    """The unmonitored-spend rows (module docstring) as ``ledger_hour`` columns, money in nanos."""
    rows = priced.unmonitored
    gaps = rows["gap"].unique().to_list()
    # as before: the gap's µs as the nearest float, then seconds rounded to the µs
    seconds = {g: round(float(Fraction(int(g), priced.scale)) / 1e6, 6) for g in gaps}
    present = pl.DataFrame({"gap": gaps, "present_s": [seconds[g] for g in gaps]},
                           schema={"gap": _I128, "present_s": pl.Float64})  # fmt: skip
    hour = _hour_start(pl.col("h"))
    tagged = pl.col("held").fill_null(False)
    return (
        rows.join(present, on="gap", how="left", maintain_order="left")
        .join(resources, on="resource", how="left", maintain_order="left")
        .select(
            "source",
            (pl.col("resource") + UNMONITORED_SUFFIX).alias("device_id"),
            pl.when(tagged)
            .then(CLOUD_WORKLOAD + pl.col("resource"))
            .otherwise(pl.lit(""))
            .alias("workload_key"),
            pl.col("provider").alias("environment"),
            "provider",
            "account",
            "region",
            pl.col("resource").alias("instance_id"),
            "instance_type",
            "gpu_model",
            vendor_expr("gpu_model").alias("vendor"),  # a bill names the model, not the vendor
            *OWNER_COLUMNS,
            pl.when(tagged).then(pl.col("resource")).alias("workload"),
            "owner_rule",
            pl.lit(1.0).alias("gpu_fraction"),
            pl.lit("sm_active").alias("default_metric"),
            "present_s",
            pl.col("cost"),
            pl.lit(0, _I128).alias("idle_cost"),
            "currency",
            "rate_source",
            hour.alias("hour_start"),
            pl.col("h").alias("hour_index"),
            (pl.col("h") // 24).alias("day_index"),
            ((hour.dt.year().cast(pl.Int64) - 1970) * 12 + hour.dt.month().cast(pl.Int64) - 1).alias(
                "month_index"
            ),
        )  # fmt: skip
    )


def _insert_hours(conn: Connection, rows: pl.DataFrame) -> None:
    """``rows`` into ``ledger_hour`` (COPY on PostgreSQL, one executemany on SQLite), each column
    the frame lacks at its column default, money from nanos as the column type binds it."""
    table = _HOUR
    given = set(rows.columns)
    defaults = []
    for column in table.columns:
        if column.name == "id" or column.name in given:
            continue
        default = column.default
        value = (
            getattr(default, "arg", None)
            if default is not None and getattr(default, "is_scalar", False)
            else None
        )
        defaults.append(pl.lit(value).alias(column.name))
    frame = rows.with_columns(defaults) if defaults else rows
    if conn.dialect.name == "postgresql":
        first, last = frame["hour_index"].min(), frame["hour_index"].max()
        assert isinstance(first, int) and isinstance(last, int), "unmonitored rows have hours"
        partitions.ensure_months(conn, first, last)
        bulk.copy_csv(
            conn,
            table.name,
            frame.with_columns(
                bulk.nanos_text("cost"), bulk.nanos_text("idle_cost"), bulk.pg_time("hour_start")
            ),
        )
    else:
        bulk.insert_tuples(
            conn,
            table.name,
            frame.with_columns(pl.col("cost", "idle_cost").cast(pl.Int64), bulk.sqlite_time("hour_start")),
        )


def _replace_rates(conn: Connection, start: dt.datetime, end: dt.datetime, runs: pl.DataFrame) -> None:
    """Billing rates overlapping the window are cut at its edges; the inside is replaced by one
    ``GpuRate`` per run of equal rates (written column-wise: COPY / one executemany)."""
    c = _RATE.c
    overlap = and_(
        c.source_kind == BILLING_KIND, c.valid_from < end, or_(c.valid_to.is_(None), c.valid_to > start)
    )
    crossing = or_(c.valid_from < start, c.valid_to.is_(None), c.valid_to > end)
    keep: list[dict[str, object]] = []
    for r in conn.execute(select(_RATE).where(overlap, crossing)).mappings():
        base = {k: v for k, v in r.items() if k != "id"}
        if r["valid_from"] < start:
            keep.append({**base, "valid_to": start})
        if r["valid_to"] is None or r["valid_to"] > end:
            keep.append({**base, "valid_from": end})
    conn.execute(_RATE.delete().where(overlap))
    if keep:
        conn.execute(insert(_RATE), keep)
    if runs.is_empty():
        return

    def at(h: str) -> pl.Expr:
        return (
            pl.from_epoch(pl.col(h) * 3600, time_unit="s").dt.replace_time_zone("UTC").dt.cast_time_unit("us")
        )

    frame = runs.select(
        pl.lit(BILLING_KIND).alias("source_kind"),
        pl.col("source").alias("source_ref"),
        pl.lit(BILLING_PRECEDENCE).alias("precedence"),
        pl.col("provider").alias("environment"),
        pl.col("resource").alias("instance_id"),
        pl.lit(None, pl.String).alias("instance_type"),
        pl.lit(None, pl.String).alias("gpu_model"),
        at("start_h").alias("valid_from"),
        at("end_h").alias("valid_to"),
        pl.col("r_eff").alias("effective_per_gpu_hour"),
        pl.col("r_billed").alias("billed_per_gpu_hour"),
        pl.col("r_list").alias("list_per_gpu_hour"),
        "currency",
    )
    money = ["effective_per_gpu_hour", "billed_per_gpu_hour", "list_per_gpu_hour"]
    if conn.dialect.name == "postgresql":
        bulk.copy_csv(
            conn,
            _RATE.name,
            frame.with_columns(
                *(pl.when(pl.col(m).is_not_null()).then(bulk.nanos_text(m)).alias(m) for m in money),
                bulk.pg_time("valid_from"),
                bulk.pg_time("valid_to"),
            ),
        )
    else:
        bulk.insert_tuples(
            conn,
            _RATE.name,
            frame.with_columns(
                pl.col(money).cast(pl.Int64), bulk.sqlite_time("valid_from"), bulk.sqlite_time("valid_to")
            ),
        )


def _held(owners: pl.DataFrame, rules: Sequence[AttributionRule]) -> pl.DataFrame:
    """The billed resources whose GPU-hours no workload held are held by the instance itself: those
    the bill tags, when ``[[attribution]]`` rules are configured (module docstring)."""
    if not rules:
        return owners.clear()
    return owners.filter(pl.col("facts").list.len() > 0)


def _hold_by_instances(conn: Connection, start_h: int, end_h: int, held: list[str]) -> None:
    """Metered rows of hours ``[start_h, end_h)`` that no workload held: those of ``held``
    instances become the instance's (workload ``cloud:<instance_id>``); those an earlier run gave
    an instance no longer held go back to the pool (workload ``''``, no owner). The rules name the
    owners afterwards (:func:`service.attribution.reattribute.reattribute`)."""
    c = _HOUR.c
    window = (
        c.hour_index >= start_h,
        c.hour_index < end_h,
        c.hour_start >= hour_start(start_h),  # partition pruning on PostgreSQL
        c.hour_start < hour_start(end_h),
        ~is_unmonitored(c.device_id),
    )
    was = set(
        conn.execute(
            select(c.instance_id).where(*window, c.workload_key.like(f"{CLOUD_WORKLOAD}%")).distinct()
        ).scalars()
    )
    back = sorted(was - set(held))
    pool = dict.fromkeys(("project", "team", "user_name", "owner_rule", "workload"))
    for first in range(0, len(back), 5000):
        chunk = back[first : first + 5000]
        conn.execute(
            update(_HOUR)
            .where(*window, c.workload_key.like(f"{CLOUD_WORKLOAD}%"), c.instance_id.in_(chunk))
            .values(workload_key="", **pool)
        )
    for first in range(0, len(held), 5000):
        chunk = held[first : first + 5000]
        conn.execute(
            update(_HOUR)
            .where(*window, c.workload_key == "", c.instance_id.in_(chunk))
            .values(workload_key=CLOUD_WORKLOAD + c.instance_id, workload=c.instance_id)
        )


def _tags_of(owners: pl.DataFrame) -> dict[str, dict[str, str]]:
    """Pseudo-device id → its bill's facts (one step per billed resource, not per row)."""
    return {
        unmonitored_device_id(resource): {f["key"]: f["value"] for f in facts}
        for resource, facts in owners.select("resource", "facts").iter_rows()
        if facts
    }


def _upsert_devices(conn: Connection, rows: pl.DataFrame, tags: Mapping[str, dict[str, str]]) -> None:
    """Register each unmonitored pseudo-device so it lists, groups and filters like a device (its
    attributes and source from its first row; first and last seen from its hours; ``tags``: the
    bill's facts about its instance)."""
    devices = rows.group_by("device_id", maintain_order=True).agg(
        *(pl.col(k).first() for k in (*BILLED_DEVICE_ATTRIBUTES, "source") if k != "device_id"),
        pl.col("hour_start").min().alias("_first"),
        (pl.col("hour_start").max() + dt.timedelta(hours=1)).alias("_last"),
    )
    existing = {
        r.device_id: r
        for r in conn.execute(
            select(_DEVICE).where(_DEVICE.c.device_id.in_(devices["device_id"].to_list()))
        ).all()
    }
    for d in devices.iter_rows(named=True):
        device_id, first, last = d.pop("device_id"), d.pop("_first"), d.pop("_last")
        values = d | {"gpu_fraction": 1.0, "tags": tags.get(device_id)}
        old = existing.get(device_id)
        if old is None:
            conn.execute(
                insert(_DEVICE).values(device_id=device_id, first_seen=first, last_seen=last, **values)
            )
        else:
            conn.execute(
                update(_DEVICE)
                .where(_DEVICE.c.device_id == device_id)
                .values(first_seen=min(old.first_seen, first), last_seen=max(old.last_seen, last), **values)
            )


def _reprice_orphans(conn: Connection, start_h: int, end_h: int) -> None:
    """Rows a previous run priced from the bill that no line covers now (not in this run's
    temporary table of prices): price them from the other rates (rate cards; the billing rates of
    this window are gone), else leave them unpriced."""
    c = _HOUR.c
    priced = sql_table(_PRICED, sql_column("id"), schema="temp" if conn.dialect.name == "sqlite" else None)
    stmt = select(c.id, *(c[n] if n in c else null().label(n) for n in INPUT_COLUMNS)).where(
        c.hour_index >= start_h,
        c.hour_index < end_h,
        c.rate_source.like(f"{BILLING_KIND}:%"),
        ~is_unmonitored(c.device_id),
        c.id.not_in(select(priced.c.id)),
    )
    rows = conn.execute(stmt).mappings().all()
    if not rows:
        return
    frame = pl.DataFrame([dict(r) for r in rows], infer_schema_length=None)
    priced_rows = price_rows(frame, _book(conn, start_h, end_h))
    params = [
        {
            "_id": r["id"],
            "_cost": None if r["cost_nanos"] is None else from_nanos(r["cost_nanos"]),
            "_idle": None if r["idle_cost_nanos"] is None else from_nanos(r["idle_cost_nanos"]),
            "_cur": r["currency"],
            "_src": r["rate_source"],
        }
        for r in priced_rows.iter_rows(named=True)
    ]
    conn.execute(_SET_PRICE, params)


def _book(conn: Connection, start_h: int, end_h: int) -> PriceBook:
    c = _RATE.c
    start, end = hour_start(start_h), hour_start(end_h)
    stmt = select(_RATE).where(c.valid_from < end, or_(c.valid_to.is_(None), c.valid_to > start))
    rates = [GpuRate.model_validate(dict(r)) for r in conn.execute(stmt).mappings()]
    return PriceBook.from_rates(rates)


def reprice_after_metrics(
    engine: Engine,
    start: dt.datetime,
    end: dt.datetime,
    *,
    gpu_cost_share: Decimal | float | str = Decimal(1),
    catalog: InstanceCatalog | None = None,
    attribution_rules: Sequence[AttributionRule] = (),
) -> RepriceResult | None:
    """After a metrics ingest of ``[start, end)``: re-price from the bill where one covers that
    time, so hours a bill had booked as unmonitored spend move to the GPUs now metered (a metric
    ingest alone prices new rows at the billing rate, but cannot take them out of the
    unmonitored rows). Nothing to do — and no transaction — where no billing line overlaps."""
    with engine.connect() as conn:
        billed = conn.execute(
            select(_LINE.c.id).where(_LINE.c.charge_start < end, _LINE.c.charge_end > start).limit(1)
        ).first()
    if billed is None:
        return None
    share, rules = gpu_cost_share, attribution_rules
    return reprice(engine, start, end, gpu_cost_share=share, catalog=catalog, attribution_rules=rules)
