"""At ingest, a device whose source names no vendor gets the one its model says; a source that
names one keeps it; a model nobody recognises stays NULL — on the device, every ledger row and the
group rollups answers read by vendor (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import ClassVar, Literal

from sqlalchemy import Engine, func, select

from connectors.sdk import ConnectorConfig, DeviceInfo, SampleBatch, Sampling
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerGroupDay, LedgerHour

H10 = dt.datetime(2025, 12, 1, 10, tzinfo=dt.UTC)
DEVICES = [
    DeviceInfo("npu-0", "onprem", gpu_model="Ascend 910B3"),  # no vendor: from the model
    DeviceInfo("GPU-1", "onprem", gpu_model="NVIDIA H100 80GB HBM3"),
    DeviceInfo("board-2", "onprem", gpu_model="102-D65208-0C"),  # a part number: nobody can tell
    DeviceInfo("board-3", "onprem", gpu_model="102-D65208-0C", vendor="amd"),  # its source knows
]


class _Fleet:
    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = ConnectorConfig
    sampling = Sampling.every(60.0)

    def discover(self) -> list[DeviceInfo]:
        return DEVICES

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        ts = [int(H10.timestamp() * 1000) + 60_000 * i for i in range(61)]  # 10:00 … 11:00
        n = len(ts)
        columns = {
            "device_id": [d.device_id for d in DEVICES for _ in ts],
            "ts_ms": ts * len(DEVICES),
            "metric": ["gpu_util"] * n * len(DEVICES),
            "value": [50.0] * n * len(DEVICES),
            "workload_key": [""] * n * len(DEVICES),
            "share": [1.0] * n * len(DEVICES),
        }
        yield SampleBatch.from_columns(columns, DEVICES)


def test_vendor_from_the_source_else_the_model_on_devices_rows_and_rollups(engine: Engine) -> None:
    ingest_window(engine, "fleet", _Fleet(), H10, H10 + dt.timedelta(hours=1))
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
