"""What each rule kind finds now: one :class:`Finding` per subject whose condition holds.

Every figure is computed in SQL over the ledger (a GROUP BY per rule; Python sees only the few
groups); money is summed per currency and UTC day and brought into the rule's currency with the
FX table of that day (:class:`service.analytics.fx.FxTable`), as ``cost`` converts.

* ``idle_workload``: per connector, the hours ``(W − hours, W]`` up to its watermark ``W``; a
  workload fires when it has a ledger row in every one of them and each is idle: its observed
  seconds of the default metric (SM activity where the device reports it, else GPU utilization —
  the row's ``default_metric``) > 0 and its idle seconds (below the ledger's idle threshold) equal
  them (within 1 ms), summed over its devices. An hour without observation (exporter outage) is
  not idle, so it breaks the run: an alert says what was measured.
* ``project_idle_cost``: ``Σ idle_cost`` per project over the 24 hours up to now, from the group
  rollup ``ledger_group_hour`` (project is one of its keys): exact, and still whole on a month's
  first day after ``gpu-ledger prune --before`` that month dropped the previous one's hours.
* ``budget_forecast``: month-to-date ``Σ cost`` per project (team) × hours in the month ÷ hours
  elapsed — a run-rate projection, not the statistical ``forecast`` (that needs weeks of history;
  a budget alert must speak in a month's first days too).
* ``unmonitored_spend``: per cloud provider and account, the largest UTC day among the last
  ``days`` (bills arrive a day or two late) of ``Σ cost`` of the unmonitored-spend rows (billed
  time no metrics account for: ``service.billing.rates``).
* ``connector_silent``: now − the older of the last successful run and the watermark.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, and_, func, select

from service.alerts.rules import (
    AlertRule,
    BudgetForecastRule,
    ConnectorSilentRule,
    IdleWorkloadRule,
    ProjectIdleCostRule,
    UnmonitoredSpendRule,
)
from service.analytics.fx import FxTable
from service.billing.rates import is_unmonitored
from service.dbtypes import table_of
from service.models import ConnectorState, LedgerDay, LedgerGroupHour, LedgerHour
from service.timeutil import HOUR_S, hour_index, month_index, month_start

#: An hour is idle when idle seconds reach observed seconds within this slack (float sums).
SLACK_S = 1e-3
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Finding:
    """One subject whose condition holds: what, whose, how much against what threshold."""

    subject_key: str
    subject: str
    value: Decimal
    unit: str
    threshold: Decimal
    message: str
    project: str | None = None
    team: str | None = None


def find(conn: Connection, rule: AlertRule, now: dt.datetime) -> list[Finding]:
    """The findings of ``rule`` at ``now`` (UTC)."""
    finder: Callable[[Connection, Any, dt.datetime], list[Finding]] = _FINDERS[rule.kind]
    return finder(conn, rule, now)


def _idle_workload(conn: Connection, rule: IdleWorkloadRule, now: dt.datetime) -> list[Finding]:
    cs, lh = table_of(ConnectorState), table_of(LedgerHour)
    findings = []
    for source, watermark in conn.execute(
        select(cs.c.name, cs.c.watermark).where(cs.c.watermark.is_not(None))
    ):
        # The hour holding the last instant before the watermark is the last one ingested.
        last_h = math.ceil(watermark.timestamp() / HOUR_S) - 1
        per_hour = (
            select(
                lh.c.workload_key,
                lh.c.hour_index,
                func.sum(lh.c.observed_s).label("obs"),
                func.sum(lh.c.idle_s).label("idle"),
                func.max(lh.c.project).label("project"),
                func.max(lh.c.team).label("team"),
                func.max(lh.c.workload).label("workload"),
                func.count(func.distinct(lh.c.device_id)).label("gpus"),
            )
            .where(
                lh.c.source == source,
                lh.c.hour_index > last_h - rule.hours,
                lh.c.hour_index <= last_h,
                lh.c.workload_key != "",
            )
            .group_by(lh.c.workload_key, lh.c.hour_index)
            .subquery("per_hour")
        )
        stmt = (
            select(
                per_hour.c.workload_key,
                func.max(per_hour.c.project),
                func.max(per_hour.c.team),
                func.max(per_hour.c.workload),
                func.max(per_hour.c.gpus),
            )
            .where(per_hour.c.obs > 0, per_hour.c.idle >= per_hour.c.obs - SLACK_S)
            .group_by(per_hour.c.workload_key)
            .having(func.count() == rule.hours)
        )
        for key, project, team, workload, gpus in conn.execute(stmt):
            name = workload or key
            owner = f" (project {project})" if project else ""
            findings.append(
                Finding(
                    subject_key=f"{source}/{key}",
                    subject=name,
                    value=Decimal(rule.hours),
                    unit="h",
                    threshold=Decimal(rule.hours),
                    message=f"workload {name}{owner} on {source} held {gpus} GPU(s) idle for the last "
                    f"{rule.hours} h",
                    project=project,
                    team=team,
                )
            )
    return findings


def _converted(
    conn: Connection, currency: str, rows: Iterable[tuple[Any, str | None, int, Decimal | None]]
) -> dict[Any, Decimal]:
    """``(key, currency, day_index, amount)`` rows summed per key in ``currency`` (FX per day)."""
    rows = [r for r in rows if r[3] is not None]
    fx = FxTable(conn, currency, {r[1] or currency for r in rows}, {r[2] for r in rows})
    totals: dict[Any, Decimal] = defaultdict(Decimal)
    for key, cur, day, amount in rows:
        totals[key] += Decimal(amount) * fx.rate(cur or currency, day)  # type: ignore[arg-type]
    return totals


def _project_idle_cost(conn: Connection, rule: ProjectIdleCostRule, now: dt.datetime) -> list[Finding]:
    lh = table_of(LedgerGroupHour)  # the hours summed over devices: prune keeps them (docs/rollups.md)
    last_h = hour_index(now)
    stmt = (
        select(lh.c.project, lh.c.currency, lh.c.day_index, func.sum(lh.c.idle_cost))
        .where(lh.c.hour_index > last_h - 24, lh.c.hour_index <= last_h, lh.c.project.is_not(None))
        .group_by(lh.c.project, lh.c.currency, lh.c.day_index)
    )
    totals = _converted(conn, rule.currency, conn.execute(stmt))
    return [
        Finding(
            subject_key=f"project:{project}",
            subject=project,
            value=total.quantize(CENT),
            unit=rule.currency,
            threshold=rule.per_day,
            message=f"project {project} idled {total.quantize(CENT)} {rule.currency} of GPU time in the last "
            f"24 h (threshold {rule.per_day} {rule.currency})",
            project=project,
        )
        for project, total in sorted(totals.items())
        if total >= rule.per_day
    ]


def _budget_forecast(conn: Connection, rule: BudgetForecastRule, now: dt.datetime) -> list[Finding]:
    ld = table_of(LedgerDay)
    month = month_index(now)
    start, end = month_start(month), month_start(month + 1)
    elapsed_s = Decimal((now - start).total_seconds())
    if elapsed_s <= 0:
        return []
    group = ld.c[rule.group]
    stmt = (
        select(group, ld.c.currency, ld.c.day_index, func.sum(ld.c.cost))
        .where(ld.c.month_index == month, group.in_(sorted(rule.budgets)))
        .group_by(group, ld.c.currency, ld.c.day_index)
    )
    totals = _converted(conn, rule.currency, conn.execute(stmt))
    month_s = Decimal((end - start).total_seconds())
    findings = []
    for name, spent in sorted(totals.items()):
        projected = (spent * month_s / elapsed_s).quantize(CENT)
        budget = rule.budgets[name]
        if projected > budget:
            findings.append(
                Finding(
                    subject_key=f"{rule.group}:{name}",
                    subject=name,
                    value=projected,
                    unit=rule.currency,
                    threshold=budget,
                    message=f"{rule.group} {name} is on course for {projected} {rule.currency} in "
                    f"{start:%Y-%m} (spent {spent.quantize(CENT)} so far), over its budget of {budget}",
                    **{rule.group: name},
                )
            )
    return findings


def _unmonitored_spend(conn: Connection, rule: UnmonitoredSpendRule, now: dt.datetime) -> list[Finding]:
    ld = table_of(LedgerDay)
    today = hour_index(now) // 24
    key = func.coalesce(ld.c.provider, "") + "/" + func.coalesce(ld.c.account, "")
    stmt = (
        select(key, ld.c.day_index, ld.c.currency, func.sum(ld.c.cost))
        .where(
            and_(ld.c.day_index > today - rule.days, ld.c.day_index <= today), is_unmonitored(ld.c.device_id)
        )
        .group_by(key, ld.c.day_index, ld.c.currency)
    )
    per_day = _converted(
        conn, rule.currency, (((k, d), cur, d, amt) for k, d, cur, amt in conn.execute(stmt))
    )
    worst: dict[str, tuple[Decimal, int]] = {}
    for (account, day), amount in per_day.items():
        if amount >= rule.per_day and (account not in worst or amount > worst[account][0]):
            worst[account] = (amount, day)
    return [
        Finding(
            subject_key=f"account:{account}",
            subject=account,
            value=amount.quantize(CENT),
            unit=rule.currency,
            threshold=rule.per_day,
            message=f"{amount.quantize(CENT)} {rule.currency} billed on "
            f"{dt.date.fromordinal(dt.date(1970, 1, 1).toordinal() + day)} for {account} with no GPU metrics "
            f"to account for it (threshold {rule.per_day} {rule.currency} per day)",
        )
        for account, (amount, day) in sorted(worst.items())
    ]


def _connector_silent(conn: Connection, rule: ConnectorSilentRule, now: dt.datetime) -> list[Finding]:
    cs = table_of(ConnectorState)
    stmt = select(cs.c.name, cs.c.status, cs.c.last_success_at, cs.c.watermark).where(
        cs.c.status.not_in(("DISABLED", "NEVER_RUN"))
    )
    if rule.connectors:
        stmt = stmt.where(cs.c.name.in_(rule.connectors))
    findings = []
    for name, status, success, watermark in conn.execute(stmt):
        marks = [m for m in (success, watermark) if m is not None]
        silent_s = (now - min(marks)).total_seconds() if len(marks) == 2 else math.inf
        if silent_s >= rule.hours * HOUR_S:
            hours = Decimal(silent_s / HOUR_S).quantize(CENT) if math.isfinite(silent_s) else None
            since = f"for {hours} h" if hours is not None else "ever (no successful run or watermark)"
            findings.append(
                Finding(
                    subject_key=f"connector:{name}",
                    subject=name,
                    value=hours if hours is not None else Decimal(0),
                    unit="h",
                    threshold=Decimal(str(rule.hours)),
                    message=f"connector {name} ({status}) has brought no new data {since}",
                )
            )
    return findings


_FINDERS: dict[str, Callable[[Connection, Any, dt.datetime], list[Finding]]] = {
    "idle_workload": _idle_workload,
    "project_idle_cost": _project_idle_cost,
    "budget_forecast": _budget_forecast,
    "unmonitored_spend": _unmonitored_spend,
    "connector_silent": _connector_silent,
}
