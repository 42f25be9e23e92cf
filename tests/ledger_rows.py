"""Hand-built ledger rows for the analytics and API tests: exact values in, exact answers out.

``row(h, device, workload, **columns)`` is one ``ledger_hour`` row ``h`` hours after ``D0``;
``put`` (a fixture: import it into a conftest) inserts rows and rebuilds ``ledger_day`` from
``ledger_hour`` the way ingest maintains it. ``hour_rows`` and ``row_checker`` read an ingest's
rows back and check columns of one of them.
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


HourKey = tuple[str, int, str]  # (device_id, hour of the day, workload_key)


def hour_rows(engine: Engine) -> dict[HourKey, dict[str, Any]]:
    """Every ``ledger_hour`` row by (device, hour of the day, workload)."""
    with engine.connect() as conn:
        rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
    return {(r["device_id"], r["hour_start"].hour, r["workload_key"]): dict(r) for r in rows}


def row_checker(rows: dict[HourKey, dict[str, Any]]) -> Callable[..., None]:
    """``check(key, column=value, …)``: floats to 1e-3, everything else exactly."""

    def check(key: HourKey, **expected: object) -> None:
        row = rows[key]
        for column, value in expected.items():
            if isinstance(value, float):
                assert row[column] == pytest.approx(value, abs=1e-3), (key, column)
            else:
                assert row[column] == value, (key, column)

    return check
