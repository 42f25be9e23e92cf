"""Intel XPU Manager's Prometheus exporter → GPU Ledger samples.

The exporter is ``rest/prometheus_exporter`` of github.com/intel/xpumanager (v1.x; read at
``master`` 57e44f55, 2026-06-01, ``prometheus_exporter.py`` and ``prometheus_exporter_types.py``);
docs/vendors.md has the full table. What this module decides:

* **Fields and units.** The exporter writes utilizations as *ratios* (its percentages × 0.01):
  ``xpum_engine_group_ratio{type="compute"}`` (average utilization of all compute engines, per
  tile) → ``gpu_util`` ×100 — the "busy" counter, time the compute engines had work, as
  nvidia-smi's GPU util; where a device has no compute group series at a time,
  ``xpum_engine_ratio`` (GPU_UTILIZATION: any engine active, media and copy included) stands in.
  ``xpum_eu_active_ratio`` (cycles the EUs spent executing instructions, normalized over all EUs)
  → ``sm_active`` ×100 — the SM-activity-like counter, so the ledger's default busy metric on
  Intel is EU activity. ``xpum_memory_bandwidth_ratio`` → ``mem_bw`` ×100.
  ``xpum_power_watts`` (W) → ``power_w``; ``xpum_energy_joules_total`` (counter, J; the exporter's
  ``xpum_energy_joules`` Counter, which prometheus_client writes with ``_total``) → ``energy_j``;
  ``xpum_memory_used_bytes`` → ``mem_used_b``; ``xpum_temperature_celsius{location="gpu"}`` →
  ``temp_c``. The exporter gives no memory total (``xpum_memory_ratio`` is a rounded ratio), so
  ``mem_total_b`` is not set. Other series (frequencies, errors, PCIe, Xe Link, per-engine) are
  ignored.
* **Devices and tiles.** A GPU is its ``uuid`` label. A Data Center GPU Max has two tiles, and the
  exporter writes per-tile lines (label ``sub_dev``) beside device lines (no ``sub_dev``: power,
  energy and the GPU_UTILIZATION average it computes itself); card lines (label ``card``, no
  ``uuid``: power summed over a card's GPUs) are skipped, or a card would count twice. A GPU's
  reading at a time is its device line where there is one, else its tiles' readings combined:
  the mean for ratios (as XPU Manager averages tiles), the sum for watts, joules and bytes, the
  maximum for temperature. Tiles are not separate ledger devices: Intel's Kubernetes device
  plugin hands out whole GPUs (``gpu.intel.com/i915`` / ``xe``), and the exporter names one pod
  per GPU.
* **Model.** ``dev_name`` as the driver names it, without ``(R)``/``(TM)``: "Intel(R) Data Center
  GPU Max 1550" → "Intel Data Center GPU Max 1550". Drivers that only say
  "Intel(R) Graphics [0x0bd5]" are named from the PCI device id (``pci_dev``) for the data-center
  parts listed in ``connectors.vendor_names.INTEL_MODELS``.
* **Node and workload.** The node is the stamp's (``node`` label: the exporter writes it from
  ``NODE_NAME``). The pod the exporter read from the kubelet's pod-resources API is
  ``kube_namespace``/``kube_pod``/``kube_container`` → ``k8s:<ns>/<pod>/<container>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from connectors.dcgm import node_of
from connectors.exporter_profile import ExporterProfile, Series, Stamp, k8s_workload
from connectors.sdk import DeviceInfo, SampleBatch, WorkloadInfo
from connectors.vendor_frames import SeriesCollector, SeriesMeta, fallback
from connectors.vendor_names import intel_model

VENDOR: Literal["intel"] = "intel"
MAX_ID = 200  # the ledger's device_id column
#: exporter metric → (internal key, factor to the ledger's unit, how tiles combine)
FIELDS: dict[str, tuple[str, float, str]] = {
    "xpum_engine_group_ratio": ("gpu_util", 100.0, "mean"),  # type="compute" only
    "xpum_engine_ratio": ("gpu_util_any_engine", 100.0, "mean"),
    "xpum_eu_active_ratio": ("sm_active", 100.0, "mean"),
    "xpum_memory_bandwidth_ratio": ("mem_bw", 100.0, "mean"),
    "xpum_power_watts": ("power_w", 1.0, "sum"),
    "xpum_energy_joules_total": ("energy_j", 1.0, "sum"),
    "xpum_energy_joules": ("energy_j", 1.0, "sum"),  # the family's name, as a /metrics parser gives it
    "xpum_memory_used_bytes": ("mem_used_b", 1.0, "sum"),
    "xpum_temperature_celsius": ("temp_c", 1.0, "max"),  # location="gpu" only
}
#: series of these fields count only with this label value
_ONLY = {"xpum_engine_group_ratio": ("type", "compute"), "xpum_temperature_celsius": ("location", "gpu")}
METRICS = ("gpu_util", "sm_active", "mem_bw", "power_w", "energy_j", "mem_used_b", "temp_c")
POD_LABELS = ("kube_namespace", "kube_pod", "kube_container")


def workload_of(labels: Mapping[str, str]) -> WorkloadInfo | None:
    """The pod XPU Manager found holding the GPU (kubelet pod-resources), else None."""
    ns, pod, container = (labels.get(name) or "" for name in POD_LABELS)
    if not pod:
        return None
    return k8s_workload(ns, pod, container)


def _device(labels: Mapping[str, str], uuid: str, stamp: Stamp) -> DeviceInfo:
    return DeviceInfo(
        vendor=VENDOR,
        device_id=uuid,
        environment=stamp.environment,
        region=stamp.region,
        cluster=stamp.cluster or labels.get("cluster") or None,
        node=node_of(labels, stamp),
        gpu_model=intel_model(labels.get("dev_name"), labels.get("pci_dev")),
    )


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """Map XPU Manager exporter series to one columnar batch (module docstring: every rule)."""
    kept = SeriesCollector()
    for s in series:  # one step per series; samples stay in arrays
        spec = FIELDS.get(s.field)
        uuid = s.labels.get("uuid")
        only = _ONLY.get(s.field)
        if (
            spec is None
            or not uuid
            or len(uuid) > MAX_ID
            or len(s.ts_ms) == 0
            or (only and s.labels.get(only[0]) != only[1])
        ):
            continue
        work = workload_of(s.labels)
        key, scale, how = spec
        part = s.labels.get("sub_dev") or ""
        meta = SeriesMeta(uuid, key, scale, part, how, work.workload_key if work else "")
        kept.add(s, meta, _device(s.labels, uuid, stamp), work)
    return kept.batch(METRICS, lambda frame: fallback(frame, "gpu_util", "gpu_util_any_engine"))


PROFILE = ExporterProfile(
    name="xpum",
    vendor=VENDOR,
    exporter="XPU Manager exporter",
    fields=tuple(FIELDS),
    to_batch=to_batch,
    exporter_pod_pattern="xpumanager",  # the DaemonSet's pods: intel-xpumanager-…
    check_query='count by (job) ({__name__=~"xpum_.*"})',
    shown_fields="xpum_engine_group_ratio, xpum_eu_active_ratio",
)
