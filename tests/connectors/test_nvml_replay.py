"""NvmlSampler against the fake NVML replaying the H200 traces: exact samples."""

from __future__ import annotations

import polars as pl
import pytest
from nvml.fake_nvml_lib import FakeNvml
from nvml.h200_replay import H200_MEM_TOTAL_B, gpm_probe_states, h200, nvml_probe_states, state, trace

from connectors.base import SAMPLE_SCHEMA, WorkloadInfo
from connectors.nvml import NvmlConfig, NvmlSampler

UUID = "GPU-fbd3d301-eb3f-2053-443c-7eabc01e7a09"
BASIC = {"gpu_util", "mem_used_b", "mem_total_b", "power_w", "energy_j", "temp_c"}
GPM = {"sm_active", "tensor_active", "mem_bw"}


class Jobs:
    """Attributes PID p to workload ``job-p``."""

    def workload(self, pid: int) -> WorkloadInfo:
        return WorkloadInfo(workload_key=f"job-{pid}", user_name="alice")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sampler(fake: FakeNvml, clock: Clock, **config: object) -> NvmlSampler:
    config = {"energy_every_s": 0, **config}  # every sample, unless a test says otherwise
    return NvmlSampler(NvmlConfig(node="h200-node", **config), nvml=fake.nvml, attributor=Jobs(), clock=clock)


def replay(fake: FakeNvml, states: list, **config: object) -> pl.DataFrame:
    clock = Clock()
    s = sampler(fake, clock, **config)
    frames = []
    for t, st in states:
        fake.write(st)
        clock.now = t
        frames.append(s.sample().samples)
    s.close()
    return pl.concat(frames)


def test_devices_of_the_probed_h200(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200()))
    s = sampler(fake_nvml, Clock(), region="lab", cluster="c1")
    [dev] = s.devices()
    assert (dev.device_id, dev.gpu_model, dev.gpu_index, dev.tdp_w) == (UUID, "NVIDIA H200", 0, 700.0)
    assert (dev.node, dev.environment, dev.region, dev.cluster) == ("h200-node", "onprem", "lab", "c1")
    assert dev.parent_device_id is None and dev.gpu_fraction == 1.0
    assert s.metrics_available(UUID) == BASIC | GPM
    assert s.pci_bus_id(UUID) == "00000000:00:06.0" and s.pci_bus_id("GPU-gone") is None
    assert NvmlSampler.config_model is NvmlConfig
    s.close()


def test_nvml_probe_replays_exactly(fake_nvml: FakeNvml) -> None:
    probe = trace("nvml_probe.json")
    got = replay(fake_nvml, nvml_probe_states())
    assert got.schema == pl.Schema(SAMPLE_SCHEMA)
    rows = []
    for r in probe["samples"]:
        ts = int(r["t"] * 1000)
        key = f"job-{r['procs'][0][0]}" if r["procs"] else ""
        used = sum(u for _, u in r["procs"])
        for metric, value in {
            "gpu_util": r["gpu"],
            "mem_used_b": used,
            "mem_total_b": H200_MEM_TOTAL_B,
            "power_w": r["p"] / 1000,
            "energy_j": (probe["energy_mj"] + r["e"]) / 1000,
            "temp_c": 35,
        }.items():
            rows.append((UUID, ts, metric, float(value), key, 1.0))
    want = pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")
    # GPM is held at zero in this trace: its metrics read 0 from the second call on.
    basic = got.filter(pl.col("metric").is_in(list(BASIC)))
    assert basic.sort("ts_ms", "metric").equals(want.sort("ts_ms", "metric"))
    assert got.filter(pl.col("metric") == "sm_active").height == len(probe["samples"]) - 1


def test_gpm_probe_first_call_has_no_gpm_then_each_interval(fake_nvml: FakeNvml) -> None:
    rows = trace("gpm_probe.json")
    got = replay(fake_nvml, gpm_probe_states())
    first = got.filter(pl.col("ts_ms") == 1000)
    assert set(first["metric"]) == BASIC  # GPM needs two samples
    for name, metric in {"sm_util": "sm_active", "tensor": "tensor_active", "dram_bw": "mem_bw"}.items():
        series = got.filter(pl.col("metric") == metric).sort("ts_ms")
        assert series["ts_ms"].to_list() == [int(r["t"] * 1000) for r in rows[1:]]
        assert series["value"].to_list() == pytest.approx([r[name] for r in rows[1:]], abs=1e-9)


def test_launch_bound_phase_reads_busy_by_gpu_util_idle_by_sm_active(fake_nvml: FakeNvml) -> None:
    got = replay(fake_nvml, gpm_probe_states())
    launch_bound = got.filter((pl.col("ts_ms") >= 15_100) & (pl.col("ts_ms") <= 19_100))
    wide = launch_bound.pivot("metric", index="ts_ms", values="value")
    assert wide["gpu_util"].to_list() == [25.0, 25.0, 25.0, 25.0, 26.0]
    assert wide["sm_active"].to_list() == pytest.approx([0.0] * 5, abs=1e-9)
    assert wide["power_w"].to_list() == [121.0, 121.0, 120.0, 120.0, 120.0]
    assert set(launch_bound["workload_key"]) == {"job-491"}
    matmul = got.filter((pl.col("ts_ms") == 3000) & (pl.col("metric") == "tensor_active"))
    assert matmul["value"].to_list() == pytest.approx([93.6])


def test_process_exit_leaves_the_device_unallocated(fake_nvml: FakeNvml) -> None:
    got = replay(fake_nvml, gpm_probe_states())
    last = got.filter(pl.col("ts_ms") == 24_100)
    assert set(last["workload_key"]) == {""} and set(last["share"]) == {1.0}
    assert last.filter(pl.col("metric") == "mem_used_b")["value"].to_list() == [0.0]


def test_energy_counter_reset_is_reported_as_read(fake_nvml: FakeNvml) -> None:
    states = [(1.0, state(h200(energy_mj=9_000_500))), (2.0, state(h200(energy_mj=1_250)))]
    got = replay(fake_nvml, states).filter(pl.col("metric") == "energy_j")
    assert got["value"].to_list() == [9000.5, 1.25]  # the ledger reads a drop as a reset


def test_the_slow_energy_read_is_throttled(fake_nvml: FakeNvml) -> None:
    states = [(t, state(h200(energy_mj=int(t * 1000)))) for t in (1.0, 5.0, 10.9, 11.0, 16.0, 21.0)]
    got = replay(fake_nvml, states, energy_every_s=10).filter(pl.col("metric") == "energy_j")
    assert got["value"].to_list() == [1.0, 11.0, 21.0]


def test_an_idle_gpu_describes_no_workload(fake_nvml: FakeNvml) -> None:
    # Workload '' means "nobody": it is in the samples but never described (the push endpoint
    # stores workload descriptions, and an empty one would be meaningless).
    fake_nvml.write(state(h200()))
    s = sampler(fake_nvml, Clock())
    batch = s.sample()
    s.close()
    assert set(batch.samples["workload_key"]) == {""}
    assert batch.workloads == []
