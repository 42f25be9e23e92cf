"""Hand-built ledger rows for the analytics and API tests: exact values in, exact answers out.

``row(h, device, workload, **columns)`` is one ``ledger_hour`` row ``h`` hours after ``D0``;
``put`` (a fixture: import it into a conftest) inserts rows and rebuilds ``ledger_day`` from
``ledger_hour`` the way ingest maintains it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, case, func, insert, select
from sqlmodel import Session

from service.metrics_catalog import HIST_COLUMNS
from service.models import LedgerDay, LedgerHour
from service.timeutil import hour_index, month_index

D0 = dt.datetime(2025, 1, 6, tzinfo=dt.UTC)  # a Monday


def at(hours: float) -> dt.datetime:
    return D0 + dt.timedelta(hours=hours)


def row(h: int, device: str = "GPU-a", workload: str = "", **kw: Any) -> LedgerHour:
    """One ledger hour ``h`` hours after D0; seconds default to a fully observed, busy-free hour."""
    start = at(h)
    values: dict[str, Any] = {
        "source": "test",
        "device_id": device,
        "workload_key": workload,
        "environment": "onprem",
        "gpu_model": "H200",
        "default_metric": "sm_active",
        "present_s": 3600.0,
        "observed_s": 3600.0,
        "hour_start": start,
        "hour_index": hour_index(start),
        "day_index": hour_index(start) // 24,
        "month_index": month_index(start),
        "currency": "USD",
        "rate_source": "tco:site-1",
    }
    if workload:
        values["workload"] = workload
    values.update(kw)
    for k in ("cost", "idle_cost"):
        if isinstance(values.get(k), str | int):
            values[k] = Decimal(values[k])
    return LedgerHour(**values)


_SUMMED = [
    "present_s", "observed_s", "busy_s", "idle_s", *HIST_COLUMNS,
    *(f"{p}_s_{m}" for m in ("gpu_util", "sm_active", "tensor_active", "mem_bw")
      for p in ("obs", "busy", "idle")),
    "energy_j", "cost", "idle_cost", "energy_cost",
]  # fmt: skip
_MAXED = ["mem_used_max_b", "mem_total_b", "temp_max_c"]


def rebuild_days(engine: Engine) -> None:
    """ledger_day = ledger_hour summed per (device, day, workload): what ingest maintains."""
    h = LedgerHour.__table__  # type: ignore[attr-defined]
    d = LedgerDay.__table__  # type: ignore[attr-defined]
    keys = ["device_id", "day_index", "workload_key"]
    dims = [c.name for c in d.columns if c.name not in {*keys, *_SUMMED, *_MAXED, "id", "hours"}]
    cols = (
        [h.c[k] for k in keys]
        + [func.min(h.c[c]).label(c) for c in dims if c != "energy_estimated"]
        + [
            case((func.max(case((h.c.energy_estimated, 1), else_=0)) == 1, True), else_=False).label(
                "energy_estimated"
            )
        ]
        + [func.sum(h.c[c]).label(c) for c in _SUMMED]
        + [func.max(h.c[c]).label(c) for c in _MAXED]
        + [func.count().label("hours")]
    )
    names = [c.name for c in cols]
    with engine.begin() as conn:
        conn.execute(d.delete())
        conn.execute(insert(d).from_select(names, select(*cols).group_by(*(h.c[k] for k in keys))))


@pytest.fixture
def put(engine: Engine) -> Callable[[Iterable[Any]], None]:
    """Insert rows (LedgerHour, FxRate, Device, …) and rebuild the daily rollup."""

    def _put(rows: Iterable[Any]) -> None:
        with Session(engine) as session:
            session.add_all(list(rows))
            session.commit()
        rebuild_days(engine)

    return _put
