"""The report as one tidy CSV: one measured value per row, every row self-describing.

Columns (docs/reports.md): ``section, period, scope, currency, day, project, team, workload,
environment, gpu_model, allocation, status, measure, value, unit``. A spreadsheet filters or
pivots on ``section`` and ``measure``; blank cells are dimensions a section does not have. Money
is written exact (``Decimal``, 9 places, never a float), GPU-hours with 6 decimal places.

Text that a spreadsheet would take for a formula (a name starting with ``=``, ``+``, ``-``, ``@``,
tab or carriage return) is written with a leading apostrophe, so opening the file never runs one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from service.reports.build import Report

COLUMNS = (
    "section", "period", "scope", "currency", "day", "project", "team", "workload", "environment",
    "gpu_model", "allocation", "status", "measure", "value", "unit",
)  # fmt: skip
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GPU_H = "gpu_hours"


def _text(value: str | None) -> str:
    if value is None:
        return ""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _number(value: Decimal | float | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    # GPU-hours are sums of seconds ÷ 3600 in binary floating point: 6 places (a millisecond of a
    # GPU-hour is 3.6 s) keep every digit that means something and none of the float's noise.
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def _rows(r: Report) -> Iterator[dict[str, Any]]:
    cur = r.currency or ""
    base = {"period": r.period.label, "scope": r.scope.label, "currency": cur}

    def row(section: str, measure: str, value: Any, unit: str, **dims: str | None) -> dict[str, Any]:
        shown = _text(value) if isinstance(value, str) else _number(value)
        cells = {k: _text(v) for k, v in dims.items()}
        return {**base, **cells, "section": section, "measure": measure, "value": shown, "unit": unit}

    meta = {
        "period_start": r.period.start.isoformat(),
        "period_end": r.period.end.isoformat(),
        "generated_at": r.generated_at.isoformat(),
        "software_version": r.software_version,
        "data_version": str(r.data_version),
        "converted": "true" if r.converted else "false",
        "utilization_metric": r.totals.metric,
    }
    for name, value in meta.items():
        yield row("meta", name, value, "")
    t = r.totals
    totals: list[tuple[str, Decimal | float | None, str]] = [
        ("cost", t.cost, cur),
        ("idle_cost", t.idle_cost, cur),
        ("allocated_idle_cost", t.allocated_idle_cost, cur),
        ("unallocated_idle_cost", t.unallocated_idle_cost, cur),
        ("gpu_hours", t.gpu_hours, GPU_H),
        ("effective_gpu_hours", t.effective_gpu_hours, GPU_H),
        ("idle_gpu_hours", t.idle_gpu_hours, GPU_H),
        ("allocated_idle_gpu_hours", t.allocated_idle_gpu_hours, GPU_H),
        ("unallocated_idle_gpu_hours", t.unallocated_idle_gpu_hours, GPU_H),
        ("unpriced_gpu_hours", t.unpriced_gpu_hours, GPU_H),
        ("cost_per_gpu_hour", t.cost_per_gpu_hour, f"{cur}/gpu_hour"),
        ("cost_per_effective_gpu_hour", t.cost_per_effective_gpu_hour, f"{cur}/effective_gpu_hour"),
    ]
    for measure, amount, unit in totals:
        yield row("total", measure, amount, unit)
    for p in r.projects:
        dims = {"project": p.project, "allocation": "unallocated" if p.unallocated else "allocated"}
        yield row("project", "cost", p.cost, cur, **dims)
        yield row("project", "idle_cost", p.idle_cost, cur, **dims)
        yield row("project", "gpu_hours", p.gpu_hours, GPU_H, **dims)
        yield row("project", "effective_gpu_hours", p.effective_gpu_hours, GPU_H, **dims)
        yield row("project", "cost_per_effective_gpu_hour", p.cost_per_effective_gpu_hour,
                  f"{cur}/effective_gpu_hour", **dims)  # fmt: skip
    for e in r.effective:
        dims = {"environment": e.environment, "gpu_model": e.gpu_model}
        yield row("effective_cost", "cost", e.cost, cur, **dims)
        yield row("effective_cost", "gpu_hours", e.gpu_hours, GPU_H, **dims)
        yield row("effective_cost", "effective_gpu_hours", e.effective_gpu_hours, GPU_H, **dims)
        yield row("effective_cost", "cost_per_gpu_hour", e.cost_per_gpu_hour, f"{cur}/gpu_hour", **dims)
        yield row("effective_cost", "cost_per_effective_gpu_hour", e.cost_per_effective_gpu_hour,
                  f"{cur}/effective_gpu_hour", **dims)  # fmt: skip
    for w in r.top_idle:
        dims = {"project": w.project, "team": w.team, "workload": w.workload}
        yield row("top_idle_workload", "idle_gpu_hours", w.idle_gpu_hours, GPU_H, **dims)
        yield row("top_idle_workload", "idle_cost", w.idle_cost, cur, **dims)
        yield row("top_idle_workload", "gpu_hours", w.gpu_hours, GPU_H, **dims)
        yield row("top_idle_workload", "cost", w.cost, cur, **dims)
    for d in r.trend.days:
        yield row("daily", "cost", d.cost, cur, day=d.day.isoformat())
        yield row("daily", "idle_cost", d.idle_cost, cur, day=d.day.isoformat())
    if r.trend.previous_cost is not None:
        yield row("previous_period", "cost", r.trend.previous_cost, cur, status=r.trend.previous_label)
        yield row("previous_period", "change", r.trend.change, cur, status=r.trend.previous_label)
        yield row("previous_period", "change_pct", r.trend.change_pct, "pct", status=r.trend.previous_label)
    if r.reconciliation is not None:
        for line in r.reconciliation.lines:
            dims = {"status": line.status}
            money = {**base, "currency": line.currency}
            figures: list[tuple[str, Decimal | float | int, str]] = [
                ("resources", line.resources, "count"),
                ("billed_gpu_hours", line.billed_gpu_hours, GPU_H),
                ("metered_gpu_hours", line.metered_gpu_hours, GPU_H),
                ("billed_cost", line.billed_cost, line.currency),
                ("ledger_cost", line.ledger_cost, line.currency),
            ]
            for measure, figure, unit in figures:
                yield {**row("reconciliation", measure, figure, unit, **dims), **money}
        for currency, amount in r.reconciliation.unmonitored_spend.items():
            yield {**row("unmonitored_spend", "cost", amount, currency), "currency": currency}
        yield row("unmonitored_spend", "gpu_hours", r.reconciliation.unmonitored_gpu_hours, GPU_H)


def render_csv(report: Report) -> str:
    """The CSV text (RFC 4180: CRLF line ends, a header row)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, restval="")
    writer.writeheader()
    writer.writerows(_rows(report))
    return out.getvalue()
