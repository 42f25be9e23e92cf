"""State files for the fake NVML, replayed from the traces recorded on an NVIDIA H200.

``h200/`` holds the recordings (copied from the measurement run, docs/design.md §2):

* ``nvml_probe.json``: ~4 readings a second of util, power (mW), energy (mJ since the first
  reading; the counter read ``energy_mj`` then) and compute processes, idle → matmul → idle.
* ``gpm_probe.json``: one row a second of nvidia-smi util, power (W) and GPM SM / tensor / DRAM
  utilization, idle → matmul → copy → launch-bound → idle.
* ``timeslice_probe.json``: two processes time-slicing the GPU and what
  ``nvmlDeviceGetProcessUtilization`` returned each second (often only the heavy one).

Each function returns ``(t, state)`` pairs, ``t`` in seconds as recorded, ``state`` the keys
``fake_nvml.c`` serves. GPM counters are cumulative (percent × seconds), so the fake's metric over
two samples is the recorded row's value.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

TRACES = Path(__file__).with_name("h200")
MIB = 1 << 20
H200_MEM_TOTAL_B = 143_771 * MIB  # what nvidia-smi shows for an H200 (141 GB HBM3e)
GPM_IDS = {"sm_util": 2, "tensor": 5, "dram_bw": 10}  # trace key → NVML_GPM_METRIC_* id


@cache
def trace(name: str) -> Any:
    return json.loads((TRACES / name).read_text())


def h200(i: int = 0, **keys: Any) -> dict[str, Any]:
    """Keys of one idle H200 at index ``i`` (as the probe found it), overridden by ``keys``."""
    probe = trace("nvml_probe.json")
    base = {
        "uuid": probe["uuid"] if i == 0 else f"GPU-00000000-0000-0000-0000-{i:012d}",
        "name": probe["name"],
        "pci_bus_id": probe["pci_bus_id"],
        "power_limit_mw": probe["power_limit_mw"],
        "util_gpu": 0,
        "util_mem": 0,
        "mem_total": H200_MEM_TOTAL_B,
        "mem_used": 0,
        "power_mw": probe["power_mw"],
        "energy_mj": probe["energy_mj"],
        "temp_c": probe["temp"],
        "gpm_supported": probe["gpm_support"],
        "gpm.t": 0.0,
        **{f"gpm.{metric_id}": 0.0 for metric_id in GPM_IDS.values()},
    }
    base.update(keys)
    return {f"gpu.{i}.{key}": value for key, value in base.items()}


def state(*gpus: dict[str, Any], driver: str = "580.159.04") -> dict[str, Any]:
    """A whole state file: the driver version, the GPU count and every GPU's keys."""
    out: dict[str, Any] = {"driver": driver, "count": len(gpus)}
    for gpu in gpus:
        out.update(gpu)
    return out


def procs(rows: list[list[int]]) -> str:
    return ",".join(f"{pid}:{used_b}" for pid, used_b in rows)


def nvml_probe_states() -> list[tuple[float, dict[str, Any]]]:
    """The ~4 Hz readings of ``nvml_probe.json``; memory used is the processes' memory."""
    probe = trace("nvml_probe.json")
    out = []
    for row in probe["samples"]:
        gpu = h200(
            util_gpu=row["gpu"],
            util_mem=row["mem"],
            power_mw=row["p"],
            energy_mj=probe["energy_mj"] + row["e"],
            mem_used=sum(used for _, used in row["procs"]),
            procs=procs(row["procs"]),
        )
        out.append((row["t"], state(gpu)))
    return out


def gpm_probe_states(pid: int = 491, used_b: int = 1_184_890_880) -> list[tuple[float, dict[str, Any]]]:
    """The 1 Hz rows of ``gpm_probe.json``; the process holds ``used_b`` while it runs."""
    out = []
    t_prev, acc = 0.0, dict.fromkeys(GPM_IDS.values(), 0.0)
    for row in trace("gpm_probe.json"):
        for key, metric_id in GPM_IDS.items():
            acc[metric_id] += row[key] * (row["t"] - t_prev)
        t_prev = row["t"]
        running = isinstance(row["proc"], list)  # "ERR Not Found" once the process exited
        gpu = h200(
            util_gpu=row["nvsmi_gpu"],
            util_mem=row["nvsmi_mem"],
            power_mw=row["power_w"] * 1000,
            mem_used=used_b if running else 0,
            procs=f"{pid}:{used_b}" if running else "",
            **{"gpm.t": row["t"], **{f"gpm.{i}": value for i, value in acc.items()}},
        )
        out.append((row["t"], state(gpu)))
    return out


def timeslice_states() -> list[tuple[float, dict[str, Any]]]:
    """The 1 Hz rows of ``timeslice_probe.json``: running processes and the driver's latest
    process-utilization sample of each (``putil``); none once they exited."""
    out = []
    for row in trace("timeslice_probe.json")["rows"]:
        samples = row["proc_util"] if isinstance(row["proc_util"], list) else []
        gpu = h200(
            util_gpu=row["nvsmi_gpu"],
            power_mw=row["power_w"] * 1000,
            mem_used=sum(used for _, used in row["procs"]),
            procs=procs(row["procs"]),
            putil=",".join(f"{pid}:{sm}:{mem}:{ts}" for pid, sm, mem, ts in samples),
        )
        out.append((row["t"], state(gpu)))
    return out
