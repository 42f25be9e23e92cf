"""What a report says, computed by the analytics domain functions (never through GraphQL or HTTP).

A report covers one :class:`~service.reports.period.Period` for the whole account or for one
project or team. A project's or team's report is read under the same :class:`Access` as a token
scoped to it: its own rows only, no unallocated pool, no reconciliation (billing data is
account-wide). Every figure comes from one of:

* :func:`service.analytics.cost.cost` (idle policy ``SEPARATE``, the report's currency): the
  totals, the per-project table, the daily trend, the previous period, the idle cost allocated
  vs unallocated and the top idle workloads — so a report's totals are the ``cost`` answer for
  the same window, scope and currency, to the nano;
* :func:`service.analytics.usage.usage`: GPU-hours and effective GPU-hours (per environment × GPU
  model for the effective cost, per project);
* :func:`service.analytics.idle.idle_waste`: idle GPU-hours allocated vs unallocated, per workload;
* :func:`service.billing.reconcile.reconcile`: the reconciliation summary (account-wide reports;
  converted like the rest when a currency was asked for), and one SUM over the ledger's
  unmonitored-spend rows (in their own currencies).

Each is one SQL GROUP BY over the rollups; Python only adds up their few buckets. Money is
``Decimal`` throughout.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import Connection, func, select

from service.analytics.access import ALL, Access
from service.analytics.cost import CostRow, cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy, LedgerFilter
from service.analytics.effective import per_gpu_hour
from service.analytics.errors import QueryError
from service.analytics.fx import NO_CURRENCY, check_currency
from service.analytics.idle import idle_waste
from service.analytics.query import GroupKey, LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import Window, ledger_source, money_sum, pruned_hours_refused
from service.billing.rates import is_unmonitored
from service.billing.reconcile import Key, ReconRow, Status, reconcile
from service.ledger import version as ledger_version
from service.reports.period import Period
from service.reports.scope import ReportError, Scope

ZERO = Decimal("0E-9")
TOP_IDLE_WORKLOADS = 10


@dataclass(frozen=True)
class Totals:
    cost: Decimal
    idle_cost: Decimal
    allocated_idle_cost: Decimal
    unallocated_idle_cost: Decimal
    gpu_hours: float
    effective_gpu_hours: float
    idle_gpu_hours: float
    allocated_idle_gpu_hours: float
    unallocated_idle_gpu_hours: float
    unpriced_gpu_hours: float
    metric: str
    cost_per_gpu_hour: Decimal | None
    cost_per_effective_gpu_hour: Decimal | None


@dataclass(frozen=True)
class ProjectLine:
    """One row of the per-project table; ``project`` None: allocated time naming no project, or
    (``unallocated``) the pool nobody held."""

    project: str | None
    unallocated: bool
    cost: Decimal
    idle_cost: Decimal
    gpu_hours: float
    effective_gpu_hours: float

    @property
    def cost_per_effective_gpu_hour(self) -> Decimal | None:
        return _per(self.cost, self.effective_gpu_hours)


@dataclass(frozen=True)
class EffectiveLine:
    """Cost per GPU-hour and per effective GPU-hour of one environment × GPU model."""

    environment: str | None
    gpu_model: str | None
    cost: Decimal
    gpu_hours: float
    effective_gpu_hours: float
    metric: str

    @property
    def cost_per_gpu_hour(self) -> Decimal | None:
        return _per(self.cost, self.gpu_hours)

    @property
    def cost_per_effective_gpu_hour(self) -> Decimal | None:
        return _per(self.cost, self.effective_gpu_hours)

    @property
    def utilization_pct(self) -> float | None:
        return self.effective_gpu_hours / self.gpu_hours * 100 if self.gpu_hours > 0 else None


@dataclass(frozen=True)
class IdleWorkload:
    project: str | None
    team: str | None
    workload: str | None
    idle_gpu_hours: float
    idle_cost: Decimal
    gpu_hours: float
    cost: Decimal

    @property
    def idle_pct(self) -> float | None:
        return self.idle_gpu_hours / self.gpu_hours * 100 if self.gpu_hours > 0 else None


@dataclass(frozen=True)
class DayCost:
    day: dt.date
    cost: Decimal
    idle_cost: Decimal


@dataclass(frozen=True)
class Trend:
    days: list[DayCost]
    previous_label: str
    previous_cost: Decimal | None
    #: Why there is no previous figure (None when there is one).
    previous_note: str | None

    @property
    def change(self) -> Decimal | None:
        total = sum((d.cost for d in self.days), ZERO)
        return None if self.previous_cost is None else total - self.previous_cost

    @property
    def change_pct(self) -> Decimal | None:
        change = self.change
        if change is None or not self.previous_cost:
            return None
        return (change * 100 / self.previous_cost).quantize(Decimal("0.1"))


@dataclass(frozen=True)
class ReconLine:
    """Reconciliation resources of one status and currency, summed over the period."""

    status: str
    currency: str
    resources: int
    billed_gpu_hours: Decimal
    metered_gpu_hours: float
    billed_cost: Decimal
    ledger_cost: Decimal


@dataclass(frozen=True)
class Reconciliation:
    lines: list[ReconLine]
    #: Ledger cost of billed GPU-hours no metric saw (devices ``<resource>/unmonitored``), per currency.
    unmonitored_spend: dict[str, Decimal]
    unmonitored_gpu_hours: float


@dataclass(frozen=True)
class Report:
    period: Period
    scope: Scope
    #: The currency every amount is in (None: the period holds no priced time).
    currency: str | None
    converted: bool
    generated_at: dt.datetime
    software_version: str
    data_version: int
    totals: Totals
    projects: list[ProjectLine]
    effective: list[EffectiveLine]
    top_idle: list[IdleWorkload]
    trend: Trend
    reconciliation: Reconciliation | None
    notes: list[str] = field(default_factory=list)


def _per(amount: Decimal, hours: float) -> Decimal | None:
    return per_gpu_hour(amount, hours, "") if hours > 0 else None


def _sum(values: Iterable[Decimal]) -> Decimal:
    return sum(values, ZERO)


def _query(
    window: Window,
    access: Access,
    granularity: Granularity = Granularity.TOTAL,
    group_by: Sequence[Dimension] = (),
    flt: LedgerFilter | None = None,
) -> LedgerQuery:
    return LedgerQuery(window, granularity, tuple(group_by), flt or LedgerFilter(), access=access)


def report_currency(conn: Connection, window: Window, access: Access, currency: str | None) -> str | None:
    """The currency the report is in: ``currency`` (checked), else the period's one currency.

    A period whose costs are in several currencies needs ``--currency`` (one report, one unit).
    """
    if currency is not None:
        try:
            return check_currency(conn, currency[:16])
        except QueryError as exc:
            raise ReportError("--currency", exc.message) from None
    found = {r.currency for r in cost(conn, _query(window, access))} - {NO_CURRENCY}
    if len(found) > 1:
        raise ReportError(
            "--currency",
            f"the period's costs are in {', '.join(sorted(found))}: give --currency to convert them to one",
        )
    return next(iter(found), None)


def _cost(conn: Connection, q: LedgerQuery, target: str | None, converted: bool) -> list[CostRow]:
    """cost() as the report asks it: idle policy SEPARATE, converted only when a currency was asked
    for (else the ledger's own amounts: the period has one currency, and unpriced XXX rows of 0)."""
    return cost(conn, q, IdlePolicy.SEPARATE, target if converted else None)


def build_report(
    conn: Connection,
    period: Period,
    scope: Scope = Scope(),  # noqa: B008  (frozen)
    currency: str | None = None,
    *,
    generated_at: dt.datetime,
    software_version: str,
    top_n: int = TOP_IDLE_WORKLOADS,
    tolerance_pct: Decimal = Decimal(5),
    gpu_cost_share: Decimal = Decimal(1),
    ledger_threshold_pct: float = 5.0,
) -> Report:
    """The report of ``period`` for ``scope`` in ``currency`` (see the module docstring)."""
    # Its windows are whole UTC days, which ledger_day and the group rollups answer after a prune;
    # should any part read pruned device-level hours, the report fails (HOURS_PRUNED) or notes
    # it (the previous period) rather than show short sums.
    with pruned_hours_refused(conn):
        window, access = period.window, scope.access
        target = report_currency(conn, window, access, currency)
        converted = currency is not None
        notes: list[str] = []

        totals_rows = _cost(conn, _query(window, access), target, converted)
        usage_total = usage(conn, _query(window, access))
        idle_total = idle_waste(
            conn, _query(window, access), streak=False, ledger_threshold_pct=ledger_threshold_pct,
            threshold_pct=ledger_threshold_pct,
        )  # fmt: skip
        total_cost = _sum(r.cost for r in totals_rows)
        gpu_hours = sum(r.gpu_hours for r in usage_total)
        effective_hours = sum(r.effective_gpu_hours for r in usage_total)
        totals = Totals(
            cost=total_cost,
            idle_cost=_sum(r.idle_cost for r in totals_rows),
            allocated_idle_cost=_sum(r.idle_cost for r in totals_rows if not r.unallocated),
            unallocated_idle_cost=_sum(r.idle_cost for r in totals_rows if r.unallocated),
            gpu_hours=gpu_hours,
            effective_gpu_hours=effective_hours,
            idle_gpu_hours=sum(r.idle_gpu_hours for r in idle_total),
            allocated_idle_gpu_hours=sum(r.allocated_idle_gpu_hours for r in idle_total),
            unallocated_idle_gpu_hours=sum(r.unallocated_idle_gpu_hours for r in idle_total),
            unpriced_gpu_hours=sum(r.unpriced_gpu_hours for r in totals_rows),
            metric=usage_total[0].metric if usage_total else "",
            cost_per_gpu_hour=_per(total_cost, gpu_hours),
            cost_per_effective_gpu_hour=_per(total_cost, effective_hours),
        )
        if totals.unpriced_gpu_hours > 0:
            notes.append(f"{totals.unpriced_gpu_hours:,.2f} GPU-hours had no price (counted as cost 0).")
        return Report(
            period=period,
            scope=scope,
            currency=target,
            converted=converted,
            generated_at=generated_at,
            software_version=software_version,
            data_version=ledger_version.current(conn),
            totals=totals,
            projects=_projects(conn, window, access, target, converted),
            effective=_effective(conn, window, access, target, converted),
            top_idle=_top_idle(conn, window, access, target, converted, top_n, ledger_threshold_pct),
            trend=_trend(conn, period, access, target, converted),
            reconciliation=(
                _reconciliation(conn, window, tolerance_pct, gpu_cost_share, target if converted else None)
                if scope.account_wide
                else None
            ),
            notes=notes,
        )


def _dims(key: GroupKey, *dims: Dimension) -> tuple[str | None, ...]:
    return tuple(key.value(d) for d in dims)


def _projects(
    conn: Connection, window: Window, access: Access, target: str | None, converted: bool
) -> list[ProjectLine]:
    by = (Dimension.PROJECT,)
    rows = _cost(conn, _query(window, access, group_by=by), target, converted)
    held = usage(conn, _query(window, access, group_by=by, flt=LedgerFilter(unallocated=False)))
    pool = usage(conn, _query(window, access, flt=LedgerFilter(unallocated=True)))
    effective = {(r.key.value(Dimension.PROJECT), False): r.effective_gpu_hours for r in held}
    effective[(None, True)] = sum(r.effective_gpu_hours for r in pool)
    merged: dict[tuple[str | None, bool], list[CostRow]] = defaultdict(list)
    for r in rows:
        merged[(r.key.value(Dimension.PROJECT), r.unallocated)].append(r)
    lines = [
        ProjectLine(
            project=project,
            unallocated=unallocated,
            cost=_sum(r.cost for r in group),
            idle_cost=_sum(r.idle_cost for r in group),
            gpu_hours=sum(r.gpu_hours for r in group),
            effective_gpu_hours=effective.get((project, unallocated), 0.0),
        )
        for (project, unallocated), group in merged.items()
    ]
    return sorted(lines, key=lambda p: (-p.cost, p.unallocated, p.project or ""))


def _effective(
    conn: Connection, window: Window, access: Access, target: str | None, converted: bool
) -> list[EffectiveLine]:
    by = (Dimension.ENVIRONMENT, Dimension.GPU_MODEL)
    rows = _cost(conn, _query(window, access, group_by=by), target, converted)
    money: dict[tuple[str | None, ...], Decimal] = defaultdict(lambda: ZERO)
    for r in rows:
        money[_dims(r.key, *by)] += r.cost
    lines = [
        EffectiveLine(
            environment=u.key.value(Dimension.ENVIRONMENT),
            gpu_model=u.key.value(Dimension.GPU_MODEL),
            cost=money.get(_dims(u.key, *by), ZERO),
            gpu_hours=u.gpu_hours,
            effective_gpu_hours=u.effective_gpu_hours,
            metric=u.metric,
        )
        for u in usage(conn, _query(window, access, group_by=by))
    ]
    return sorted(lines, key=lambda e: (e.environment or "", e.gpu_model or ""))


def _top_idle(  # noqa: PLR0913
    conn: Connection,
    window: Window,
    access: Access,
    target: str | None,
    converted: bool,
    top_n: int,
    threshold_pct: float,
) -> list[IdleWorkload]:
    by = (Dimension.PROJECT, Dimension.TEAM, Dimension.WORKLOAD)
    held = LedgerFilter(unallocated=False)
    rows = _cost(conn, _query(window, access, group_by=by, flt=held), target, converted)
    idle = idle_waste(
        conn, _query(window, access, group_by=by, flt=held), streak=False,
        threshold_pct=threshold_pct, ledger_threshold_pct=threshold_pct,
    )  # fmt: skip
    idle_hours: dict[tuple[str | None, ...], float] = defaultdict(float)
    for i in idle:
        idle_hours[_dims(i.key, *by)] += i.idle_gpu_hours
    money: dict[tuple[str | None, ...], list[CostRow]] = defaultdict(list)
    for r in rows:
        money[_dims(r.key, *by)].append(r)
    workloads = [
        IdleWorkload(
            project=key[0],
            team=key[1],
            workload=key[2],
            idle_gpu_hours=idle_hours.get(key, 0.0),
            idle_cost=_sum(r.idle_cost for r in group),
            gpu_hours=sum(r.gpu_hours for r in group),
            cost=_sum(r.cost for r in group),
        )
        for key, group in money.items()
    ]
    ranked = sorted(
        (w for w in workloads if w.idle_cost > 0 or w.idle_gpu_hours > 0),
        key=lambda w: (-w.idle_cost, -w.idle_gpu_hours, w.project or "", w.workload or ""),
    )
    return ranked[:top_n]


def _trend(conn: Connection, period: Period, access: Access, target: str | None, converted: bool) -> Trend:
    rows = _cost(conn, _query(period.window, access, granularity=Granularity.DAY), target, converted)
    by_day: dict[dt.date, list[CostRow]] = defaultdict(list)
    for r in rows:
        assert r.key.period_start is not None
        by_day[r.key.period_start.date()].append(r)
    dates = [period.start.date() + dt.timedelta(days=n) for n in range(period.days)]
    days = [DayCost(d, _sum(r.cost for r in by_day[d]), _sum(r.idle_cost for r in by_day[d])) for d in dates]
    previous = period.previous()
    try:
        before = _cost(conn, _query(previous.window, access), target, converted)
    except QueryError as exc:  # e.g. no FX rate for a day of the previous period
        return Trend(days, previous.label, None, exc.message)
    others = {r.currency for r in before} - {NO_CURRENCY, target}
    if others:
        note = f"the previous period's costs are in {', '.join(sorted(others))}: give --currency to compare"
        return Trend(days, previous.label, None, note)
    return Trend(days, previous.label, _sum(r.cost for r in before), None)


def _reconciliation(
    conn: Connection, window: Window, tolerance_pct: Decimal, gpu_cost_share: Decimal, currency: str | None
) -> Reconciliation:
    rows = reconcile(
        conn,
        window,
        (Key.PROVIDER, Key.ACCOUNT, Key.RESOURCE),
        tolerance_pct=tolerance_pct,
        gpu_cost_share=gpu_cost_share,
        access=ALL,
        currency=currency,
    )
    grouped: dict[tuple[str, str], list[ReconRow]] = defaultdict(list)
    for r in rows:
        grouped[(r.status.value, r.currency)].append(r)
    order = {s.value: i for i, s in enumerate(Status)}
    lines = [
        ReconLine(
            status=status,
            currency=currency,
            resources=len(group),
            billed_gpu_hours=sum((r.billed_gpu_hours for r in group), Decimal(0)),
            metered_gpu_hours=sum(r.metered_gpu_hours for r in group),
            billed_cost=_sum(r.billed_cost for r in group),
            ledger_cost=_sum(r.ledger_cost for r in group),
        )
        for (status, currency), group in sorted(grouped.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    ]
    spend, hours = _unmonitored(conn, window)
    return Reconciliation(lines, spend, hours)


def _unmonitored(conn: Connection, window: Window) -> tuple[dict[str, Decimal], float]:
    """Cost and GPU-hours of the ledger's unmonitored-spend rows (docs/design.md §4), per currency."""
    src = ledger_source(window, Granularity.TOTAL, LedgerFilter(), ALL)
    stmt = (
        select(
            src.c.currency,
            money_sum(src.c.cost).label("cost"),
            func.coalesce(func.sum(src.c.present_s * src.c.gpu_fraction), 0.0).label("present_s"),
        )
        .where(is_unmonitored(src.c.device_id))
        .group_by(src.c.currency)
    )
    rows = conn.execute(stmt).all()
    return {r.currency or NO_CURRENCY: r.cost for r in rows}, sum(float(r.present_s) for r in rows) / 3600.0


def software_version() -> str:
    """The installed gpu-ledger's version (``unknown`` when run from a checkout never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpu-ledger")
    except PackageNotFoundError:
        return "unknown"
