"""Huawei Ascend npu-exporter → GPU Ledger samples.

The exporter is ``component/npu-exporter`` of Ascend's MindCluster (gitee.com/ascend/mind-cluster,
mirrored at github.com/Ascend/mind-cluster; read at 22bb3d98, 2026-08-21:
``collector/metrics/collector_for_utilization.go``, ``collector_for_npu.go``,
``collector_for_hbm.go``, ``common_utils.go``) and its v5 predecessor
(github.com/Ascend/ascend-npu-exporter). docs/vendors.md has the table. What this module decides:

* **Fields and units** (all gauges, percentages 0–100 as the exporter writes them):
  ``npu_chip_info_overall_utilization`` (the NPU's overall utilization; Atlas A2/A3 — 910B, 910C
  — only) → ``gpu_util``, the "busy" counter; where a chip has none at a time (910A, 310P), its
  AI Core utilization stands in. ``npu_chip_info_utilization`` (the AI Core utilization — the
  compute cores, as npu-smi's ``AICore(%)``) → ``sm_active``, the SM-activity-like counter, so
  the ledger's default busy metric on Ascend is AI Core activity.
  ``npu_chip_info_cube_utilization`` (the cube — matrix — cores, A2/A3 with DCMI's v2 API) →
  ``tensor_active``; ``npu_chip_info_hbm_bandwidth_utilization`` → ``mem_bw``.
  ``npu_chip_info_power`` (W) → ``power_w``; ``npu_chip_info_temperature`` (°C) → ``temp_c``;
  ``npu_chip_info_hbm_used_memory`` / ``_hbm_total_memory`` (MB as DCMI counts them: MiB, a
  910B3 reads 65536) → ``mem_used_b`` / ``mem_total_b``, and where a chip has no HBM series (310P
  cards) its DDR ``npu_chip_info_used_memory`` / ``_total_memory`` instead. There is no energy
  counter: the ledger estimates energy from mean power. ``npu_chip_info_vector_utilization``,
  frequencies, health, network, HCCS and error series are ignored. The exporter writes ``-1``
  for a reading that failed (``FailedMetricValue``): dropped, a gap, never a zero.
* **Devices.** A chip is its ``vdie_id`` label (the die's unique id, what Ascend's own tools key
  on); exporters that leave it empty (the v5 tests' pages) give ``<node>/npu<id>``, with the
  node from the stamp or else Prometheus' ``instance`` label. Virtual NPUs (``vnpu``, label
  ``v_dev_id``/``is_virtual``) are not read.
* **Model.** ``model_name`` is ``<chip name>-<chip type>-<version>`` (DCMI's chip info:
  ``910B3-Ascend-V1``) → "Ascend 910B3", as Huawei names the part.
* **Workload.** The exporter's ``namespace``/``pod_name``/``container_name`` (v6 ``CardLabel``,
  empty when no pod holds the chip) → ``k8s:<ns>/<pod>/<container>``. Scraped by Prometheus with
  ``honor_labels: false`` the exporter's ``namespace`` arrives as ``exported_namespace`` (the
  target has its own ``namespace``), which wins. Several pods on one chip are written as
  ``not_displayed_for_multi_pod``: such a reading is attributed to the workload
  ``k8s:multiple-pods/<chip>`` — held, but not by one pod the exporter can name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import polars as pl

from connectors.dcgm import node_of
from connectors.exporter_profile import ExporterProfile, Series, Stamp, k8s_workload
from connectors.sdk import DeviceInfo, SampleBatch, WorkloadInfo
from connectors.vendor_frames import SeriesCollector, SeriesMeta, fallback
from connectors.vendor_names import ascend_model

VENDOR: Literal["huawei"] = "huawei"
MAX_ID = 200
MIB = 1024 * 1024
#: exporter metric → (internal key, factor to the ledger's unit)
FIELDS: dict[str, tuple[str, float]] = {
    "npu_chip_info_overall_utilization": ("gpu_util", 1.0),
    "npu_chip_info_utilization": ("sm_active", 1.0),
    "npu_chip_info_cube_utilization": ("tensor_active", 1.0),
    "npu_chip_info_hbm_bandwidth_utilization": ("mem_bw", 1.0),
    "npu_chip_info_power": ("power_w", 1.0),
    "npu_chip_info_temperature": ("temp_c", 1.0),
    "npu_chip_info_hbm_used_memory": ("mem_used_b", float(MIB)),
    "npu_chip_info_hbm_total_memory": ("mem_total_b", float(MIB)),
    "npu_chip_info_used_memory": ("ddr_used_b", float(MIB)),
    "npu_chip_info_total_memory": ("ddr_total_b", float(MIB)),
}
METRICS = (
    "gpu_util",
    "sm_active",
    "tensor_active",
    "mem_bw",
    "power_w",
    "temp_c",
    "mem_used_b",
    "mem_total_b",
)
MULTI_POD = "not_displayed_for_multi_pod"


def device_id_of(labels: Mapping[str, str], stamp: Stamp) -> str | None:
    """The chip's ``vdie_id``, else ``<node>/npu<id>`` (None when neither can be told)."""
    vdie = labels.get("vdie_id")
    if vdie:
        return vdie
    npu, node = labels.get("id"), node_of(labels, stamp) or labels.get("instance")
    return f"{node}/npu{npu}" if npu and node else None


def workload_of(labels: Mapping[str, str], device_id: str) -> WorkloadInfo | None:
    """The pod holding the chip, from the exporter's container labels (module docstring)."""
    pod = labels.get("pod_name") or ""
    if not pod:
        return None
    if pod == MULTI_POD:
        return WorkloadInfo(f"k8s:multiple-pods/{device_id}", workload=MULTI_POD)
    ns = labels.get("exported_namespace") or labels.get("namespace") or ""
    return k8s_workload(ns, pod, labels.get("container_name") or "")


def _device(labels: Mapping[str, str], device_id: str, stamp: Stamp) -> DeviceInfo:
    npu = labels.get("id", "")
    return DeviceInfo(
        vendor=VENDOR,
        device_id=device_id,
        environment=stamp.environment,
        region=stamp.region,
        cluster=stamp.cluster or labels.get("cluster") or None,
        node=node_of(labels, stamp),
        gpu_model=ascend_model(labels.get("model_name")),
        gpu_index=int(npu) if npu.isdigit() else None,
    )


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """Map npu-exporter series to one columnar batch (module docstring: every rule)."""
    kept = SeriesCollector()
    for s in series:  # one step per series; samples stay in arrays
        spec = FIELDS.get(s.field)
        if spec is None or len(s.ts_ms) == 0 or s.labels.get("v_dev_id"):
            continue
        device_id = device_id_of(s.labels, stamp)
        if device_id is None or len(device_id) > MAX_ID:  # the ledger's device_id column
            continue
        work = workload_of(s.labels, device_id)
        meta = SeriesMeta(device_id, spec[0], spec[1], "", "mean", work.workload_key if work else "")
        kept.add(s, meta, _device(s.labels, device_id, stamp), work)
    return kept.batch(METRICS, _fallbacks)


def _fallbacks(frame: pl.DataFrame) -> pl.DataFrame:
    # AI Core utilization stands in for overall utilization on chips without it (910A, 310P)
    ai_core = frame.filter(pl.col("key") == "sm_active").with_columns(pl.lit("ai_core_util").alias("key"))
    frame = fallback(pl.concat([frame, ai_core]), "gpu_util", "ai_core_util")
    return fallback(fallback(frame, "mem_used_b", "ddr_used_b"), "mem_total_b", "ddr_total_b")


PROFILE = ExporterProfile(
    name="ascend",
    vendor=VENDOR,
    exporter="npu-exporter",
    fields=tuple(FIELDS),
    to_batch=to_batch,
    exporter_pod_pattern="npu-exporter",  # the DaemonSet's pods: npu-exporter-…
    check_query='count by (job) ({__name__=~"npu_chip_info_.*"})',
    shown_fields="npu_chip_info_utilization, npu_chip_info_power",
)
