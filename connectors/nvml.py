"""``nvml``: read this node's GPUs through NVML (pynvml), one ``SampleBatch`` per call.

The node agent calls ``NvmlSampler.sample()`` every ``period_s`` and ships the batches. A GPU in
MIG mode is reported as its MIG instances, each its compute slices' fraction of the GPU; an NVIDIA
vGPU inside a VM (``GRID A100-4C``) as its type's fraction of the board (docs/virtual-gpus.md).
Readings (units as in ``service.metrics_catalog``):
``gpu_util``, ``mem_used_b``, ``mem_total_b``, ``power_w``, ``temp_c``, ``energy_j`` (the
driver's counter, mJ → J; every ``energy_every_s`` only, as the read is slow); on Hopper and
later the GPM metrics ``sm_active``, ``tensor_active`` and ``mem_bw`` over the interval since
the previous call (none on the first call).

A call the driver refuses (``NotSupported``, ``FunctionNotFound``: an older driver, a MIG
instance, a board without a power sensor) drops its metrics for that device for good, so it is
never retried every period; ``metrics_available(device_id)`` says what a device still has.
Other NVML errors skip that reading this time only.

While a GPU is time-sliced between uncapped workloads, a daemon thread draws its per-process
utilization every ``process_util_every_s`` between samples (``connectors.nvml_procs``); it
sleeps while no GPU is shared, and ``close()`` stops it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pynvml

from connectors.nvml_gpm import GPM_METRICS, GpmReader, gpm_supported
from connectors.nvml_procs import UNALLOCATED, Attributor, ShareTracker, default_attributor
from connectors.sdk import (
    SAMPLE_COLUMNS,
    ConfigurationError,
    DeviceInfo,
    Metric,
    RetriableError,
    SampleBatch,
    WorkloadInfo,
)
from connectors.vgpu import (
    mig_device_slices_from_nvml,
    mig_fraction,
    mig_gpu_slices_from_nvml,
    mig_profile_of,
    vgpu_profile,
)

if TYPE_CHECKING:
    from connectors.nvml_config import NvmlConfig

log = logging.getLogger(__name__)


#: Each basic reading: the metrics it yields, and how to get them from pynvml (in our units).
_READINGS: dict[str, tuple[tuple[Metric, ...], Callable[[Any, Any], tuple[float, ...]]]] = {
    "util": ((Metric.GPU_UTIL,), lambda nv, h: (float(nv.nvmlDeviceGetUtilizationRates(h).gpu),)),
    # v2 counts driver-reserved memory apart from "used", as nvidia-smi does on recent drivers.
    "memory": ((Metric.MEM_USED_B, Metric.MEM_TOTAL_B), lambda nv, h: _memory(nv, h, nv.nvmlMemory_v2)),
    "memory_v1": ((Metric.MEM_USED_B, Metric.MEM_TOTAL_B), lambda nv, h: _memory(nv, h, None)),
    "power": ((Metric.POWER_W,), lambda nv, h: (nv.nvmlDeviceGetPowerUsage(h) / 1000.0,)),
    "energy": ((Metric.ENERGY_J,), lambda nv, h: (nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,)),
    "temp": (
        (Metric.TEMP_C,),
        lambda nv, h: (float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),),
    ),
}
#: A refused reading → the older call that replaces it.
_FALLBACK = {"memory": "memory_v1"}


def _memory(nvml: Any, handle: Any, version: int | None) -> tuple[float, float]:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
    return float(mem.used), float(mem.total)


class NvmlOptions(Protocol):
    """What the sampler reads of its config: ``NvmlConfig`` (``connectors.nvml_config``) or the
    node agent's pydantic-free twin of it."""

    @property
    def process_util_every_s(self) -> float: ...
    @property
    def energy_every_s(self) -> float: ...
    @property
    def node(self) -> str: ...
    @property
    def environment(self) -> Literal["onprem", "aws", "gcp", "azure"]: ...
    @property
    def region(self) -> str | None: ...
    @property
    def cluster(self) -> str | None: ...


class _ConfigModel:
    """``NvmlSampler.config_model``, imported on first access: the model is pydantic's, which the
    registry and the service use, and the node agent never loads."""

    def __get__(self, obj: object, owner: type | None = None) -> type[NvmlConfig]:
        from connectors.nvml_config import NvmlConfig

        return NvmlConfig


def __getattr__(name: str) -> Any:
    if name == "NvmlConfig":  # ``from connectors.nvml import NvmlConfig`` still works
        from connectors.nvml_config import NvmlConfig

        return NvmlConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(eq=False)
class _Device:
    info: DeviceInfo
    handle: Any
    shares: ShareTracker
    readings: list[str] = field(default_factory=lambda: [r for r in _READINGS if r not in _FALLBACK.values()])
    gpm: GpmReader | None = None
    gpm_metrics: set[str] = field(default_factory=set)
    pci_bus_id: str | None = None
    read_at: dict[str, float] = field(default_factory=dict)  # last good read of a throttled reading

    def available(self) -> set[str]:
        return {m.value for r in self.readings for m in _READINGS[r][0]} | self.gpm_metrics


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # pynvml returns str or bytes


class NvmlSampler:
    """Reads every GPU (or MIG instance) of this node; see the module docstring.

    ``nvml``: the pynvml module (tests pass one bound to a fake library). ``attributor`` maps a
    PID to its workload (default: ``connectors.attribution.ProcessAttributor``). ``clock``: seconds
    since the epoch, UTC. NVML is initialised on first use; ``close()`` shuts it down. A node
    without the NVIDIA driver raises ``ConfigurationError``, another NVML start-up failure
    ``RetriableError``; once started, NVML errors never raise (see the module docstring).
    """

    config_model = _ConfigModel()

    def __init__(
        self,
        config: NvmlOptions,
        *,
        nvml: Any = pynvml,
        attributor: Attributor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._nvml = nvml
        self._attributor = attributor
        self._clock = clock
        self._devices: dict[str, _Device] | None = None
        self._initialised = False
        self._poller: threading.Thread | None = None
        self._poller_stop = threading.Event()

    # -- public API ------------------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        """Every GPU now; a GPU in MIG mode as its MIG instances (enumerated afresh each call)."""
        self._discover()
        assert self._devices is not None
        return [d.info for d in self._devices.values()]

    def metrics_available(self, device_id: str) -> set[str]:
        """The metric keys ``device_id`` still reports (a refused call removes its metrics);
        ``KeyError`` for a device not found."""
        if self._devices is None:
            self._discover()
        assert self._devices is not None
        return self._devices[device_id].available()

    def pci_bus_id(self, device_id: str) -> str | None:
        """The PCI bus id of the GPU (of a MIG instance: its GPU), as dcgm-exporter labels it."""
        if self._devices is None:
            self._discover()
        assert self._devices is not None
        dev = self._devices.get(device_id)
        return dev.pci_bus_id if dev is not None else None

    def sample(self) -> SampleBatch:
        """One reading of every device now, as ``SAMPLE_COLUMNS`` rows: one row per (device,
        metric, workload) with the workload's ``share`` of the device (adding to 1 per device)."""
        if self._devices is None:
            self._discover()
        assert self._devices is not None
        now = self._clock()
        ts_ms = int(now * 1000)
        cols: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
        workloads: dict[str, WorkloadInfo] = {}
        for dev in self._devices.values():
            values = self._read(dev, now)
            occupants = self._guard(dev, "procs", partial(dev.shares.current, now)) or [(UNALLOCATED, 1.0)]
            for info, share in occupants:
                if info.workload_key:  # '' (unallocated) needs no description
                    workloads.setdefault(info.workload_key, info)
                for metric, value in values.items():
                    cols["device_id"].append(dev.info.device_id)
                    cols["ts_ms"].append(ts_ms)
                    cols["metric"].append(metric)
                    cols["value"].append(value)
                    cols["workload_key"].append(info.workload_key)
                    cols["share"].append(share)
        shared = any(dev.shares.time_sliced for dev in self._devices.values())
        if shared and self._poller is None and self.config.process_util_every_s > 0:
            self._start_poller()
        # Plain lists: the agent spools and exports them as they are, and never needs Polars.
        return SampleBatch.from_columns(
            cols, [d.info for d in self._devices.values()], list(workloads.values())
        )

    def close(self) -> None:
        """Stop the poller, free GPM buffers and shut NVML down (a later call initialises it
        again)."""
        if self._poller is not None:
            self._poller_stop.set()
            self._poller.join()
            self._poller, self._poller_stop = None, threading.Event()
        for dev in (self._devices or {}).values():
            self._drop_gpm(dev)
        self._devices = None
        if self._initialised:
            self._nvml.nvmlShutdown()
            self._initialised = False

    # -- readings --------------------------------------------------------------------------

    def _start_poller(self) -> None:
        """Draw time-sliced GPUs' process utilization between samples, from the first sample
        that finds one shared until ``close()``: a thread, since ``period_s`` (5 s) is far longer
        than the driver's ~200 ms windows the draws should spread over."""
        every_s, stop = self.config.process_util_every_s, self._poller_stop

        def run() -> None:
            while not stop.wait(every_s):
                for dev in list((self._devices or {}).values()):
                    if not dev.shares.time_sliced:
                        continue
                    try:
                        dev.shares.poll()  # NVML's own errors are handled there
                    except Exception as exc:  # a draw is a refinement: never lose the thread
                        log.warning("nvml: %s process utilization failed: %s", dev.info.device_id, exc)

        self._poller = threading.Thread(target=run, name="nvml-process-util", daemon=True)
        self._poller.start()

    def _read(self, dev: _Device, now: float) -> dict[str, float]:
        values: dict[str, float] = {}
        every = {"energy": self.config.energy_every_s}
        for name in list(dev.readings):
            if name in every and now - dev.read_at.get(name, float("-inf")) < every[name]:
                continue  # an expensive reading, not due yet
            got = self._guard(dev, name, partial(_READINGS[name][1], self._nvml, dev.handle))
            if got is None and _FALLBACK.get(name) in dev.readings:  # just refused: the older call
                name = _FALLBACK[name]
                got = self._guard(dev, name, partial(_READINGS[name][1], self._nvml, dev.handle))
            if got is not None:
                dev.read_at[name] = now
                metrics = _READINGS[name][0]
                values.update({m.value: v for m, v in zip(metrics, got, strict=True)})
        if dev.gpm is not None:
            got_gpm = self._guard(dev, "gpm", dev.gpm.read)
            if got_gpm is not None:
                gpm_values, refused = got_gpm
                dev.gpm_metrics -= refused
                if not dev.gpm_metrics:
                    self._drop_gpm(dev)
                values.update(gpm_values)
        return values

    def _guard(self, dev: _Device, reading: str, call: Callable[[], Any]) -> Any:
        """``call()``, or None when NVML fails: a refusal drops ``reading`` for good."""
        nvml = self._nvml
        try:
            return call()
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            log.info("nvml: %s refuses %s (%s); not asking again", dev.info.device_id, reading, exc)
            if reading == "gpm":
                self._drop_gpm(dev)
            elif reading in dev.readings:
                i = dev.readings.index(reading)
                dev.readings[i : i + 1] = [_FALLBACK[reading]] if reading in _FALLBACK else []
        except nvml.NVMLError as exc:  # transient (timeout, GPU lost, ...): skip this reading
            log.warning("nvml: %s %s failed: %s", dev.info.device_id, reading, exc)
        return None

    def _drop_gpm(self, dev: _Device) -> None:
        if dev.gpm is not None:
            gpm, dev.gpm = dev.gpm, None
            with contextlib.suppress(self._nvml.NVMLError):
                gpm.close()
        dev.gpm_metrics = set()

    @property
    def attributor(self) -> Attributor | None:
        """What maps GPU processes to workloads (None until the first discovery picks the default)."""
        return self._attributor

    # -- discovery -------------------------------------------------------------------------

    def _discover(self) -> None:
        nvml = self._nvml
        if not self._initialised:
            self._init()
        if self._attributor is None:
            self._attributor = default_attributor(self.config.node)
        old = self._devices or {}
        found: dict[str, _Device] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                devs = self._enumerate(index)
            except nvml.NVMLError as exc:  # a lost or resetting GPU: the rest still report
                log.warning("nvml: GPU %d skipped: %s", index, exc)
                continue
            for dev in devs:
                found[dev.info.device_id] = old.get(dev.info.device_id, dev)
        for gone in old.keys() - found.keys():
            if old[gone].gpm is not None:
                self._drop_gpm(old[gone])
        self._devices = found

    def _init(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except (nvml.NVMLError_LibraryNotFound, nvml.NVMLError_DriverNotLoaded) as exc:
            raise ConfigurationError(f"nvml: no NVIDIA driver on this node ({exc})") from exc
        except nvml.NVMLError as exc:
            raise RetriableError(f"nvml: initialising NVML failed ({exc})") from exc
        self._initialised = True

    def _enumerate(self, index: int) -> list[_Device]:
        nvml = self._nvml
        cfg = self.config
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        base = DeviceInfo(
            device_id=uuid,
            environment=cfg.environment,
            region=cfg.region,
            cluster=cfg.cluster,
            node=cfg.node,
            gpu_model=_text(nvml.nvmlDeviceGetName(handle)),
            gpu_index=index,
            tdp_w=_optional(nvml, lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0),
        )
        vgpu = vgpu_profile(base.gpu_model or "")
        if vgpu is not None:  # a VM's NVIDIA vGPU ("GRID A100-4C"): its fraction of the board
            base = dataclasses.replace(base, gpu_fraction=vgpu.fraction)
        pci = _optional(nvml, lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        has_gpm = bool(_optional(nvml, lambda: gpm_supported(nvml, handle)))
        if not _optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle)[0]):
            return [self._device(base, handle, GpmReader(nvml, handle) if has_gpm else None, pci)]
        devices = []
        gpu_slices = mig_gpu_slices_from_nvml(nvml, handle)  # 7, or 4 on an A30: NVML says
        for j in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except nvml.NVMLError_NotFound:
                continue  # an empty slot
            profile = mig_profile_of(_text(nvml.nvmlDeviceGetName(mig)))
            gi = nvml.nvmlDeviceGetGpuInstanceId(mig)
            info = dataclasses.replace(
                base,
                device_id=_text(nvml.nvmlDeviceGetUUID(mig)),
                parent_device_id=uuid,
                mig_profile=profile,
                gpu_fraction=self._mig_fraction(mig, profile, base.gpu_model, gpu_slices),
            )
            devices.append(self._device(info, mig, GpmReader(nvml, handle, gi) if has_gpm else None, pci))
        return devices

    def _mig_fraction(
        self, mig: Any, profile: str | None, model: str | None, gpu_slices: int | None
    ) -> float:
        """The MIG device's compute slices over its GPU's, as NVML counts them (a compute instance
        of a larger GPU instance holds only its own slices); by the profile name and the GPU
        model (``connectors.vgpu``, as the DCGM path does) where the driver refuses."""
        slices = mig_device_slices_from_nvml(self._nvml, mig) if gpu_slices else None
        if slices is not None and gpu_slices:
            return min(1.0, slices / gpu_slices)
        return mig_fraction(profile, model, gpu_slices)

    def _device(self, info: DeviceInfo, handle: Any, gpm: GpmReader | None, pci: str | None) -> _Device:
        assert self._attributor is not None
        cfg = self.config
        tracker = ShareTracker(
            self._nvml, handle, self._attributor, cfg.process_util_every_s, cfg.node, info.device_id
        )
        gpm_metrics = set(GPM_METRICS) if gpm else set()
        return _Device(info, handle, tracker, gpm=gpm, gpm_metrics=gpm_metrics, pci_bus_id=pci)


def _optional(nvml: Any, call: Callable[[], Any]) -> Any:
    """``call()``, or None where the driver lacks or refuses it."""
    try:
        return call()
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return None
