"""Reconciliation (docs/design.md §5): billed GPU-hours and cost against the metered ledger.

Base rows are (provider, account, resource, day); ``group_by`` keeps any subset of those four and
sums the rest. Two SQL ``GROUP BY`` queries feed it — billing lines per resource and charge span,
the ledger per instance and day (from the daily rollup where it can serve) — and Python merges the
few resulting buckets.

* billed GPU-hours: ``Σ gpu_hours`` of the resource's lines (only its GPU-SKU rows when it has
  any: GCP); billed cost: ``Σ effective_cost`` of *all* its lines × ``gpu_cost_share`` (what
  :func:`service.billing.rates.reprice` spreads over the ledger). A line counts on the UTC day it
  starts.
* metered GPU-hours: *observed* time of the instance's real devices (docs/design.md §3.6); ledger cost:
  every ledger row of the instance, unmonitored spend included.
* status of a row: ``NO_BILLING`` (metered, no GPU billing line), ``NO_METRICS`` (billed, nothing
  metered), ``MATCHED`` (``|metered − billed| ≤ tolerance_pct`` % of billed), else
  ``UNBILLED_USAGE`` (metered > billed) or ``UNMONITORED_SPEND`` (billed > metered).
* resources whose lines name a GPU-looking instance type the catalog does not know (no
  ``gpu_count``; :data:`service.billing.catalog.GPU_LOOKING`: AWS P/G, GCP a2-/a3-/g2-…, Azure
  Standard_N[CDGV]) are their
  own rows, ``UNKNOWN_INSTANCE_TYPE``; unused commitments (lines without a resource whose charge
  type says unused: Azure ``UnusedReservation``, an unused Savings Plan) are their own rows,
  ``UNUSED_COMMITMENT`` — commitment waste belongs to no GPU (docs/design.md §4); credits, tax and
  adjustments without a resource are ``ACCOUNT_ADJUSTMENT`` rows, reported, never spread over GPUs.

``currency``: billed and ledger cost are converted before rows are merged, each per (UTC day,
source currency) of the base buckets — the total converted once and split back
(:func:`service.analytics.fx.convert_day_buckets`, as ``cost`` converts) — so every row is in the
target currency, rows add up to the converted totals, and variances and their percentages are
computed from converted sums. A day whose rate is missing is MISSING_FX_RATE, as ``cost``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import Connection, case, func, or_, select, type_coerce

from service.analytics.access import ALL, Access
from service.analytics.dims import Granularity, LedgerFilter
from service.analytics.errors import InvalidArgument
from service.analytics.fx import NO_CURRENCY, FxTable, check_currency, convert_day_buckets, day_index_of
from service.analytics.paging import WHOLE, Page
from service.analytics.window import Window, ledger_source, money_sum
from service.billing.catalog import GPU_LOOKING
from service.billing.rates import is_unmonitored
from service.dbtypes import table_of
from service.models import BillingLine
from service.money import Money, Quantity, quantize
from service.timeutil import EPOCH

CLOUDS = ("aws", "gcp", "azure")
_LINE = table_of(BillingLine)
ZERO = Decimal("0E-9")
_GPU_LOOKING = re.compile(GPU_LOOKING)


class Status(Enum):
    MATCHED = "MATCHED"
    UNBILLED_USAGE = "UNBILLED_USAGE"
    UNMONITORED_SPEND = "UNMONITORED_SPEND"
    NO_METRICS = "NO_METRICS"
    NO_BILLING = "NO_BILLING"
    UNKNOWN_INSTANCE_TYPE = "UNKNOWN_INSTANCE_TYPE"
    UNUSED_COMMITMENT = "UNUSED_COMMITMENT"
    ACCOUNT_ADJUSTMENT = "ACCOUNT_ADJUSTMENT"


class Key(Enum):
    """What reconciliation rows may be grouped by."""

    PROVIDER = "provider"
    ACCOUNT = "account"
    RESOURCE = "resource"
    DAY = "day"


ALL_KEYS = (Key.PROVIDER, Key.ACCOUNT, Key.RESOURCE, Key.DAY)
_GPU, _UNKNOWN, _COMMITMENT, _ADJUSTMENT = "gpu", "unknown", "commitment", "adjustment"
#: Charges of an account rather than a resource (docs/design.md §4: reported, never spread over GPUs).
ADJUSTMENT_CATEGORIES = ("Credit", "Tax", "Adjustment")
#: (provider, account, resource, day) of a reconciliation group; None where not grouped by.
_GroupKey = tuple[str | None, str | None, str | None, dt.date | None]


@dataclass
class ReconRow:
    """One group: its keys (None unless grouped by), figures and status. Money in ``currency``."""

    provider: str | None
    account: str | None
    resource: str | None
    day: dt.date | None
    currency: str
    billed_gpu_hours: Decimal = ZERO
    metered_gpu_hours: float = 0.0
    billed_cost: Decimal = ZERO
    ledger_cost: Decimal = ZERO
    status: Status = Status.MATCHED
    billing_lines: int = 0
    _kind: str = field(default=_GPU, repr=False)

    @property
    def gpu_hours_variance(self) -> float:
        return self.metered_gpu_hours - float(self.billed_gpu_hours)

    @property
    def gpu_hours_variance_pct(self) -> float | None:
        return (
            None
            if not self.billed_gpu_hours
            else 100.0 * self.gpu_hours_variance / float(self.billed_gpu_hours)
        )

    @property
    def cost_variance(self) -> Decimal:
        return self.ledger_cost - self.billed_cost

    @property
    def cost_variance_pct(self) -> Decimal | None:
        return None if not self.billed_cost else quantize(self.cost_variance * 100 / self.billed_cost)


def _day(value: dt.datetime) -> dt.date:
    return value.astimezone(dt.UTC).date()


def _kind(
    provider: str,
    resource: str | None,
    gpu: bool,
    instance_type: str | None,
    commitment: bool,
    adjustment: bool,
) -> str | None:
    if resource is None:
        return _COMMITMENT if commitment else _ADJUSTMENT if adjustment else None
    if gpu:
        return _GPU
    if instance_type and _GPU_LOOKING.match(instance_type.strip().lower()):
        return _UNKNOWN
    return None


def _billing(
    conn: Connection, window: Window, filters: Mapping[str, Sequence[str]], share: Decimal
) -> list[dict[str, Any]]:
    c = _LINE.c
    gpu_sku = c.is_gpu_sku.is_(True)
    # Unused reservation / savings plan (Azure UnusedReservation, FOCUS "Unused" status…). Not the
    # SavingsPlanNegation (no resource either, effective 0) nor the recurring fee (in covered usage).
    commitment = func.lower(c.charge_type).like("%unused%")
    # Resource-less lines of different kinds on one day stay apart (waste vs credits and tax).
    orphan = case(
        (c.resource_id.is_not(None), ""),
        (commitment, _COMMITMENT),
        (c.charge_category.in_(ADJUSTMENT_CATEGORIES), _ADJUSTMENT),
        else_="",
    ).label("orphan")
    terms = [c.charge_start >= window.start, c.charge_start < window.end]
    for key, col in (("provider", c.provider), ("account", c.account), ("resource", c.resource_id)):
        if filters.get(key):
            terms.append(col.in_(list(filters[key])))
    stmt = (
        select(
            c.provider,
            c.account,
            c.resource_id,
            c.charge_start,
            c.currency,
            type_coerce(func.sum(c.effective_cost), Money).label("cost"),
            type_coerce(func.coalesce(func.sum(c.gpu_hours), 0), Quantity).label("gpu_hours"),
            type_coerce(func.coalesce(func.sum(case((gpu_sku, c.gpu_hours), else_=0)), 0), Quantity).label(
                "sku_hours"
            ),
            func.max(case((gpu_sku, 1), else_=0)).label("has_sku"),
            func.max(case((or_(c.gpu_count > 0, gpu_sku), 1), else_=0)).label("gpu"),
            orphan,
            func.max(c.instance_type).label("instance_type"),
            func.count().label("n"),
        )
        .where(*terms)
        .group_by(c.provider, c.account, c.resource_id, c.charge_start, c.currency, orphan)
    )
    rows = conn.execute(stmt).all()
    resource_gpu = {r.resource_id for r in rows if r.gpu}
    resource_sku = {r.resource_id for r in rows if r.has_sku}
    out = []
    for r in rows:
        kind = _kind(
            r.provider,
            r.resource_id,
            r.resource_id in resource_gpu,
            r.instance_type,
            r.orphan == _COMMITMENT,
            r.orphan == _ADJUSTMENT,
        )
        if kind is None:
            continue
        hours = r.sku_hours if r.resource_id in resource_sku else r.gpu_hours
        cost = r.cost if kind in (_COMMITMENT, _ADJUSTMENT) else quantize(r.cost * share)
        out.append({
            "key": (r.provider, r.account, r.resource_id, _day(r.charge_start)), "kind": kind,
            "currency": r.currency, "gpu_hours": hours, "cost": cost, "n": r.n,
        })  # fmt: skip
    return out


def _ledger(conn: Connection, window: Window, filters: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    src = ledger_source(window, Granularity.DAY, LedgerFilter(), ALL)  # reconcile() checked access
    real = ~is_unmonitored(src.c.device_id)
    terms = [src.c.environment.in_(CLOUDS)]
    for key, col in (
        ("provider", src.c.provider),
        ("account", src.c.account),
        ("resource", src.c.instance_id),
    ):
        if filters.get(key):
            terms.append(col.in_(list(filters[key])))
    observed = func.coalesce(func.sum(case((real, src.c.observed_s * src.c.gpu_fraction), else_=0.0)), 0.0)
    stmt = (
        select(
            src.c.provider,
            src.c.account,
            src.c.instance_id,
            src.c.day_index,
            src.c.currency,
            (observed / 3600.0).label("metered"),
            money_sum(src.c.cost).label("cost"),
        )
        .where(*terms)
        .group_by(src.c.provider, src.c.account, src.c.instance_id, src.c.day_index, src.c.currency)
    )
    return [
        {
            "key": (
                r.provider,
                r.account,
                r.instance_id,
                (EPOCH + dt.timedelta(days=int(r.day_index))).date(),
            ),
            "currency": r.currency,
            "metered": float(r.metered),
            "cost": r.cost,
        }
        for r in conn.execute(stmt)
    ]


def _convert(
    conn: Connection, target: str, billing: list[dict[str, Any]], ledger: list[dict[str, Any]]
) -> None:
    """Billing and ledger buckets' cost in ``target``, in place (see the module docstring)."""
    for items in (billing, ledger):
        currencies = [b["currency"] or NO_CURRENCY for b in items]
        days = [day_index_of(b["key"][3]) for b in items]
        fx = FxTable(conn, target, set(currencies), days)
        [costs] = convert_day_buckets(fx, [[b["cost"] for b in items]], currencies, days)
        for b, cost in zip(items, costs, strict=True):
            b["cost"], b["currency"] = cost, target


def _status(row: ReconRow, has_billing: bool, tolerance_pct: Decimal) -> Status:
    if row._kind == _UNKNOWN:
        return Status.UNKNOWN_INSTANCE_TYPE
    if row._kind == _COMMITMENT:
        return Status.UNUSED_COMMITMENT
    if row._kind == _ADJUSTMENT:
        return Status.ACCOUNT_ADJUSTMENT
    billed, metered = row.billed_gpu_hours, Decimal(repr(row.metered_gpu_hours))
    if not has_billing:
        return Status.NO_BILLING if metered > 0 else Status.MATCHED
    if billed > 0 and metered == 0:
        return Status.NO_METRICS
    if abs(metered - billed) <= billed * tolerance_pct / 100:
        return Status.MATCHED
    return Status.UNBILLED_USAGE if metered > billed else Status.UNMONITORED_SPEND


def reconcile(
    conn: Connection,
    window: Window,
    group_by: Sequence[Key] = ALL_KEYS,
    filters: Mapping[str, Sequence[str]] | None = None,
    tolerance_pct: Decimal | float = Decimal(5),
    gpu_cost_share: Decimal = Decimal(1),
    *,
    access: Access,
    page: Page = WHOLE,
    currency: str | None = None,
) -> list[ReconRow]:
    """Reconciliation rows of ``window`` grouped by ``group_by`` (see the module docstring).

    ``filters``: ``provider``, ``account``, ``resource`` lists (empty = any). Billing data is
    account-wide: ``access`` must be everything (else FORBIDDEN). Rows are merged in Python, so a
    page is cut from the whole answer (its SQL is two GROUP BYs at resource × day grain either way).
    """
    access.require_everything("reconciliation")
    tol = Decimal(repr(tolerance_pct)) if isinstance(tolerance_pct, float) else Decimal(tolerance_pct)
    if not tol.is_finite() or tol < 0:
        raise InvalidArgument(f"tolerancePct must be a non-negative number, got {tolerance_pct}")
    target = check_currency(conn, currency) if currency is not None else None
    filters = filters or {}
    keep_p, keep_a, keep_r, keep_d = (k in group_by for k in ALL_KEYS)

    def grouped(key: _GroupKey) -> _GroupKey:
        p, a, r, d = key
        return (p if keep_p else None, a if keep_a else None, r if keep_r else None, d if keep_d else None)

    billing = _billing(conn, window, filters, gpu_cost_share)
    ledger = _ledger(conn, window, filters)
    if target is not None:
        _convert(conn, target, billing, ledger)
    gpu_base = {b["key"] for b in billing if b["kind"] == _GPU}
    resource_currency = {b["key"]: b["currency"] for b in billing if b["kind"] == _GPU}
    rows: dict[tuple[object, ...], ReconRow] = {}
    has_billing: dict[tuple[object, ...], bool] = {}

    def row(key: _GroupKey, kind: str, currency: str) -> ReconRow:
        full = (*grouped(key), kind, currency)
        if full not in rows:
            p, a, r, d = grouped(key)
            rows[full] = ReconRow(p, a, r, d, currency, _kind=kind)
            has_billing[full] = False
        return rows[full]

    for b in billing:
        r = row(b["key"], b["kind"], b["currency"])
        r.billed_gpu_hours += b["gpu_hours"]
        r.billed_cost += b["cost"]
        r.billing_lines += b["n"]
        has_billing[(*grouped(b["key"]), b["kind"], b["currency"])] = True
    for m in ledger:
        currency = m["currency"] or resource_currency.get(m["key"]) or "XXX"
        if m["key"] not in gpu_base and m["metered"] == 0 and not m["cost"]:
            continue
        r = row(m["key"], _GPU, currency)
        r.metered_gpu_hours += m["metered"]
        r.ledger_cost += m["cost"]
    for full, r in rows.items():
        r.status = _status(r, has_billing[full], tol)
    ordered = sorted(
        rows.values(),
        key=lambda r: (
            r.provider or "",
            r.account or "",
            r.resource or "",
            r.day or dt.date.min,
            r._kind,
            r.currency,
        ),
    )
    return page.slice(ordered)
