"""At ingest, a device whose source names no vendor gets the one its model says; a source that
names one keeps it; a model nobody recognises stays NULL — on the device, every ledger row and the
group rollups answers read by vendor (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Engine, func, select
from vendor_fleet import H10, Fleet

from service.ledger.ingest import ingest_window
from service.models import Device, LedgerGroupDay, LedgerHour


def test_vendor_from_the_source_else_the_model_on_devices_rows_and_rollups(engine: Engine) -> None:
    ingest_window(engine, "fleet", Fleet(), H10, H10 + dt.timedelta(hours=1))
    expected = {"npu-0": "huawei", "GPU-1": "nvidia", "board-2": None, "board-3": "amd"}
    with engine.connect() as conn:
        assert dict(conn.execute(select(Device.device_id, Device.vendor)).all()) == expected
        hours = select(LedgerHour.device_id, LedgerHour.vendor, LedgerHour.present_s)  # type: ignore[call-overload]
        assert {r[0]: (r[1], r[2]) for r in conn.execute(hours)} == {
            d: (v, 3600.0) for d, v in expected.items()
        }
        by_vendor = select(LedgerGroupDay.vendor, func.sum(LedgerGroupDay.present_s)).group_by(
            LedgerGroupDay.vendor
        )  # type: ignore[call-overload]
        assert dict(conn.execute(by_vendor).all()) == {
            "huawei": 3600.0,
            "nvidia": 3600.0,
            None: 3600.0,
            "amd": 3600.0,
        }
