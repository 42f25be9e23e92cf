"""Chart geometry for the HTML report: numbers only, computed here; the template draws them as
inline SVG (no script, no fonts or files from elsewhere: it renders offline and in mail clients).

Every bar carries its label and exact amount for the template to print; names are user data and
are escaped by the template, never placed into markup here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from service.reports.build import DayCost


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: Decimal


@dataclass(frozen=True)
class DailyChart:
    width: int
    height: int
    top: float
    bottom: float
    left: float
    #: Busy (cost − idle cost) and idle part of each day, stacked.
    busy: list[Bar]
    idle: list[Bar]
    max_value: Decimal
    #: Height of the previous period's daily mean (None without one).
    previous_mean_y: float | None
    previous_mean: Decimal | None
    ticks: list[tuple[float, str]]


def _nice_ceiling(value: Decimal) -> Decimal:
    """The smallest 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10^k at or above ``value``: an axis maximum
    people read easily."""
    if value <= 0:
        return Decimal(1)
    exponent = value.adjusted()
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        candidate = Decimal(str(step)).scaleb(exponent)
        if candidate >= value:
            return candidate
    return Decimal(10).scaleb(exponent)  # pragma: no cover  (the loop always returns)


def daily_chart(
    days: list[DayCost], previous_mean: Decimal | None, width: int = 760, height: int = 240
) -> DailyChart:
    left, top, bottom = 64.0, 12.0, 28.0
    plot_w, plot_h = width - left - 8, height - top - bottom
    peak = max([d.cost for d in days] + [previous_mean or Decimal(0)], default=Decimal(0))
    axis = _nice_ceiling(peak)
    step = plot_w / max(len(days), 1)
    bar_w = max(step * 0.72, 1.0)

    def y_of(value: Decimal) -> float:
        return top + plot_h - float(value / axis) * plot_h

    busy, idle = [], []
    for n, d in enumerate(days):
        x = left + n * step + (step - bar_w) / 2
        idle_part = min(max(d.idle_cost, Decimal(0)), max(d.cost, Decimal(0)))
        busy_part = max(d.cost, Decimal(0)) - idle_part
        y_busy = y_of(busy_part)
        label = d.day.isoformat()
        busy.append(Bar(x, y_busy, bar_w, top + plot_h - y_busy, label, busy_part))
        y_idle = y_of(busy_part + idle_part)
        idle.append(Bar(x, y_idle, bar_w, y_busy - y_idle, label, idle_part))
    ticks = [(y_of(axis * k / 4), f"{axis * k / 4:,.2f}") for k in range(5)]
    return DailyChart(
        width=width,
        height=height,
        top=top,
        bottom=top + plot_h,
        left=left,
        busy=busy,
        idle=idle,
        max_value=axis,
        previous_mean_y=None if previous_mean is None else y_of(previous_mean),
        previous_mean=previous_mean,
        ticks=ticks,
    )


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    label_w: float
    bars: list[Bar]


def bar_chart(items: list[tuple[str, Decimal]], width: int = 760, row_h: int = 22) -> BarChart:
    """Horizontal bars, one per (label, value ≥ 0), longest = the largest value."""
    label_w = 240.0
    plot_w = width - label_w - 120
    peak = max((v for _, v in items), default=Decimal(0))
    bars = []
    for n, (label, value) in enumerate(items):
        length = float(value / peak) * plot_w if peak > 0 and value > 0 else 0.0
        bars.append(Bar(label_w, n * row_h + 3, length, row_h - 6, label, value))
    return BarChart(width, len(items) * row_h + 4, label_w, bars)
