"""Intel XPU Manager 2.x (``xpumd``, an OpenTelemetry collector) → GPU Ledger samples.

XPU Manager 2 replaced the v1 exporter (:mod:`connectors.xpum_exporter`) with OpenTelemetry
hardware metrics that its collector exposes to Prometheus as ``hw_*`` (github.com/intel/xpumanager
``xpumd/``, read at 34c32c6e: ``receiver/intelxpu/sysman/documentation.md``, ``engine.go``,
``power.go``, ``device.go`` and the Prometheus names and label sets its integration test expects,
``test/integration/k8s/xpumd_test.go``). Every series carries ``hw_id`` (the GPU's UUID),
``pci_bdf`` and ``com_intel_subdevice_id`` ('' for the whole GPU, else the tile). What this
module decides:

* ``hw_gpu_utilization_ratio`` is one series per Level Zero engine *or engine group*, its task
  label ``hw_gpu_task`` the group's name lower-cased (``compute-all``, ``all``, ``copy-all``,
  ``compute-single``, …): ``compute-all`` ×100 → ``gpu_util`` (the busy counter, as v1's compute
  engine group); where a GPU has none at a time, ``all`` (any engine) stands in. xpumd exports
  no EU activity, so Intel GPUs read this way ledger on ``gpu_util``.
* ``hw_memory_bandwidth_utilization_ratio`` ×100 → ``mem_bw``.
* ``hw_power_watts`` / ``hw_energy_joules_total`` of the power domain ``package``
  (``hw_sensor_location``; ``card`` also counts board parts, ``memory`` is inside the package):
  → ``power_w`` / ``energy_j``, the GPU's own line where there is one, else its tiles' summed.
* ``hw_memory_usage_bytes`` / ``hw_memory_size_bytes`` of ``hw_memory_location="device"`` →
  ``mem_used_b`` / ``mem_total_b``, summed over the GPU's memory modules (``hw_name``).
* ``hw_temperature_celsius{hw_sensor_location="gpu"}`` → ``temp_c`` (its ``statistic="max"``
  line; ``min`` is left out).
* The model is ``hw_gpu_info``'s ``hw_model`` (without ``(R)``/``(TM)``). xpumd names no pods:
  readings have no workload (the node agent's pod-resources reader or ``xpu-smi ps`` do that).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from connectors.dcgm import node_of
from connectors.exporter_profile import ExporterProfile, Series, Stamp
from connectors.sdk import DeviceInfo, SampleBatch
from connectors.vendor_frames import SeriesCollector, SeriesMeta, fallback
from connectors.vendor_names import intel_model

VENDOR: Literal["intel"] = "intel"
MAX_ID = 200  # the ledger's device_id column
INFO = "hw_gpu_info"
#: metric → (internal key, factor, how tiles/modules combine, (label, value) the series must have)
FIELDS: dict[str, tuple[str, float, str, tuple[str, str] | None]] = {
    "hw_gpu_utilization_ratio": ("gpu_util", 100.0, "mean", None),  # by hw_gpu_task below
    "hw_memory_bandwidth_utilization_ratio": ("mem_bw", 100.0, "mean", None),
    "hw_power_watts": ("power_w", 1.0, "sum", ("hw_sensor_location", "package")),
    "hw_energy_joules_total": ("energy_j", 1.0, "sum", ("hw_sensor_location", "package")),
    "hw_energy_joules": ("energy_j", 1.0, "sum", ("hw_sensor_location", "package")),  # a /metrics family
    "hw_memory_usage_bytes": ("mem_used_b", 1.0, "sum", ("hw_memory_location", "device")),
    "hw_memory_size_bytes": ("mem_total_b", 1.0, "sum", ("hw_memory_location", "device")),
    "hw_temperature_celsius": ("temp_c", 1.0, "max", ("hw_sensor_location", "gpu")),
}
_TASKS = {"compute-all": "gpu_util", "all": "gpu_util_any_engine"}
_MEMORY = ("mem_used_b", "mem_total_b")  # one series per module: every one a part to add up
METRICS = ("gpu_util", "mem_bw", "power_w", "energy_j", "mem_used_b", "mem_total_b", "temp_c")


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """Map xpumd ``hw_*`` series to one columnar batch (module docstring: every rule)."""
    listed = list(series)
    models = {
        s.labels.get("hw_id", ""): intel_model(s.labels.get("hw_model"), s.labels.get("pci_device_id"))
        for s in listed
        if s.field == INFO
    }
    kept = SeriesCollector()
    for s in listed:  # one step per series; samples stay in arrays
        spec = FIELDS.get(s.field)
        uuid = s.labels.get("hw_id") or ""
        if spec is None or not uuid or len(uuid) > MAX_ID or len(s.ts_ms) == 0:
            continue
        key, scale, how, only = spec
        if only is not None and s.labels.get(only[0]) != only[1] or s.labels.get("statistic") == "min":
            continue
        if s.field == "hw_gpu_utilization_ratio":
            if s.labels.get("hw_gpu_task") not in _TASKS:
                continue
            key = _TASKS[s.labels["hw_gpu_task"]]
        tile = s.labels.get("com_intel_subdevice_id") or ""
        part = f"{tile}/{s.labels.get('hw_name', '')}" if key in _MEMORY else tile
        device = DeviceInfo(
            vendor=VENDOR,
            device_id=uuid,
            environment=stamp.environment,
            region=stamp.region,
            cluster=stamp.cluster or s.labels.get("cluster") or None,
            node=node_of(s.labels, stamp),
            gpu_model=models.get(uuid),
        )
        kept.add(s, SeriesMeta(uuid, key, scale, part, how, ""), device, None)
    return kept.batch(METRICS, lambda frame: fallback(frame, "gpu_util", "gpu_util_any_engine"))


PROFILE = ExporterProfile(
    name="xpumd",
    vendor=VENDOR,
    exporter="XPU Manager 2 (xpumd)",
    fields=(*FIELDS, INFO),
    to_batch=to_batch,
    exporter_pod_pattern="xpumd",  # the chart's DaemonSet pods
    check_query='count by (job) ({__name__=~"hw_gpu_.*"})',
    shown_fields="hw_gpu_utilization_ratio, hw_power_watts",
)
