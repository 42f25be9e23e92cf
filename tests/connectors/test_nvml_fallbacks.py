"""NvmlSampler where NVML lacks or refuses calls, on MIG GPUs and on time-sliced GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from nvml.fake_nvml_lib import FakeNvml, make_fake
from nvml.h200_replay import h200, state, timeslice_states

from connectors.base import ConfigurationError, WorkloadInfo
from connectors.nvml import NvmlConfig, NvmlSampler

BASIC = {"gpu_util", "mem_used_b", "mem_total_b", "power_w", "energy_j", "temp_c"}
GPM = {"sm_active", "tensor_active", "mem_bw"}
UUID = "GPU-fbd3d301-eb3f-2053-443c-7eabc01e7a09"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_nvml_nogpm(nvml_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """Built without the GPM symbols, as an older driver."""
    return make_fake(nvml_libs["nogpm"], tmp_path, monkeypatch)


class Jobs:
    """PID 414 is job A, 439 job B, anything else ``job-<pid>``."""

    names = {414: "A", 439: "B"}

    def workload(self, pid: int) -> WorkloadInfo:
        return WorkloadInfo(workload_key=self.names.get(pid, f"job-{pid}"))


def sampler(fake: FakeNvml, clock: list[float], **config: object) -> NvmlSampler:
    config = {"energy_every_s": 0, **config}  # every sample, unless a test says otherwise
    return NvmlSampler(
        NvmlConfig(node="n1", **config), nvml=fake.nvml, attributor=Jobs(), clock=lambda: clock[0]
    )


def metrics_at(frame: pl.DataFrame, device: str = UUID) -> set[str]:
    return set(frame.filter(pl.col("device_id") == device)["metric"])


def test_driver_without_gpm_symbols_falls_back_to_gpu_util(fake_nvml_nogpm: FakeNvml) -> None:
    fake_nvml_nogpm.write(state(h200(util_gpu=25)))
    clock = [1.0]
    s = sampler(fake_nvml_nogpm, clock)
    assert s.metrics_available(UUID) == BASIC
    for t in (1.0, 2.0, 3.0):
        clock[0] = t
        frame = s.sample().samples
        assert metrics_at(frame) == BASIC
    assert frame.filter(pl.col("metric") == "gpu_util")["value"].to_list() == [25.0]
    s.close()


def test_gpm_unsupported_device_never_takes_gpm_samples(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(gpm_supported=0)))
    clock = [1.0]
    s = sampler(fake_nvml, clock)
    fake_nvml.reset_calls("nvmlGpmSampleGet")
    for t in (1.0, 2.0, 3.0):
        clock[0] = t
        assert metrics_at(s.sample().samples) == BASIC
    assert s.metrics_available(UUID) == BASIC
    assert fake_nvml.calls("nvmlGpmSampleGet") == 0
    s.close()


def test_power_not_supported_drops_power_keeps_energy_and_never_retries(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(unsupported="power"), h200(1)))
    clock = [1.0]
    s = sampler(fake_nvml, clock)
    fake_nvml.reset_calls("nvmlDeviceGetPowerUsage")
    for t in (1.0, 2.0, 3.0, 4.0):
        clock[0] = t
        frame = s.sample().samples
    assert metrics_at(frame) == BASIC - {"power_w"} | GPM
    assert frame.filter((pl.col("device_id") == UUID) & (pl.col("metric") == "energy_j"))[
        "value"
    ].to_list() == [2383.611]
    assert s.metrics_available(UUID) == BASIC - {"power_w"} | GPM
    other = h200(1)["gpu.1.uuid"]
    assert "power_w" in metrics_at(frame, other)
    # Once for the refusing GPU, every time for the other.
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage") == 1 + 4
    s.close()


MIG_SM = (60.0, 30.0, 0.0)  # SM activity of each instance over the second interval


def mig_h200() -> dict[str, object]:
    """The probed H200 in MIG mode with a 3g, a 2g and a 1g instance; a process on the 3g."""
    gpu = h200(mig_mode=1, **{"mig.count": 3})
    for j, (profile, gi, mem_gb) in enumerate([("3g.71gb", 2, 71), ("2g.35gb", 3, 35), ("1g.18gb", 9, 18)]):
        keys = {
            "uuid": f"MIG-0000000{j}-1111-2222-3333-444444444444",
            "name": f"NVIDIA H200 MIG {profile}",
            "gi_id": gi,
            "mem_total": mem_gb * 1_000_000_000,
            "mem_used": j * 1_000_000,
            "gpm_supported": 1,
            "gpm.t": 0.0,
            "gpm.2": 0.0,
            "gpm.5": 0.0,
            "gpm.10": 0.0,
            "procs": "414:1000000" if j == 0 else "",
        }
        gpu.update({f"gpu.0.mig.{j}.{k}": v for k, v in keys.items()})
    return gpu


def test_mig_gpu_is_its_instances(fake_nvml: FakeNvml) -> None:
    gpu = mig_h200()
    fake_nvml.write(state(gpu))
    clock = [10.0]
    s = sampler(fake_nvml, clock)
    devs = s.devices()
    assert [(d.mig_profile, d.gpu_fraction, d.parent_device_id, d.gpu_model) for d in devs] == [
        ("3g.71gb", 3 / 7, UUID, "NVIDIA H200"),
        ("2g.35gb", 2 / 7, UUID, "NVIDIA H200"),
        ("1g.18gb", 1 / 7, UUID, "NVIDIA H200"),
    ]
    assert [d.device_id for d in devs] == [f"MIG-0000000{j}-1111-2222-3333-444444444444" for j in range(3)]
    assert all(d.tdp_w == 700.0 for d in devs)  # the board's limit; pricing scales by gpu_fraction
    assert s.pci_bus_id(devs[2].device_id) == "00000000:00:06.0"  # the GPU's
    s.sample()
    # Ten seconds later each instance's GPM counters moved by its SM activity.
    for j, sm in enumerate(MIG_SM):
        gpu[f"gpu.0.mig.{j}.gpm.t"] = 10.0
        gpu[f"gpu.0.mig.{j}.gpm.2"] = sm * 10.0
    fake_nvml.write(state(gpu))
    clock[0] = 20.0
    frame = s.sample().samples
    mig0 = devs[0].device_id
    # Whole-GPU readings are refused on an instance: memory and GPM remain.
    assert metrics_at(frame, mig0) == {"mem_used_b", "mem_total_b"} | GPM
    assert s.metrics_available(mig0) == {"mem_used_b", "mem_total_b"} | GPM
    sm = frame.filter(pl.col("metric") == "sm_active").sort("device_id")["value"].to_list()
    assert sm == pytest.approx([60.0, 30.0, 0.0])
    owners = frame.filter(pl.col("metric") == "mem_total_b").sort("device_id")
    assert owners["workload_key"].to_list() == ["A", "", ""]
    assert owners["value"].to_list() == [71e9, 35e9, 18e9]
    s.close()


def test_time_sliced_shares_follow_process_util_readings(fake_nvml: FakeNvml) -> None:
    """Read at every sample (``process_util_every_s = 0``), each read draws NVML's newest window:
    the process the GPU ran at that moment owns the sample. A read returns each process's newest
    window, so crediting every returned window would give both processes one window a read —
    a pull toward an even split the H200 showed (docs/virtual-gpus.md)."""
    clock = [0.0]
    s = sampler(fake_nvml, clock, process_util_every_s=0)
    shares = []
    for t, st in timeslice_states():
        fake_nvml.write(st)
        clock[0] = t
        frame = s.sample().samples.filter(pl.col("metric") == "gpu_util")
        assert frame["share"].sum() == pytest.approx(1.0)
        shares.append(dict(zip(frame["workload_key"], frame["share"], strict=True)))
    s.close()
    # Both processes are listed from the first read; A alone computes until 8 s: A reads 99.
    assert shares[0] == {"A": 1.0, "B": 0.0}
    # Reads naming both: the newer window wins — A's at 9 s and 12 s (149.66 > 149.46 s,
    # 152.66 > 152.26 s), B's at 15 s and 19.1 s (155.66 > 155.46 s, 159.67 > 159.46 s).
    assert shares[8] == shares[11] == {"A": 1.0, "B": 0.0}
    assert shares[14] == shares[18] == {"A": 0.0, "B": 1.0}
    assert shares[9] == {"A": 1.0, "B": 0.0}
    # While both ran (9–19 s), B's mean share is its count of draws: 2 of 11.
    both = shares[8:19]
    assert sum(x["B"] for x in both) / len(both) == pytest.approx(2 / 11)
    assert shares[19] == {"B": 1.0}  # A exited
    assert shares[-1] == {"": 1.0}  # nothing runs: unallocated


def _wait_for_reads(fake: FakeNvml, reads: int, timeout_s: float = 10.0) -> None:
    """Until the poller thread made ``reads`` more complete reads (pynvml makes two C calls a read)."""
    start = fake.calls("nvmlDeviceGetProcessUtilization")
    deadline = time.monotonic() + timeout_s
    while fake.calls("nvmlDeviceGetProcessUtilization") < start + 2 * reads:
        assert time.monotonic() < deadline, "the poller made no reads"
        time.sleep(0.005)


def test_time_sliced_gpu_is_drawn_between_samples_by_the_poller(fake_nvml: FakeNvml) -> None:
    """With ``process_util_every_s > 0`` the sampling thread never reads process utilization; a
    poller thread, started by the first sample that finds the GPU shared, draws a window per read
    and the draws since the last sample split the next one by their smUtil."""
    both = "414:1,439:1"
    clock = [1.0]
    s = sampler(fake_nvml, clock, process_util_every_s=0.01)
    fake_nvml.write(state(h200(procs="414:1")))  # one owner: no poller
    fake_nvml.reset_calls("nvmlDeviceGetProcessUtilization")
    assert s.sample().samples["workload_key"].unique().to_list() == ["A"]
    time.sleep(0.05)
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization") == 0
    fake_nvml.write(state(h200(procs=both, putil="414:70:0:100")))
    first = s.sample().samples.filter(pl.col("metric") == "temp_c")
    assert first["share"].to_list() == [0.5, 0.5]  # nothing drawn yet: evenly
    _wait_for_reads(fake_nvml, 2)  # A's window at 100 µs is drawn, once
    fake_nvml.write(state(h200(procs=both, putil="414:70:0:100,439:30:0:300")))
    _wait_for_reads(fake_nvml, 2)  # B's newer window at 300 µs is drawn, once
    clock[0] = 2.0
    second = s.sample().samples.filter(pl.col("metric") == "temp_c")
    split = dict(zip(second["workload_key"], second["share"], strict=True))
    assert split == pytest.approx({"A": 0.7, "B": 0.3})
    # No window since: the split holds.
    clock[0] = 3.0
    third = s.sample().samples.filter(pl.col("metric") == "temp_c")
    assert third["share"].to_list() == second["share"].to_list()
    s.close()
    stopped = fake_nvml.calls("nvmlDeviceGetProcessUtilization")
    time.sleep(0.05)
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization") == stopped  # close() stopped it


def test_not_found_keeps_the_previous_shares(fake_nvml: FakeNvml) -> None:
    both = "414:1,439:1"
    clock = [1.0]
    s = sampler(fake_nvml, clock, process_util_every_s=0)
    fake_nvml.write(state(h200(procs=both, putil="414:30:0:100,439:10:0:100")))
    first = s.sample().samples.filter(pl.col("metric") == "temp_c")
    fake_nvml.write(state(h200(procs=both, putil="414:30:0:100,439:10:0:100")))  # nothing newer
    clock[0] = 2.0
    again = s.sample().samples.filter(pl.col("metric") == "temp_c")
    assert first["share"].to_list() == again["share"].to_list() == [0.75, 0.25]
    s.close()


def test_no_process_util_support_splits_evenly(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(procs="414:1,439:1,500:1", unsupported="putil")))
    s = sampler(fake_nvml, [1.0], process_util_every_s=0)
    frame = s.sample().samples.filter(pl.col("metric") == "gpu_util")
    assert dict(zip(frame["workload_key"], frame["share"], strict=True)) == pytest.approx(
        {"A": 1 / 3, "B": 1 / 3, "job-500": 1 / 3}
    )
    s.close()


def test_real_pynvml_loads_the_fake_through_ld_library_path(
    nvml_libs: dict[str, Path], tmp_path: Path
) -> None:
    """The production path: plain ``import pynvml`` finds libnvidia-ml.so.1 by its soname."""
    state_file = tmp_path / "nvml.state"
    state_file.write_text("".join(f"{k}={v}\n" for k, v in state(h200(util_gpu=42)).items()))
    code = (
        "from connectors.nvml import NvmlConfig, NvmlSampler\n"
        "from connectors.nvml_procs import PidAttributor\n"
        "s = NvmlSampler(NvmlConfig(node='n'), attributor=PidAttributor('n'))\n"
        "f = s.sample().samples\n"
        "print(f.filter(f['metric'] == 'gpu_util')['value'].to_list())\n"
    )
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(nvml_libs["full"].parent),
        "FAKE_NVML_STATE": str(state_file),
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[42.0]"


def test_a_transient_error_skips_that_reading_once(fake_nvml: FakeNvml) -> None:
    clock = [1.0]
    s = sampler(fake_nvml, clock)
    fake_nvml.write(state(h200(failing="power,temp")))
    assert metrics_at(s.sample().samples) == BASIC - {"power_w", "temp_c"}
    fake_nvml.write(state(h200()))
    clock[0] = 2.0
    assert metrics_at(s.sample().samples) == BASIC | GPM  # asked again, and answered
    assert s.metrics_available(UUID) == BASIC | GPM
    s.close()


def test_a_gpm_metric_the_driver_refuses_is_dropped(fake_nvml: FakeNvml) -> None:
    gpu = h200()
    del gpu["gpu.0.gpm.5"]  # no tensor-activity counter on this device
    clock = [1.0]
    s = sampler(fake_nvml, clock)
    for t in (1.0, 2.0, 3.0):
        gpu["gpu.0.gpm.t"] = t
        gpu["gpu.0.gpm.2"] = 50.0 * t
        fake_nvml.write(state(gpu))
        clock[0] = t
        frame = s.sample().samples
    assert metrics_at(frame) == BASIC | {"sm_active", "mem_bw"}
    assert frame.filter(pl.col("metric") == "sm_active")["value"].to_list() == pytest.approx([50.0])
    assert s.metrics_available(UUID) == BASIC | {"sm_active", "mem_bw"}
    s.close()


def test_devices_follow_a_gpu_added_later(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200()))
    s = sampler(fake_nvml, [1.0])
    assert len(s.devices()) == 1
    fake_nvml.write(state(h200(), h200(1)))
    assert [d.gpu_index for d in s.devices()] == [0, 1]
    assert set(s.sample().samples["device_id"]) == {UUID, h200(1)["gpu.1.uuid"]}
    s.close()


def test_no_driver_is_a_configuration_error(fake_nvml: FakeNvml) -> None:
    fake_nvml.write({"count": 0, "init_error": 9})  # NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(ConfigurationError, match="no NVIDIA driver"):
        sampler(fake_nvml, [1.0]).devices()


def test_a_gpu_failing_enumeration_is_skipped(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(failing="handle"), h200(1)))
    s = sampler(fake_nvml, [1.0])
    assert [d.gpu_index for d in s.devices()] == [1]
    s.close()


def test_memory_falls_back_to_the_v1_call_at_once_and_for_good(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(unsupported="memory_v2", mem_used=7)))
    clock = [1.0]
    s = sampler(fake_nvml, clock)
    fake_nvml.reset_calls("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo")
    for t in (1.0, 2.0, 3.0):
        clock[0] = t
        frame = s.sample().samples
        assert frame.filter(pl.col("metric") == "mem_used_b")["value"].to_list() == [7.0]
    assert fake_nvml.calls("nvmlDeviceGetMemoryInfo_v2") == 1
    assert fake_nvml.calls("nvmlDeviceGetMemoryInfo") == 3
    assert s.metrics_available(UUID) == BASIC | GPM
    s.close()


class Flaky(Jobs):
    def workload(self, pid: int) -> WorkloadInfo:
        if pid == 500:
            raise FileNotFoundError(f"/proc/{pid}/cgroup")
        return super().workload(pid)


def test_a_pid_the_attributor_fails_on_is_its_own_workload(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(state(h200(procs="414:1,500:1", unsupported="putil")))
    s = NvmlSampler(NvmlConfig(node="n1"), nvml=fake_nvml.nvml, attributor=Flaky(), clock=lambda: 1.0)
    frame = s.sample().samples.filter(pl.col("metric") == "gpu_util")
    assert frame["workload_key"].to_list() == ["A", "n1/pid/500"]
    s.close()
