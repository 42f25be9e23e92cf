"""Who occupies a GPU, and in what shares: NVML processes → workloads (docs/design.md §2, §4).

Per-process SM utilization (``nvmlDeviceGetProcessUtilization``) returns only the driver's latest
sample per process, often one of two time-sliced processes, and costs ~2 ms per call on an H200.
So it is read every ``every_s`` seconds, not every period; a reading's shares hold until the next
reading, and the ledger averages the shares of many samples over the hour.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from connectors.sdk import WorkloadInfo

log = logging.getLogger(__name__)

UNALLOCATED = WorkloadInfo(workload_key="")


class Attributor(Protocol):
    """Maps a host PID to the workload it belongs to (``connectors.attribution.ProcessAttributor``)."""

    def workload(self, pid: int) -> WorkloadInfo: ...


class PidAttributor:
    """Fallback when no attributor is given or installed: every process is its own workload."""

    def __init__(self, node: str) -> None:
        self._node = node

    def workload(self, pid: int) -> WorkloadInfo:
        return WorkloadInfo(workload_key=f"{self._node}/pid/{pid}", workload=f"pid {pid}")


def default_attributor(node: str) -> Attributor:
    """``ProcessAttributor()`` from ``connectors.attribution`` where it exists, else PIDs."""
    try:
        from connectors.attribution import ProcessAttributor
    except ImportError:
        log.warning("connectors.attribution unavailable; attributing GPU processes by PID")
        return PidAttributor(node)
    return ProcessAttributor()


class ShareTracker:
    """The workload shares of one device, from its running processes and their SM utilization.

    ``nvml`` is the pynvml module; ``supported`` is False once the driver refused per-process
    utilization (MIG instances, older drivers): then running workloads split evenly, and the call
    is never made again. A driver that cannot list processes leaves the device unallocated ('').
    """

    def __init__(
        self, nvml: Any, handle: Any, attributor: Attributor, every_s: float, node: str = ""
    ) -> None:
        self._nvml = nvml
        self._by_pid = PidAttributor(node)  # for a PID the attributor fails on
        self._handle = handle
        self._attributor = attributor
        self._every_s = every_s
        self.supported = True
        self._listing = True
        self._last_ts_us = 0  # newest process sample seen: the next read asks for newer ones
        self._last_read_s = float("-inf")
        self._weights: dict[str, float] = {}  # workload_key → summed smUtil of the last reading

    def current(self, now_s: float) -> list[tuple[WorkloadInfo, float]]:
        """``(workload, share)`` for every workload running now; shares add to 1. No process:
        the unallocated workload with share 1."""
        procs = self._processes()
        if not procs:
            return [(UNALLOCATED, 1.0)]
        by_pid: dict[int, WorkloadInfo] = {}
        workloads: dict[str, WorkloadInfo] = {}
        for proc in procs:
            info = by_pid.get(proc.pid) or self._workload(proc.pid)
            by_pid[proc.pid] = info
            workloads.setdefault(info.workload_key, info)
        # One workload owns the device: no need to pay for the utilization call.
        if len(workloads) > 1 and self.supported and now_s - self._last_read_s >= self._every_s:
            self._read(by_pid, now_s)
        weights = {key: self._weights.get(key, 0.0) for key in workloads}
        total = sum(weights.values())
        if total <= 0:  # no reading names a running workload, or they all read 0 %
            return [(info, 1.0 / len(workloads)) for info in workloads.values()]
        return [(info, weights[key] / total) for key, info in workloads.items()]

    def _workload(self, pid: int) -> WorkloadInfo:
        try:
            return self._attributor.workload(pid)
        except Exception as exc:  # a process that vanished, an unreadable /proc, a Docker hiccup
            # must not cost the device its readings: count it as a process of its own.
            log.warning("nvml: attributing pid %d failed: %s", pid, exc)
            return self._by_pid.workload(pid)

    def _processes(self) -> list[Any]:
        nvml = self._nvml
        if not self._listing:
            return []
        try:
            # Versioned: the unversioned wrapper turns FunctionNotFound into a mismatch error.
            return nvml.nvmlDeviceGetComputeRunningProcesses_v3(self._handle)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            log.info("nvml: the driver cannot list processes; devices stay unallocated")
            self._listing = False
            return []

    def _read(self, by_pid: dict[int, WorkloadInfo], now_s: float) -> None:
        nvml = self._nvml
        self._last_read_s = now_s
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(self._handle, self._last_ts_us)
        except nvml.NVMLError_NotFound:
            return  # no process ran since the last reading: keep the previous shares
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            self.supported = False
            return
        except nvml.NVMLError as exc:  # transient: keep the previous shares
            log.warning("nvml: process utilization failed: %s", exc)
            return
        weights: dict[str, float] = {}
        for sample in samples:
            self._last_ts_us = max(self._last_ts_us, int(sample.timeStamp))
            info = by_pid.get(sample.pid)
            if info is not None:  # a process gone since: its workload no longer runs here
                weights[info.workload_key] = weights.get(info.workload_key, 0.0) + sample.smUtil
        self._weights = weights
