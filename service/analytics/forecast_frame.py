"""A :class:`~service.analytics.forecast.Forecast` as one flat table: a row per (group, measure,
currency, day), for files and BI tools.

Columns: ``day`` (UTC midnight), one per grouped dimension (``project`` …), ``measure``
(``gpu_hours``, ``effective_gpu_hours``, ``cost``), ``currency`` (null for hours), ``model``,
``value``, then ``lower_<level>`` and ``upper_<level>`` per interval level (``lower_80``,
``upper_97_5`` …). Numbers are ``Decimal(38, 9)``, each rounded half-even to 1e-9 from the
model's double, so money stays a decimal in CSV and Parquet alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import polars as pl

from service.analytics.dims import Dimension
from service.analytics.forecast import Forecast, GroupForecast
from service.analytics.forecast_model import SeriesForecast
from service.money import quantize

DECIMAL = pl.Decimal(38, 9)


def level_name(level: float) -> str:
    return f"{level:g}".replace(".", "_")


def _rows(
    f: Forecast, g: GroupForecast, measure: str, currency: str | None, s: SeriesForecast
) -> list[list[object]]:
    dims = [v for _, v in g.dims]
    out: list[list[object]] = []
    for h in range(f.horizon_days):
        bounds: list[Decimal] = []
        for lv in f.levels:
            lo, hi = s.bounds[lv]
            bounds += [quantize(float(lo[h])), quantize(float(hi[h]))]
        out.append([f.day(h), *dims, measure, currency, s.model, quantize(float(s.mean[h])), *bounds])
    return out


def forecast_frame(f: Forecast, group_by: Sequence[Dimension]) -> pl.DataFrame:
    """The flat table of ``f`` (see the module docstring)."""
    numbers = ["value"] + [f"{side}_{level_name(lv)}" for lv in f.levels for side in ("lower", "upper")]
    schema: dict[str, pl.DataType | type[pl.DataType]] = {"day": pl.Datetime("us", "UTC")}
    schema |= {d.name.lower(): pl.String for d in group_by}
    schema |= {"measure": pl.String, "currency": pl.String, "model": pl.String}
    schema |= {name: DECIMAL for name in numbers}
    rows: list[list[object]] = []
    for g in f.groups:
        rows += _rows(f, g, "gpu_hours", None, g.gpu_hours)
        rows += _rows(f, g, "effective_gpu_hours", None, g.effective_gpu_hours)
        for currency, s in g.cost:
            rows += _rows(f, g, "cost", currency, s)
    return pl.DataFrame(rows, schema=schema, orient="row")
