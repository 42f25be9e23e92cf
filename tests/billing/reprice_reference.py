"""The re-pricing loop as it was before it was vectorized (service/billing/rates.py at be09d5c),
kept verbatim as the reference the vectorized :func:`service.billing.rates.reprice` must equal to
the nano (tests/billing/test_reprice_vectorized.py). Only this docstring is new, and the device
rows are read in id order (the old query had no ORDER BY; both implementations now break
remainder ties by id). Not used by the service.

Original module docstring follows.

Cloud GPU-hour rates from the bill, and the ledger re-priced with them (docs/design.md §4).

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
* **Not GPU cost**: lines without a resource (unused RIs/Savings Plans, account credits, tax) and
  resources without GPUs (EBS, disks). Unused commitments are reported by reconciliation.

Idempotent: the window is widened to whole charge spans, its billing rates and unmonitored rows are
replaced, and every device row is priced from scratch, so running it twice equals running it once.
Rows priced from the bill by an earlier run whose lines have gone are priced again from the other
rates (rate cards), else left unpriced. The daily rollup is rebuilt for every touched day.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
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

from connectors.sdk.shapes import DEVICE
from connectors.sdk.vendors import vendor_of
from service.billing.catalog import InstanceCatalog, bundled_catalog
from service.billing.rates import MAX_RATE_NANOS, rate_overflow_message
from service.dbtypes import table_of
from service.ledger import store
from service.ledger import version as ledger_version
from service.models import BillingLine, Device, GpuRate, LedgerHour
from service.money import Money, Quantity, from_nanos, to_nanos
from service.pricing.apply import INPUT_COLUMNS, PriceBook, price_rows
from service.pricing.common import PricingError
from service.pricing.rates import BILLING_KIND, BILLING_PRECEDENCE
from service.timeutil import ceil_hour, floor_hour, hour_index, hour_start, month_index

UNMONITORED_SUFFIX = "/unmonitored"
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
class _ResourceHour:
    b: Fraction = Fraction(0)  # billed GPU-hours
    eff: int = 0  # nanos
    billed: int = 0
    list: int | None = 0
    currency: str = ""
    source: str = ""


@dataclass
class _Resource:
    provider: str
    account: str | None = None
    region: str | None = None
    instance_type: str | None = None
    gpu_model: str | None = None
    hours: dict[int, _ResourceHour] = field(default_factory=dict)


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


def _round_half_even(value: Fraction) -> int:
    q, r = divmod(value.numerator, value.denominator)
    twice = 2 * r
    if twice > value.denominator or (twice == value.denominator and q % 2):
        q += 1
    return q


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
    c = _HOUR.c
    stmt = (
        select(c.id, c.instance_id, c.hour_index, c.present_s, c.idle_s, c.gpu_fraction)
        .where(
            c.hour_index >= start_h,
            c.hour_index < end_h,
            c.instance_id.in_(resources),
            ~is_unmonitored(c.device_id),
        )
        .order_by(c.id)
    )
    rows = conn.execute(stmt).all()
    schema = {
        "id": pl.Int64, "instance_id": pl.String, "hour_index": pl.Int64,
        "present_s": pl.Float64, "idle_s": pl.Float64, "gpu_fraction": pl.Float64,
    }  # fmt: skip
    return pl.DataFrame([tuple(r) for r in rows], schema=schema, orient="row").with_columns(
        p_us=(pl.col("present_s") * 1e6).round(0).cast(pl.Int64).clip(lower_bound=0),
        i_us=(pl.col("idle_s").fill_null(0.0) * 1e6).round(0).cast(pl.Int64).clip(lower_bound=0),
    )


def _fraction(value: float) -> Fraction:
    return Fraction(value).limit_denominator(_FRACTION_DENOMINATOR)


def _spread(span: _Span, present: dict[int, Fraction], share: Decimal) -> dict[int, _ResourceHour]:
    """The span's GPU-hours and amounts per hour (see the module docstring for which hours)."""
    hours = list(range(span.h0, span.h1))
    b = Fraction(span.gpu_hours)
    g = span.gpu_count
    weights: dict[int, Fraction] = {}
    if len(hours) == 1:
        weights[hours[0]] = b
    elif b > 0 and g and b <= g * len(hours):
        order = [h for h in hours if present.get(h, 0) > 0] + [h for h in hours if present.get(h, 0) <= 0]
        left = b
        for h in order:
            if left <= 0:
                break
            weights[h] = min(Fraction(g), left)
            left -= weights[h]
    elif b > 0:
        weights = {h: b / len(hours) for h in hours}
    gpu_weighted = bool(weights)
    if not weights:  # no GPU-hours in the span (a fee, a credit): its hours of presence, else all
        seen = [h for h in hours if present.get(h, 0) > 0] or hours
        weights = {h: Fraction(1) for h in seen}
    keys = sorted(weights)
    w = [weights[h] for h in keys]

    def split(amount: Decimal | None) -> list[int | None]:
        if amount is None:
            return [None] * len(keys)
        return list(allocate_nanos(to_nanos(amount * share), w))

    eff, billed, lst = split(span.effective), split(span.billed), split(span.list_cost)
    out = {}
    for i, h in enumerate(keys):
        out[h] = _ResourceHour(
            b=weights[h] if gpu_weighted else Fraction(0),
            eff=eff[i] or 0,
            billed=billed[i] or 0,
            list=lst[i],
            currency=span.currency,
            source=span.source,
        )
    return out


def _add(into: _ResourceHour, part: _ResourceHour, resource: str) -> None:
    if into.currency and into.currency != part.currency:
        raise PricingError(
            f"billing lines of resource {resource!r} are in {into.currency} and {part.currency} for the "
            f"same hour; a GPU resource must be billed in one currency"
        )
    into.b += part.b
    into.eff += part.eff
    into.billed += part.billed
    into.list = None if into.list is None or part.list is None else into.list + part.list
    into.currency = part.currency
    into.source = min(filter(None, (into.source, part.source)))


def _per_gpu_hour(nanos: int | None, gpu_us: Fraction) -> int | None:
    if nanos is None or gpu_us <= 0:
        return None
    return _round_half_even(nanos * US_PER_HOUR / gpu_us)


def reprice(
    engine: Engine,
    start: dt.datetime,
    end: dt.datetime,
    *,
    gpu_cost_share: Decimal | float | str = Decimal(1),
    catalog: InstanceCatalog | None = None,
) -> RepriceResult:
    """Price cloud GPU ledger hours in ``[start, end)`` (widened to whole charge spans) from the bill.

    One transaction: billing ``GpuRate`` rows and unmonitored-spend rows of the window are replaced,
    device rows of billed instances get their bill share, the day rollup is rebuilt.
    ``catalog`` (default: the bundled one) names the GPU model of unmonitored-spend rows.
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

        present: dict[tuple[str, int], Fraction] = defaultdict(Fraction)
        dev_by_hour: dict[tuple[str, int], list[tuple[int, Fraction, int, int]]] = defaultdict(list)
        for rid, res, h, p_us, i_us, frac in devices.select(
            "id", "instance_id", "hour_index", "p_us", "i_us", "gpu_fraction"
        ).iter_rows():
            weight = p_us * _fraction(frac)
            present[(res, h)] += weight
            dev_by_hour[(res, h)].append((rid, weight, p_us, i_us))

        book: dict[str, _Resource] = {}
        for span in spans:
            res = book.setdefault(span.resource, _Resource(span.provider))
            res.account = res.account or span.account
            res.region = res.region or span.region
            res.instance_type = res.instance_type or span.instance_type
            entry = catalog.get(res.instance_type)
            res.gpu_model = entry.gpu_model if entry else None
            pres = {h: present.get((span.resource, h), Fraction(0)) for h in range(span.h0, span.h1)}
            for h, part in _spread(span, pres, share).items():
                _add(res.hours.setdefault(h, _ResourceHour(list=0)), part, span.resource)

        updates: list[dict[str, object]] = []
        unmonitored: list[dict[str, object]] = []
        rates: list[_RateRun] = []
        repriced_ids: set[int] = set()
        for resource, res in sorted(book.items()):
            run: _RateRun | None = None
            for h in sorted(res.hours):
                rh = res.hours[h]
                rows = dev_by_hour.get((resource, h), [])
                p_total = sum((w for _, w, _, _ in rows), Fraction(0))
                b_us = rh.b * US_PER_HOUR
                gap = b_us - p_total if b_us > p_total else Fraction(0)
                rate_source = f"{BILLING_KIND}:{rh.source}"
                extra = gap > 0 or (not rows and (rh.eff or rh.billed))
                weights = [w for _, w, _, _ in rows] + ([gap] if extra else [])
                costs = allocate_nanos(rh.eff, weights)
                for (rid, _, p_us, i_us), nanos in zip(rows, costs, strict=False):
                    idle = _round_half_even(Fraction(nanos * min(i_us, p_us), p_us)) if p_us else 0
                    updates.append(
                        {"_id": rid, "_cost": from_nanos(nanos), "_idle": from_nanos(idle),
                         "_cur": rh.currency, "_src": rate_source}
                    )  # fmt: skip
                    repriced_ids.add(rid)
                if len(weights) > len(rows):
                    unmonitored.append(_unmonitored_row(resource, res, h, gap, costs[-1], rh, rate_source))
                denominator = max(b_us, p_total)
                eff_rate = _per_gpu_hour(rh.eff, denominator)
                if eff_rate is None:
                    run = None
                    continue
                key = (
                    eff_rate,
                    _per_gpu_hour(rh.billed, denominator),
                    _per_gpu_hour(rh.list, denominator),
                    rh.currency,
                    rh.source,
                )
                if run is not None and run.key == key and run.end_h == h:
                    run.end_h = h + 1
                    continue
                run = _RateRun(key, h, h + 1, res.provider, resource)
                rates.append(run)

        for run in sorted(rates, key=lambda r: (r.resource, r.start_h)):
            if any(abs(r) > MAX_RATE_NANOS for r in run.key[:3] if r is not None):
                raise PricingError(rate_overflow_message(run.resource, run.start_h))
        _replace_rates(conn, start, end, [_rate_record(r) for r in rates])
        conn.execute(
            _HOUR.delete().where(
                _HOUR.c.hour_index >= start_h, _HOUR.c.hour_index < end_h, is_unmonitored(_HOUR.c.device_id)
            )
        )
        if updates:
            conn.execute(
                _SET_PRICE,
                updates,
            )
        if unmonitored:
            conn.execute(insert(_HOUR), unmonitored)
            _upsert_devices(conn, unmonitored)
        _reprice_orphans(conn, start_h, end_h, repriced_ids)
        if end_h > start_h:
            store.rebuild_days(conn, start_h // 24, (end_h - 1) // 24)
        ledger_version.bump(conn)
    return RepriceResult(start, end, len(book), len(rates), len(updates), len(unmonitored))


def _unmonitored_row(
    resource: str,
    res: _Resource,
    h: int,
    gap_us: Fraction,
    cost_nanos: int,
    rh: _ResourceHour,
    rate_source: str,
) -> dict[str, object]:
    start = hour_start(h)
    return {
        "source": rh.source,
        "device_id": unmonitored_device_id(resource),
        "workload_key": "",
        "environment": res.provider,
        "provider": res.provider,
        "account": res.account,
        "region": res.region,
        "instance_id": resource,
        "instance_type": res.instance_type,
        "gpu_model": res.gpu_model,
        # issue 16, after this loop was retired: the pseudo-device's vendor is its billed model's
        "vendor": vendor_of(res.gpu_model),
        "gpu_fraction": 1.0,
        "default_metric": "sm_active",
        "present_s": round(float(gap_us) / 1e6, 6),
        "cost": from_nanos(cost_nanos),
        "idle_cost": from_nanos(0),
        "currency": rh.currency,
        "rate_source": rate_source,
        "hour_start": start,
        "hour_index": h,
        "day_index": h // 24,
        "month_index": month_index(start),
    }


@dataclass
class _RateRun:
    """Consecutive hours of one resource at the same rates: one billing ``GpuRate`` row."""

    # (effective, billed, list) nanos per GPU-hour, currency, billing source
    key: tuple[int, int | None, int | None, str, str]
    start_h: int
    end_h: int
    provider: str
    resource: str


def _rate_record(run: _RateRun) -> dict[str, object]:
    eff, billed, lst, currency, source = run.key
    return {
        "source_kind": BILLING_KIND,
        "source_ref": source,
        "precedence": BILLING_PRECEDENCE,
        "environment": run.provider,
        "instance_id": run.resource,
        "instance_type": None,
        "gpu_model": None,
        "valid_from": hour_start(run.start_h),
        "valid_to": hour_start(run.end_h),
        "effective_per_gpu_hour": from_nanos(eff),
        "billed_per_gpu_hour": None if billed is None else from_nanos(billed),
        "list_per_gpu_hour": None if lst is None else from_nanos(lst),
        "currency": currency,
    }


def _replace_rates(
    conn: Connection, start: dt.datetime, end: dt.datetime, new: list[dict[str, object]]
) -> None:
    """Billing rates overlapping the window are cut at its edges; the inside is replaced by ``new``."""
    c = _RATE.c
    overlap = and_(
        c.source_kind == BILLING_KIND, c.valid_from < end, or_(c.valid_to.is_(None), c.valid_to > start)
    )
    keep: list[dict[str, object]] = []
    for r in conn.execute(select(_RATE).where(overlap)).mappings():
        base = {k: v for k, v in r.items() if k != "id"}
        if r["valid_from"] < start:
            keep.append({**base, "valid_to": start})
        if r["valid_to"] is None or r["valid_to"] > end:
            keep.append({**base, "valid_from": end})
    conn.execute(_RATE.delete().where(overlap))
    if keep or new:
        conn.execute(insert(_RATE), keep + new)


def _upsert_devices(conn: Connection, rows: list[dict[str, object]]) -> None:
    """Register each unmonitored pseudo-device so it lists, groups and filters like a device."""
    spans: dict[str, dict[str, object]] = {}
    hours: dict[str, list[dt.datetime]] = defaultdict(list)
    for r in rows:
        device_id, hour = str(r["device_id"]), r["hour_start"]
        assert isinstance(hour, dt.datetime), "_unmonitored_row sets hour_start"
        spans.setdefault(device_id, r)
        hours[device_id].append(hour)
    existing = {
        r.device_id: r
        for r in conn.execute(select(_DEVICE).where(_DEVICE.c.device_id.in_(list(spans)))).all()
    }
    for device_id, d in spans.items():
        first, last = min(hours[device_id]), max(hours[device_id]) + dt.timedelta(hours=1)
        values = {k: d[k] for k in BILLED_DEVICE_ATTRIBUTES}
        values |= {"source": d["source"], "gpu_fraction": 1.0}
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


def _reprice_orphans(conn: Connection, start_h: int, end_h: int, repriced: set[int]) -> None:
    """Rows a previous run priced from the bill that no line covers now: price them from the other
    rates (rate cards; the billing rates of this window are gone), else leave them unpriced."""
    c = _HOUR.c
    stmt = select(c.id, *(c[n] if n in c else null().label(n) for n in INPUT_COLUMNS)).where(
        c.hour_index >= start_h,
        c.hour_index < end_h,
        c.rate_source.like(f"{BILLING_KIND}:%"),
        ~is_unmonitored(c.device_id),
    )
    rows = [r for r in conn.execute(stmt).mappings() if r["id"] not in repriced]
    if not rows:
        return
    frame = pl.DataFrame([dict(r) for r in rows], infer_schema_length=None)
    priced = price_rows(frame, _book(conn, start_h, end_h))
    params = [
        {
            "_id": r["id"],
            "_cost": None if r["cost_nanos"] is None else from_nanos(r["cost_nanos"]),
            "_idle": None if r["idle_cost_nanos"] is None else from_nanos(r["idle_cost_nanos"]),
            "_cur": r["currency"],
            "_src": r["rate_source"],
        }
        for r in priced.iter_rows(named=True)
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
    return reprice(engine, start, end, gpu_cost_share=gpu_cost_share, catalog=catalog)
