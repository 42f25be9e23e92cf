"""The report as one self-contained HTML file: inline CSS, charts as inline SVG, no script.

Rendered by Jinja2 with autoescaping on (project, team and workload names are user data) and
``StrictUndefined`` (a misspelt field fails the render instead of printing nothing). Each figure
shows rounded and carries its exact value in ``data-value`` (tests and scrapers read those).
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

import jinja2

from service.reports.build import Report
from service.reports.charts import bar_chart, daily_chart

CHART_BARS = 12
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("service.reports", "templates"),
    autoescape=True,  # every template: HTML
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _money(value: Decimal | None, places: int = 2) -> str:
    if value is None:
        return "–"
    return f"{value.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN):,}"


def _exact(value: Decimal | float | None) -> str:
    if value is None:
        return ""
    return format(value, "f") if isinstance(value, Decimal) else repr(value)


def _hours(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _pct(value: float | Decimal | None) -> str:
    return "–" if value is None else f"{float(value):,.1f} %"


def _name(value: str | None, none: str = "(none)") -> str:
    return none if value is None else value


_ENV.filters.update(money=_money, exact=_exact, hours=_hours, pct=_pct, name=_name)


def render_html(report: Report) -> str:
    """The report page (UTF-8 text)."""
    previous_mean = (
        None
        if report.trend.previous_cost is None
        else report.trend.previous_cost / Decimal(report.period.previous().days)
    )
    projects = [
        ("(unallocated)" if p.unallocated else _name(p.project, "(no project)"), max(p.cost, Decimal(0)))
        for p in report.projects[:CHART_BARS]
    ]
    effective = [
        (f"{_name(e.environment)} · {_name(e.gpu_model)}", e.cost_per_effective_gpu_hour or Decimal(0))
        for e in report.effective[:CHART_BARS]
    ]
    return _ENV.get_template("report.html.j2").render(
        r=report,
        daily=daily_chart(report.trend.days, previous_mean),
        project_chart=bar_chart(projects),
        effective_chart=bar_chart(effective),
        idle_share=(
            None
            if not report.totals.cost
            else (report.totals.idle_cost * 100 / report.totals.cost).quantize(Decimal("0.1"))
        ),
    )
