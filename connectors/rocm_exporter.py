"""AMD's ROCm device-metrics-exporter as an exporter profile (``exporter = "amd"``).

Read through the ``prometheus`` connector (history) or ``dcgm_scrape`` (a ``/metrics`` page) with
``exporter = "amd"``; the mapping is :func:`connectors.exporter_map.map_series` with the rules below,
each checked against the exporter's source (github.com/ROCm/device-metrics-exporter at afd0fe8:
``pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go``, ``docs/configuration/metricslist.md``,
``helm-charts/``) and amd-smi's (github.com/ROCm/amdsmi, ``amdsmi_cli/amdsmi_commands.py``).
docs/vendors.md says what the utilization counters mean next to NVIDIA's.

* **Fields and units.** ``gpu_gfx_activity`` (% of time the graphics/compute engine was busy,
  from the SMU firmware; the counterpart of nvidia-smi's GPU utilization) → ``gpu_util``;
  ``gpu_umc_activity`` (% memory-controller activity) → ``mem_bw``; ``gpu_power_usage`` (W), else
  ``gpu_package_power`` (MI3xx socket power, W), else ``gpu_average_package_power`` (MI2xx) →
  ``power_w``; ``gpu_energy_consumed`` (µJ counter) → ``energy_j`` (÷ 10⁶); ``gpu_used_vram`` and
  ``gpu_total_vram`` ("MB": amd-smi's MB are MiB, bytes // 2²⁰) → ``mem_used_b``/``mem_total_b``;
  ``gpu_edge_temperature`` (MI2xx), else ``gpu_junction_temperature`` (MI3xx hotspot) → ``temp_c``.
* **SM-activity-like** (profiler fields, off by default in the exporter): ``gpu_prof_sm_active``
  is rocprofiler's ``VALUBusy`` and ``gpu_prof_tensor_active_percent`` its ``MfmaUtil``; both are
  percentages of the time the GPU was *active* (``GRBM_GUI_ACTIVE`` cycles), not of wall time, so
  each is multiplied by ``gpu_prof_gui_util_percent`` (``100·GRBM_GUI_ACTIVE/GRBM_COUNT``) of the
  same reading and ÷ 100 → ``sm_active``/``tensor_active`` (DCGM's SM_ACTIVE is over wall time).
  Without the GUI utilization at that reading neither is sampled.
* **Devices.** Labels ``gpu_id`` (index), ``serial_number``, ``card_model``, ``hostname`` and the
  partition labels are always written; ``gpu_uuid`` only when enabled. A GPU is its ``gpu_uuid``
  where written, else its ``serial_number`` (else ``<node>/gpu<gpu_id>``). ``gpu_model`` is
  ``card_model``, named as AMD names it: a bare ``MI300X`` becomes ``AMD Instinct MI300X`` (what
  amd-smi's ``market_name`` says); a board part number (``102-D65208-0C``) stays as written.
  ``vendor`` is ``amd``.
* **Partitions.** ``gpu_compute_partition_type`` ``dpx``/``tpx``/``qpx``/``cpx`` (lower-case in
  the exporter) with a ``gpu_partition_id``: each partition is a device ``<serial>/p<id>`` of the
  physical GPU ``<serial>``, ``gpu_fraction`` 1/2, 1/3, 1/4, or 1/(XCDs: 6 on an MI300A, else 8)
  for CPX. Activity, power, energy and temperature are the physical GPU's, reported on partition 0
  only ("amdsmi does not return per-partition activity data"; other partitions report 0 or
  nothing): partition 0's reading is carried to every partition reporting then, power and energy
  by fraction; VRAM is each partition's own.
* **Node, workload.** The node is the ``hostname`` label (the exporter sets it to the node's name)
  unless the configuration names one, as for dcgm-exporter. ``pod``/``namespace``/``container``
  (Prometheus' ``exported_*`` first, as for dcgm-exporter: under ``honor_labels: false`` the
  exporter's own labels are renamed so and every series carries the scrape target's — the
  exporter's own pod, matched by the profile's ``exporter_pod_pattern`` ``metrics-exporter``, the
  chart's ``<release>-amdgpu-metrics-exporter-…``, and never a workload; under the chart's
  ``honorLabels: true`` the exporter's labels, empty ones included, win) →
  ``k8s:<ns>/<pod>/<container>``; else ``job_id``,
  ``job_user``, ``job_partition`` (the Slurm prolog's) → ``slurm:<job>``. Facts carry them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import polars as pl

from connectors.dcgm import node_of
from connectors.exporter_map import ExporterLabels, FieldSpec, map_series, pod_or_job
from connectors.exporter_profile import ExporterProfile, Series, Stamp
from connectors.sdk import DeviceInfo, SampleBatch

MIB = 1024 * 1024
FIELDS: dict[str, FieldSpec] = {
    "gpu_gfx_activity": FieldSpec("gpu_util"),
    "gpu_umc_activity": FieldSpec("mem_bw"),
    "gpu_power_usage": FieldSpec("power_w", rank=0),
    "gpu_package_power": FieldSpec("power_w", rank=1),
    "gpu_average_package_power": FieldSpec("power_w", rank=2),
    "gpu_energy_consumed": FieldSpec("energy_j", -1_000_000.0),
    "gpu_used_vram": FieldSpec("mem_used_b", float(MIB)),
    "gpu_total_vram": FieldSpec("mem_total_b", float(MIB)),
    "gpu_edge_temperature": FieldSpec("temp_c", rank=0),
    "gpu_junction_temperature": FieldSpec("temp_c", rank=1),
    "gpu_prof_sm_active": FieldSpec("_valu_busy"),
    "gpu_prof_tensor_active_percent": FieldSpec("_mfma_util"),
    "gpu_prof_gui_util_percent": FieldSpec("_gui_util"),
}
#: the physical GPU's, reported on partition 0 (docs/configuration/metricslist.md)
WHOLE_DEVICE = (
    "gpu_util",
    "mem_bw",
    "power_w",
    "energy_j",
    "temp_c",
    "_valu_busy",
    "_mfma_util",
    "_gui_util",
)
_PARTS = {"dpx": 2, "tpx": 3, "qpx": 4}
_BARE_MODEL = re.compile(r"^MI\d")


def model_name(card_model: str | None) -> str | None:
    """``card_model`` as AMD names the product: ``MI300X`` → ``AMD Instinct MI300X``."""
    if not card_model:
        return None
    return f"AMD Instinct {card_model}" if _BARE_MODEL.match(card_model) else card_model


def partitions(kind: str, model: str | None) -> int:
    """How many partitions a compute partition mode makes of one GPU (1: unpartitioned)."""
    if kind == "cpx":
        return 6 if model and "MI300A" in model else 8  # one per XCD
    return _PARTS.get(kind, 1)


def describe(labels: Mapping[str, str], stamp: Stamp) -> DeviceInfo | None:
    """The device one series is of, or None when the labels name none."""
    serial = labels.get("serial_number") or None
    index = labels.get("gpu_id", "")
    node = node_of(labels, stamp)
    physical = (
        labels.get("gpu_uuid") or serial or (f"{node}/gpu{index}" if node and index.isdigit() else None)
    )
    if physical is None:
        return None
    model = model_name(labels.get("card_model"))
    kind = (labels.get("gpu_compute_partition_type") or "").lower()
    count = partitions(kind, model)
    partition = labels.get("gpu_partition_id", "")
    info = DeviceInfo(
        device_id=physical,
        environment=stamp.environment,
        region=stamp.region,
        cluster=stamp.cluster or labels.get("cluster_name") or None,
        node=node,
        gpu_model=model,
        vendor="amd",
        gpu_index=int(index) if index.isdigit() else None,
    )
    if count == 1 or not partition.isdigit():
        return info
    parent = serial or physical
    return DeviceInfo(
        device_id=f"{parent}/p{partition}",
        environment=info.environment,
        region=info.region,
        cluster=info.cluster,
        node=info.node,
        gpu_model=model,
        vendor="amd",
        gpu_index=info.gpu_index,
        parent_device_id=parent,
        mig_profile=kind,
        gpu_fraction=1.0 / count,
    )


def _active_time(rows: pl.DataFrame) -> pl.DataFrame:
    """Profiler percentages of active time → of wall time: × the GUI utilization of the reading."""
    at = ["device_id", "ts_ms", "workload_key"]
    gui = rows.filter(pl.col("key") == "_gui_util").select(*at, pl.col("value").alias("gui"))
    if gui.is_empty():
        return rows
    derived = (
        rows.filter(pl.col("key").is_in(["_valu_busy", "_mfma_util"]))
        .join(gui, on=at)
        .select(
            *at,
            pl.col("key").replace({"_valu_busy": "sm_active", "_mfma_util": "tensor_active"}),
            (pl.col("value") * pl.col("gui") / 100.0).alias("value"),
        )
    )
    return pl.concat([rows.select(derived.columns), derived])


SPEC = ExporterLabels(
    fields=FIELDS,
    device=describe,
    workload=pod_or_job,
    whole_device=WHOLE_DEVICE,
    primary=lambda labels: labels.get("gpu_partition_id") == "0",
    derive=_active_time,
)


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """device-metrics-exporter series → one batch (the module docstring has every rule)."""
    return map_series(series, stamp, SPEC)


PROFILE = ExporterProfile(
    name="amd",
    vendor="amd",
    exporter="device-metrics-exporter",
    fields=tuple(FIELDS),
    to_batch=to_batch,
    exporter_pod_pattern="metrics-exporter",
    check_query='count by (job) ({__name__=~"gpu_gfx_activity|gpu_power_usage"})',
    shown_fields="gpu_gfx_activity, gpu_power_usage",
)
