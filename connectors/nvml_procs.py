"""Who occupies a GPU, and in what shares: NVML processes → workloads (docs/design.md §2, §4).

Per-process SM utilization (``nvmlDeviceGetProcessUtilization``): the driver samples the GPU
every ~200 ms and credits each window to ONE process, and a call returns only each process's
newest window since the last one seen (measured on the H200, docs/virtual-gpus.md). So summing
what a call returns would give every sharer one window per call — an even split, whatever the
work. The tracker instead draws the single newest window at each read: the process the GPU ran
at that moment, an unbiased draw of the windows. While two or more uncapped workloads share the
GPU, the sampler's poller thread reads every ``every_s`` seconds (0: at each sample, in the
caller's thread), the draws accumulate until the next sample, and their smUtil splits the
sample; the ledger averages the samples over the hour. A read costs ~2.5 ms on an H200, and no
read is made for a GPU with one owner.

A process with an SM cap in its environment (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` of an MPS
client, ``CUDA_DEVICE_SM_LIMIT`` of a HAMi container) — or, where the environment is unreadable,
a HAMi allocation the attributor knows from the pod — holds its cap as its share while it runs,
priced like a MIG slice; the rest goes to uncapped workloads by measured utilization, or stays
unallocated (docs/virtual-gpus.md). The MPS server (``nvidia-cuda-mps-server``) runs its
clients' kernels and is never a workload of its own while a client is listed.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Protocol

from connectors.sdk import WorkloadInfo
from connectors.vgpu import capped_shares, percentage_from_environ

log = logging.getLogger(__name__)

UNALLOCATED = WorkloadInfo(workload_key="")
#: ``/proc/<pid>/comm`` of the MPS server (15 characters of ``nvidia-cuda-mps-server``).
MPS_SERVER_COMM = "nvidia-cuda-mps"
_ENVIRON_MAX_B = 256 * 1024  # an environment larger than this is read no further


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
        self,
        nvml: Any,
        handle: Any,
        attributor: Attributor,
        every_s: float,
        node: str = "",
        device_id: str | None = None,
    ) -> None:
        self._nvml = nvml
        self._by_pid = PidAttributor(node)  # for a PID the attributor fails on
        self._handle = handle
        self._attributor = attributor
        self._every_s = every_s
        self.supported = True
        self._listing = True
        self._last_ts_us = 0  # newest process sample seen: the next read asks for newer ones
        self._weights: dict[str, float] = {}  # workload_key → summed smUtil of the last sample's draws
        self._drawn: dict[int, float] = {}  # pid → summed smUtil of the windows drawn since
        self._lock = threading.Lock()  # ``poll`` runs in the sampler's poller thread
        #: Two or more uncapped workloads share the GPU: the poller reads this device.
        self.time_sliced = False
        self._proc_root: Path = getattr(attributor, "proc_root", None) or Path("/proc")
        self._caps: dict[int, tuple[float | None, bool]] = {}  # pid → (SM cap, is the MPS server)
        self._device_id = device_id  # the GPU's UUID, for caps the attributor knows (HAMi pods)

    def current(self, now_s: float) -> list[tuple[WorkloadInfo, float]]:
        """``(workload, share)`` for every workload running now, and the unallocated workload
        ('') for what SM caps leave unused; shares add to 1. No process: '' with share 1."""
        procs = self._processes()
        if not procs:
            self._caps.clear()
            return [(UNALLOCATED, 1.0)]
        caps = self._pid_caps([p.pid for p in procs])
        if len(procs) > 1:  # the MPS server runs its clients' kernels: never an owner beside them
            procs = [p for p in procs if not caps[p.pid][1]] or procs
        by_pid: dict[int, WorkloadInfo] = {}
        workloads: dict[str, WorkloadInfo] = {}
        capped: dict[str, float] = {}
        for proc in procs:
            info = by_pid.get(proc.pid) or self._workload(proc.pid)
            by_pid[proc.pid] = info
            workloads.setdefault(info.workload_key, info)
            cap = caps[proc.pid][0]
            if cap is not None:  # a workload's processes share its container's cap: the largest
                capped[info.workload_key] = max(cap, capped.get(info.workload_key, 0.0))
        uncapped = [key for key in workloads if key not in capped]
        # Utilization splits only what caps leave among several uncapped workloads: one owner
        # needs no reading, and the call costs ~2.5 ms per GPU.
        self.time_sliced = len(uncapped) > 1 and self.supported
        if self.time_sliced:
            if self._every_s <= 0:
                self.poll()
            self._take_draws(by_pid)
        shares, rest = capped_shares(capped, self._weights, uncapped)
        out = [(workloads[key], share) for key, share in shares.items()]
        if rest > 0:
            out.append((UNALLOCATED, rest))
        return out

    def _pid_caps(self, pids: list[int]) -> dict[int, tuple[float | None, bool]]:
        """(SM cap, is the MPS server) per PID: the environment and comm read once per PID from
        /proc; where the environment names no cap (or is unreadable: another user's process, an
        unprivileged agent), the attributor's (a HAMi pod's allocation), asked every time."""
        env = {pid: self._caps.get(pid) or self._read_cap(pid) for pid in pids}
        self._caps = env  # PIDs no longer listed are forgotten (a PID can be reused)
        # The pod's allocation is asked every time: the API's cache may learn the pod later.
        return {
            pid: (cap if cap is not None else self._attributor_cap(pid), mps)
            for pid, (cap, mps) in env.items()
        }

    def _read_cap(self, pid: int) -> tuple[float | None, bool]:
        base = self._proc_root / str(pid)
        try:
            comm = (base / "comm").read_text(errors="replace").strip()
        except OSError:
            comm = ""
        try:
            with open(base / "environ", "rb") as f:
                found = percentage_from_environ(f.read(_ENVIRON_MAX_B))
        except OSError:
            found = None
        return (found[1] if found else None), comm == MPS_SERVER_COMM

    def _attributor_cap(self, pid: int) -> float | None:
        """A cap the attributor knows where the environment is unreadable (the agent runs
        unprivileged): HAMi's allocation from the pod's annotation (``ProcessAttributor.gpu_cap``)."""
        ask = getattr(self._attributor, "gpu_cap", None)
        if ask is None or self._device_id is None:
            return None
        try:
            cap = ask(pid, self._device_id)
        except Exception as exc:  # a cap is a refinement: never cost the device its readings
            log.warning("nvml: the GPU cap of pid %d failed: %s", pid, exc)
            return None
        return float(cap) if isinstance(cap, int | float) and 0 < cap < 1 else None

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

    def poll(self) -> None:
        """Draw the newest window NVML credited since the last read (all windows at that
        instant, if several processes share its timestamp) into the draws of this sample."""
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(self._handle, self._last_ts_us)
        except nvml.NVMLError_NotFound:
            return  # no window since the last read: nothing to draw
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            self.supported = False
            return
        except nvml.NVMLError as exc:  # transient: this read draws nothing
            log.warning("nvml: process utilization failed: %s", exc)
            return
        if not samples:
            return
        newest = max(int(sample.timeStamp) for sample in samples)
        self._last_ts_us = max(self._last_ts_us, newest)
        with self._lock:
            for sample in samples:
                if int(sample.timeStamp) == newest:
                    self._drawn[sample.pid] = self._drawn.get(sample.pid, 0.0) + sample.smUtil

    def _take_draws(self, by_pid: dict[int, WorkloadInfo]) -> None:
        """The draws since the last sample, by workload, become this sample's split; with none
        (no window since, or only from processes gone since), the previous split holds."""
        with self._lock:
            drawn, self._drawn = self._drawn, {}
        weights: dict[str, float] = {}
        for pid, sm in drawn.items():
            info = by_pid.get(pid)
            if info is not None:  # a process gone since: its workload no longer runs here
                weights[info.workload_key] = weights.get(info.workload_key, 0.0) + sm
        if weights:
            self._weights = weights
