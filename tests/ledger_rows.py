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
from sqlalchemy import Engine, func, select
from sqlmodel import Session

from service.ledger import store, version
from service.models import LedgerHour
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


def rebuild_days(engine: Engine) -> None:
    """ledger_day from ledger_hour, exactly as ingest maintains it."""
    with engine.begin() as conn:
        days = select(func.min(LedgerHour.day_index), func.max(LedgerHour.day_index))
        first, last = conn.execute(days).one()
        if first is not None:
            store.rebuild_days(conn, first, last)
        version.bump(conn)  # as every writer does: cached answers of the running app are stale


@pytest.fixture
def put(engine: Engine) -> Callable[[Iterable[Any]], None]:
    """Insert rows (LedgerHour, FxRate, Device, …) and rebuild the daily rollup."""

    def _put(rows: Iterable[Any]) -> None:
        with Session(engine) as session:
            session.add_all(list(rows))
            session.commit()
        rebuild_days(engine)

    return _put
