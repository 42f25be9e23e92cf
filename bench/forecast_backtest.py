"""Backtest of ``forecast`` on the synthetic fleet with a known growth (docs/forecast.md).

    .venv/bin/python bench/forecast_backtest.py [--scale 2] [--growth-pct 5] [--weeks 8] [--holdout 14]
                                                [--period-s 1800] [--database URL]

Ingests ``weeks`` weeks + ``holdout`` days of the synthetic fleet (``scale`` copies of each pool,
nodes coming online so the fleet grows ``growth-pct`` % a week, priced like the demo) into a
throwaway SQLite database (or ``--database``), forecasts the held-out days from the weeks before
them, per group (the whole fleet, per environment, per team), and compares with what the ledger
holds for those days: MAPE of the daily point forecasts and the share of days inside the 80 % and
95 % intervals, per measure. Prints one JSON object (the figures docs/forecast.md quotes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1]))

from connectors.synthetic import SyntheticConfig, SyntheticConnector  # noqa: E402
from service.analytics import forecast as forecast_q  # noqa: E402
from service.analytics.access import ALL  # noqa: E402
from service.analytics.dims import Dimension, Granularity  # noqa: E402
from service.analytics.query import LedgerQuery  # noqa: E402
from service.analytics.window import check_window  # noqa: E402
from service.bootstrap import prepare  # noqa: E402
from service.db import make_engine  # noqa: E402
from service.demo import with_demo  # noqa: E402
from service.ledger.ingest import ingest_window  # noqa: E402
from service.settings import Settings  # noqa: E402

#: A Monday, so the held-out fortnight is two whole weeks.
START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
GROUPINGS: dict[str, tuple[Dimension, ...]] = {
    "fleet": (),
    "environment": (Dimension.ENVIRONMENT,),
    "team": (Dimension.TEAM,),
}
LEVELS = (80.0, 95.0)


def load(url: str, *, scale: int, growth_pct: float, days: int, period_s: float) -> dict[str, Any]:
    """Ingest ``days`` days of the growing fleet from :data:`START` into ``url``."""
    end = START + dt.timedelta(days=days)
    config = SyntheticConfig(
        name="growth",
        seed=42,
        scale=scale,
        period_s=period_s,
        growth_pct_per_week=growth_pct,
        growth_until=end + dt.timedelta(days=28),  # still growing through the held-out days
    )
    settings = with_demo(Settings(database_url=url))
    engine = make_engine(url)
    prepare(engine, settings)
    started = time.perf_counter()
    connector = SyntheticConnector(config, clock=lambda: end)
    ingest_window(engine, config.name, connector, START, end, sites=settings.sites)
    engine.dispose()
    return {"ingest_s": round(time.perf_counter() - started, 1), "gpus": len(connector.discover())}


def _actual(conn: Any, q: LedgerQuery) -> forecast_q.History:
    return forecast_q.history(conn, q, None, "USD")


def evaluate(url: str, *, weeks: int, holdout: int) -> dict[str, Any]:
    """Forecast the last ``holdout`` days from the ``weeks`` weeks before them, per grouping."""
    engine = make_engine(url)
    cut = START + dt.timedelta(weeks=weeks)
    past = check_window(START, cut, max_days=1000)
    future = check_window(cut, cut + dt.timedelta(days=holdout), max_days=1000)
    errors: dict[str, list[float]] = {"gpu_hours": [], "effective_gpu_hours": [], "cost": []}
    inside: dict[str, dict[float, list[bool]]] = {k: {lv: [] for lv in LEVELS} for k in errors}
    fits_s = 0.0
    per_grouping: dict[str, int] = {}
    with engine.connect() as conn:
        for name, group_by in GROUPINGS.items():
            q = LedgerQuery(past, Granularity.DAY, group_by, access=ALL)
            started = time.perf_counter()
            f = forecast_q.forecast(conn, q, holdout, LEVELS, currency="USD")
            fits_s += time.perf_counter() - started
            truth = _actual(conn, LedgerQuery(future, Granularity.DAY, group_by, access=ALL))
            index = {dims: g for g, dims in enumerate(truth.groups)}
            per_grouping[name] = len(f.groups)
            for g in f.groups:
                t = index.get(g.dims)
                if t is None:
                    continue
                money = truth.cost.get((t, "USD"), [Decimal(0)] * holdout)
                series = {
                    "gpu_hours": (g.gpu_hours, truth.gpu_hours[t]),
                    "effective_gpu_hours": (g.effective_gpu_hours, truth.effective_gpu_hours[t]),
                    "cost": (dict(g.cost)["USD"], np.array([float(a) for a in money])),
                }
                for measure, (s, actual) in series.items():
                    keep = actual > 0  # MAPE is undefined on a day of 0
                    errors[measure] += list(np.abs(s.mean[keep] - actual[keep]) / actual[keep])
                    for lv in LEVELS:
                        lo, hi = s.bounds[lv]
                        inside[measure][lv] += list((lo <= actual) & (actual <= hi))
    engine.dispose()
    return {
        "groups": per_grouping,
        "fit_s": round(fits_s, 2),
        "mape_pct": {k: round(100 * float(np.mean(v)), 2) for k, v in errors.items()},
        "coverage_pct": {
            k: {f"{lv:g}": round(100 * float(np.mean(v)), 1) for lv, v in by.items()}
            for k, by in inside.items()
        },
        "points": {k: len(v) for k, v in errors.items()},
    }


def growth_seen(url: str, *, weeks: int, holdout: int) -> float:
    """The fleet's GPU-hours of the last week over its first week, per week (compounded), in %."""
    engine = make_engine(url)
    window = check_window(START, START + dt.timedelta(weeks=weeks, days=holdout), max_days=1000)
    with engine.connect() as conn:
        h = _actual(conn, LedgerQuery(window, Granularity.DAY, (), access=ALL))
    engine.dispose()
    first, last = h.gpu_hours[0, :7].sum(), h.gpu_hours[0, -7:].sum()
    span_weeks = (h.days - 7) / 7
    return round(100 * ((last / first) ** (1 / span_weeks) - 1), 2)


def backtest(
    url: str | None = None,
    *,
    scale: int = 2,
    growth_pct: float = 5.0,
    weeks: int = 8,
    holdout: int = 14,
    period_s: float = 1800.0,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="h2-backtest-") as tmp:
        db = url or f"sqlite:///{tmp}/backtest.db"
        loaded = load(db, scale=scale, growth_pct=growth_pct, days=7 * weeks + holdout, period_s=period_s)
        result = evaluate(db, weeks=weeks, holdout=holdout)
        seen = growth_seen(db, weeks=weeks, holdout=holdout)
    config = {"scale": scale, "growth_pct_per_week": growth_pct, "weeks": weeks, "holdout_days": holdout}
    return {**config, "period_s": period_s, **loaded, "growth_seen_pct_per_week": seen, **result}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--growth-pct", type=float, default=5.0)
    parser.add_argument("--weeks", type=int, default=8)
    parser.add_argument("--holdout", type=int, default=14)
    parser.add_argument("--period-s", type=float, default=1800.0)
    parser.add_argument(
        "--database", default=None, help="an empty database URL (default: a temporary SQLite)"
    )
    a = parser.parse_args()
    result = backtest(
        a.database,
        scale=a.scale,
        growth_pct=a.growth_pct,
        weeks=a.weeks,
        holdout=a.holdout,
        period_s=a.period_s,
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
