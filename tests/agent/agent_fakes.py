"""A deterministic node for agent tests: GPUs whose readings are a pure function of time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from connectors.base import SAMPLE_SCHEMA, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from service.timeutil import from_ms, to_ms

GIB = 1024**3
METRICS = ("gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b", "mem_total_b", "temp_c")


class FakeClock:
    """Now is whatever the test says; ``sleep`` moves it (and runs ``on_sleep`` first)."""

    def __init__(self, now: dt.datetime, on_sleep: Callable[[dt.datetime], None] | None = None):
        self.now, self.on_sleep = now, on_sleep

    def __call__(self) -> dt.datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)
        if self.on_sleep is not None:
            self.on_sleep(self.now)


class FakeSampler:
    """``n`` H200s on node ``host``; even GPUs run 30-minute pods, odd GPUs are free."""

    def __init__(self, clock: Callable[[], dt.datetime], n: int = 4, host: str = "node-a"):
        self.clock, self.n, self.host = clock, n, host

    def devices(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                device_id=f"GPU-{self.host}-{i}",
                environment="onprem",
                region="dc1",
                cluster="c1",
                node=self.host,
                gpu_model="NVIDIA H200",
                gpu_index=i,
                tdp_w=700.0,
            )
            for i in range(self.n)
        ]

    def pci_bus_id(self, device_id: str) -> str:
        return f"00000000:{0x18 + int(device_id.rsplit('-', 1)[1]):02X}:00.0"

    def readings(self, ts_ms: int) -> SampleBatch:
        """Every GPU's reading at ``ts_ms``."""
        i = np.arange(self.n)
        slot = ts_ms // 5000
        util = ((i * 17 + slot * 7) % 101).astype(np.float64)
        job = ts_ms // 1_800_000
        keys = [f"k8s:team-a/train-{job + k}/main" if k % 2 == 0 else "" for k in range(self.n)]
        values = {
            "gpu_util": util,
            "sm_active": util * 0.8,
            "power_w": 100.0 + 5.0 * util,
            "energy_j": i * 1e6 + (ts_ms / 1000) * 300.0,
            "mem_used_b": (i + 1) * 10.0 * GIB,
            "mem_total_b": np.full(self.n, 141.0 * GIB),
            "temp_c": 40.0 + (util // 4),
        }
        frame = pl.DataFrame(
            {
                "device_id": [d.device_id for d in self.devices()] * len(METRICS),
                "ts_ms": [ts_ms] * (self.n * len(METRICS)),
                "metric": [m for m in METRICS for _ in range(self.n)],
                "value": np.concatenate([values[m] for m in METRICS]),
                "workload_key": keys * len(METRICS),
                "share": [1.0] * (self.n * len(METRICS)),
            },
            schema=SAMPLE_SCHEMA,
        )
        workloads = [
            WorkloadInfo(k, project="llm", team="research", namespace="team-a", workload=k.split("/")[1])
            for k in sorted(set(keys) - {""})
        ]
        return SampleBatch(frame, self.devices(), workloads)

    def sample(self) -> SampleBatch:
        return self.readings(to_ms(self.clock()))


class ReferenceConnector:
    """What an uninterrupted agent would have delivered: the sampler's readings on the grid
    ``start + k × period_s`` for ``[start, end)``, as a metrics connector."""

    kind = "metrics"

    def __init__(self, sampler: FakeSampler, start: dt.datetime, end: dt.datetime, period_s: float):
        self.sampler, self.sampling = sampler, Sampling.every(period_s)
        step = round(period_s * 1000)
        self.grid = range(to_ms(start), to_ms(end), step)

    def discover(self) -> list[DeviceInfo]:
        return self.sampler.devices()

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        lo, hi = to_ms(start), to_ms(end)
        batches = [self.sampler.readings(t) for t in self.grid if lo <= t < hi]
        if batches:
            workloads = {w.workload_key: w for b in batches for w in b.workloads}
            yield SampleBatch(
                pl.concat([b.samples for b in batches]), self.sampler.devices(), list(workloads.values())
            )


def at(ms: int) -> dt.datetime:
    return from_ms(ms)


class CliSampler(FakeSampler):
    """``source = "agent_fakes:CliSampler"``: the fake node on the real clock, built from options."""

    def __init__(self, options: dict[str, object]):
        super().__init__(lambda: dt.datetime.now(dt.UTC), n=int(options.get("gpus", 2)))  # type: ignore[call-overload]
