"""A four-device fleet for the vendor tests: models each vendor names, a part number nobody can
tell, and a device whose source names its vendor itself; one hour at 50 % GPU util."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import ClassVar, Literal

from connectors.sdk import ConnectorConfig, DeviceInfo, SampleBatch, Sampling

H10 = dt.datetime(2025, 12, 1, 10, tzinfo=dt.UTC)
DEVICES = [
    DeviceInfo("npu-0", "onprem", gpu_model="Ascend 910B3"),  # no vendor: from the model
    DeviceInfo("GPU-1", "onprem", gpu_model="NVIDIA H100 80GB HBM3"),
    DeviceInfo("board-2", "onprem", gpu_model="102-D65208-0C"),  # a part number: nobody can tell
    DeviceInfo("board-3", "onprem", gpu_model="102-D65208-0C", vendor="amd"),  # its source knows
]


class Fleet:
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
