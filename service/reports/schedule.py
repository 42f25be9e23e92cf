"""Scheduled reports: ``[[reports]]`` tables, each e-mailed once per closed period.

The ``[[reports]]`` tables are :class:`~service.reports.config.ReportSchedule`.
A report for a period is due from ``day``/``hour`` after the period closed (a month's on that day
of the next month, a week's on that weekday of the next week). :class:`ReportSender` runs in the
one process holding the scheduler lock (``service.scheduler``); at each tick it sends the most
recently closed period of every schedule whose time has come (or, before that, the period
before it), once: a row in ``report_delivery``
claims (name, period) before the e-mail is built, so a restart — or a second scheduler overlapping
for a moment — finds it claimed and sends nothing. A failed send releases its claim and is tried
again at the next tick; a process killed between claim and send leaves the claim without
``sent_at`` (at most once: that period is not sent, and is logged at each tick). Periods missed
while the service was down are not caught up beyond that: only the latest due one is sent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.dbtypes import table_of
from service.logging import get_logger
from service.models import ReportDelivery
from service.reports.build import Report, build_report, software_version
from service.reports.config import ReportSchedule
from service.reports.period import Period, month_of, week_of
from service.telemetry import utc_now

log = get_logger(__name__)
_DELIVERY = table_of(ReportDelivery)
#: How often the sender looks for due reports (a report goes out at most this long after its hour).
TICK_S = 300.0


def latest_closed(schedule: ReportSchedule, now: dt.datetime) -> Period:
    """The most recent period of ``schedule`` that ended at or before ``now``."""
    current = month_of(now) if schedule.period == "monthly" else week_of(now)
    return current.previous()


def send_time(schedule: ReportSchedule, period: Period) -> dt.datetime:
    """When ``period``'s report is due: ``day`` and ``hour`` after it closed (UTC). A month ends on
    the 1st and a week on a Monday (ISO weekday 1), so both are ``day − 1`` days after the end."""
    return period.end + dt.timedelta(days=schedule.day - 1, hours=schedule.hour)


def due_period(schedule: ReportSchedule, now: dt.datetime) -> Period | None:
    """The latest period whose report is due at ``now``: the latest closed one once its send time
    has come, else the one before it (due since, and sent only if nobody sent it yet)."""
    if not schedule.enabled:
        return None
    period = latest_closed(schedule, now)
    return period if now >= send_time(schedule, period) else period.previous()


@dataclass(frozen=True)
class Rendered:
    subject: str
    text: str
    html: str | None
    attachments: list[tuple[str, bytes, str]]


def render_email(schedule: ReportSchedule, report: Report) -> Rendered:
    """The e-mail of ``report``: a plain-text summary, the HTML report as the HTML body, the CSV
    attached (each only if its format is asked for)."""
    from service.reports.csv import render_csv
    from service.reports.html import render_html

    t, cur = report.totals, report.currency or ""
    lines = [
        f"GPU cost report {report.period.label} ({report.scope.label})",
        f"{report.period.start:%Y-%m-%d} to {report.period.end:%Y-%m-%d} UTC (end exclusive)",
        "",
        f"Cost: {t.cost:,.2f} {cur}",
        f"Idle cost: {t.idle_cost:,.2f} {cur} ({t.idle_gpu_hours:,.1f} idle GPU-hours)",
        f"GPU-hours: {t.gpu_hours:,.1f}; effective GPU-hours: {t.effective_gpu_hours:,.1f}",
    ]
    if report.trend.previous_cost is not None:
        lines.append(f"{report.trend.previous_label}: {report.trend.previous_cost:,.2f} {cur}")
    if report.top_idle:
        lines += ["", "Top idle workloads:"]
        lines += [f"  {w.workload} ({w.project}): {w.idle_cost:,.2f} {cur} idle" for w in report.top_idle[:5]]
    lines += ["", f"gpu-ledger {report.software_version}, schedule {schedule.name}"]
    attachments = []
    if "csv" in schedule.formats:
        filename = f"gpu-report-{report.period.label}-{report.scope.slug}.csv"
        attachments.append((filename, render_csv(report).encode("utf-8"), "text/csv"))
    return Rendered(
        subject=f"GPU cost report {report.period.label} – {report.scope.label}",
        text="\n".join(lines) + "\n",
        html=render_html(report) if "html" in schedule.formats else None,
        attachments=attachments,
    )


def _claim(engine: Engine, name: str, period: Period, now: dt.datetime) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(insert(_DELIVERY).values(name=name, period=period.label, claimed_at=now))
    except IntegrityError:
        return False
    return True


class ReportSender:
    """Sends every due ``[[reports]]`` e-mail once (see the module docstring).

    ``send`` is :func:`service.notify.email.send_email` bound to the ``[smtp]`` settings; ``clock``
    gives now — both replaceable in tests.
    """

    name = "reports"

    def __init__(
        self,
        engine: Engine,
        schedules: list[ReportSchedule],
        send: Callable[..., Any],
        *,
        gpu_cost_share: Any = 1,
        ledger_threshold_pct: float = 5.0,
        clock: Callable[[], dt.datetime] = utc_now,
        interval_s: float = TICK_S,
    ) -> None:
        self.engine, self.schedules, self.send, self.clock = engine, schedules, send, clock
        self.gpu_cost_share, self.ledger_threshold_pct = gpu_cost_share, ledger_threshold_pct
        self.interval_s = interval_s

    def run(self) -> list[tuple[str, str]]:
        """One tick: send what is due; returns the (schedule, period) pairs sent."""
        now = self.clock()
        sent = []
        for schedule in self.schedules:
            period = due_period(schedule, now)
            if period is None:
                continue
            if not _claim(self.engine, schedule.name, period, now):
                self._warn_unsent(schedule, period)
                continue
            try:
                self._deliver(schedule, period, now)
            except Exception as exc:  # noqa: BLE001  (released: tried again at the next tick)
                with self.engine.begin() as conn:
                    conn.execute(
                        delete(_DELIVERY).where(
                            _DELIVERY.c.name == schedule.name, _DELIVERY.c.period == period.label
                        )
                    )
                log.error(
                    "scheduled report not sent", report=schedule.name, period=period.label, error=str(exc)
                )
                continue
            sent.append((schedule.name, period.label))
        return sent

    def _deliver(self, schedule: ReportSchedule, period: Period, now: dt.datetime) -> None:
        with self.engine.connect() as conn:
            report = build_report(
                conn,
                period,
                schedule.scope,
                schedule.currency,
                generated_at=now,
                software_version=software_version(),
                gpu_cost_share=self.gpu_cost_share,
                ledger_threshold_pct=self.ledger_threshold_pct,
            )
        mail = render_email(schedule, report)
        self.send(schedule.to, mail.subject, mail.text, html=mail.html, attachments=mail.attachments)
        with self.engine.begin() as conn:
            conn.execute(
                update(_DELIVERY)
                .where(_DELIVERY.c.name == schedule.name, _DELIVERY.c.period == period.label)
                .values(sent_at=self.clock(), recipients=len(schedule.to))
            )
        log.info(
            "scheduled report sent", report=schedule.name, period=period.label, recipients=len(schedule.to)
        )

    def _warn_unsent(self, schedule: ReportSchedule, period: Period) -> None:
        with self.engine.connect() as conn:
            sent_at = conn.execute(
                select(_DELIVERY.c.sent_at).where(
                    _DELIVERY.c.name == schedule.name, _DELIVERY.c.period == period.label
                )
            ).scalar_one_or_none()
        if sent_at is None:
            log.warning(
                "scheduled report claimed but never sent (the process stopped while sending); not resent",
                report=schedule.name,
                period=period.label,
            )


def report_sender(
    engine: Engine, settings: Any, *, clock: Callable[[], dt.datetime] = utc_now
) -> ReportSender | None:
    """The sender of ``settings.reports`` through ``settings.smtp`` (None without reports)."""
    schedules = [s for s in getattr(settings, "reports", []) if s.enabled]
    if not schedules:
        return None
    smtp = settings.smtp
    if smtp is None:
        raise ValueError("[[reports]] are configured but there is no [smtp] table to send them through")
    from service.notify.email import send_email

    def send(to: list[str], subject: str, text: str, **kw: Any) -> None:
        send_email(smtp, to, subject, text, **kw)

    return ReportSender(
        engine,
        schedules,
        send,
        gpu_cost_share=settings.gpu_cost_share,
        ledger_threshold_pct=settings.idle_threshold_pct,
        clock=clock,
    )
