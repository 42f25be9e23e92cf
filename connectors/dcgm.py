"""dcgm-exporter series → GPU Ledger samples: the mapping shared by ``prometheus`` and ``dcgm_scrape``.

FORMATS.md §1 has the exporter's fields, units and labels. What this module decides:

* **Fields and units.** ``DCGM_FI_DEV_GPU_UTIL`` (%) → ``gpu_util``; ``DCGM_FI_PROF_SM_ACTIVE``,
  ``_PIPE_TENSOR_ACTIVE``, ``_DRAM_ACTIVE`` (ratios 0–1, ×100) → ``sm_active``, ``tensor_active``,
  ``mem_bw``; ``DCGM_FI_DEV_FB_USED`` (MiB) → ``mem_used_b``, and ``FB_USED + FB_FREE (+ FB_RESERVED)``
  → ``mem_total_b`` (bytes) where used and free come at the same time; ``DCGM_FI_DEV_POWER_USAGE`` (W)
  → ``power_w``; ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (counter, mJ) → ``energy_j`` (J);
  ``DCGM_FI_DEV_GPU_TEMP`` → ``temp_c``. Other fields are ignored.
* **Devices.** A GPU is its ``UUID`` (``uuid`` with ``--use-old-namespace``). A series with
  ``GPU_I_ID`` is a MIG instance: its id is a real MIG UUID label where one exists
  (``dra_mig_device_uuid``), else ``MIG-<parent UUID>-<GI id>``; ``parent_device_id`` is the GPU's
  UUID, ``mig_profile`` is ``GPU_I_PROFILE`` and ``gpu_fraction`` its compute slices (the profile's
  leading ``Ng``) over the GPU's slices (7; 4 on an A30).
* **MIG.** ``DCGM_FI_DEV_GPU_UTIL`` is not supported for MIG instances (it reads 0), so an
  instance's ``gpu_util`` is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` ×100; on a full GPU GR_ENGINE is
  ignored (GPU_UTIL is the one nvidia-smi users know). A GPU is in MIG mode at the times any of its
  instances reports; then it is **not a device** of the ledger: its device-level series (no
  ``GPU_I_*``) only feed its instances — power and energy
  **split by gpu_fraction** (a ``3g`` instance of a 700 W GPU draws 300 W), temperature as is — at
  the times the instance itself reports, with the instance's workload. The share of slices no
  instance holds is attributed to no device (an unpartitioned part of a GPU runs nothing). The
  parent's own utilization and memory series are dropped.
* **Node.** The first non-empty of ``node_labels`` (default ``node``, ``kubernetes_node``,
  ``Hostname``), or a configured node. The lowercase ``hostname`` of newer exporters (PR #655) is
  the exporter *pod* under Kubernetes, so it is not a node by default; the old ``Hostname`` is the
  host on bare metal (also the pod under Kubernetes: relabel the node into ``node`` there).
* **Workload.** ``namespace``/``pod``/``container`` (or the old ``pod_namespace``/``pod_name``/
  ``container_name``) → ``k8s:<ns>/<pod>/<container>`` with namespace and workload = pod;
  ``hpc_job`` → ``hpc:<job>``; project/team/user from ``label_project``/``label_team``/
  ``label_user`` where a recording rule joined pod labels in, else none. No labels: ``''``.

The work is columnar: one Python step per *series* collects its labels; the samples of all
series are concatenated as arrays and mapped with Polars.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import polars as pl

from connectors.sdk import SAMPLE_SCHEMA, DeviceInfo, SampleBatch, WorkloadInfo, empty_samples

MIB = 1024 * 1024

#: exporter field → (internal key, factor to the ledger's unit; negative: divide, which is exact
#: for mJ → J where multiplying by an inexact 1e-3 is not)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("mem_bw", 100.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine", 100.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used", float(MIB)),
    "DCGM_FI_DEV_FB_FREE": ("fb_free", float(MIB)),
    "DCGM_FI_DEV_FB_RESERVED": ("fb_reserved", float(MIB)),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", -1000.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
}
_DIRECT = ["gpu_util", "sm_active", "tensor_active", "mem_bw", "power_w", "energy_j", "temp_c"]
_FB = ["fb_used", "fb_free", "fb_reserved"]
_FROM_PARENT = ["power_w", "energy_j", "temp_c"]
_SPLIT = ["power_w", "energy_j"]  # additive: a MIG instance gets its fraction
DEFAULT_NODE_LABELS = ("node", "kubernetes_node", "Hostname")
_MIG_UUID_LABELS = ("dra_mig_device_uuid",)
_SLICES = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True, slots=True)
class Series:
    """One exporter time series: its field name, its labels and its readings (ms, raw unit)."""

    field: str
    labels: Mapping[str, str]
    ts_ms: np.ndarray  # int64
    values: np.ndarray  # float64


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the source's configuration adds to every device."""

    environment: Literal["onprem", "aws", "gcp", "azure"] = "onprem"
    region: str | None = None
    cluster: str | None = None
    node: str | None = None  # overrides node_labels (the node agent knows where it runs)
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS


def mig_fraction(profile: str | None, model: str | None) -> float:
    """Compute slices of a MIG profile over the GPU's: ``3g.40gb`` → 3/7 (A30: of 4)."""
    match = _SLICES.match(profile or "")
    if match is None:
        return 1.0
    total = 4 if model and "A30" in model else 7
    return min(1.0, int(match.group(1)) / total)


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def workload_of(labels: Mapping[str, str]) -> WorkloadInfo | None:
    """The pod (or HPC job) a series names, or None when nothing occupies the device."""
    pod = _label(labels, "pod", "pod_name")
    job = _label(labels, "hpc_job")
    if not pod and not job:
        return None
    extra = {
        "project": _label(labels, "label_project"),
        "team": _label(labels, "label_team"),
        "user_name": _label(labels, "label_user"),
    }
    if pod:
        ns = _label(labels, "namespace", "pod_namespace")
        container = _label(labels, "container", "container_name") or ""
        return WorkloadInfo(f"k8s:{ns or ''}/{pod}/{container}", namespace=ns, workload=pod, **extra)
    return WorkloadInfo(f"hpc:{job}", workload=job, **extra)


def _device(labels: Mapping[str, str], uuid: str, stamp: Stamp) -> DeviceInfo:
    gpu = labels.get("gpu", "")
    model = _label(labels, "modelName")
    gi = labels.get("GPU_I_ID") or None
    profile = labels.get("GPU_I_PROFILE") or None
    physical = DeviceInfo(
        device_id=uuid,
        environment=stamp.environment,
        region=stamp.region,
        cluster=stamp.cluster or _label(labels, "cluster"),
        node=stamp.node or _label(labels, *stamp.node_labels),
        gpu_model=model,
        gpu_index=int(gpu) if gpu.isdigit() else None,
    )
    if gi is None:
        return physical
    return replace(
        physical,
        device_id=_label(labels, *_MIG_UUID_LABELS) or f"MIG-{uuid}-{gi}",
        parent_device_id=uuid,
        mig_profile=profile,
        gpu_fraction=mig_fraction(profile, model),
    )


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """Map exporter series to one columnar batch (see the module docstring for every rule)."""
    meta: list[tuple[int, str, float, str, str, bool, float, str]] = []
    ts_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    for s in series:  # one step per series; samples stay in arrays
        spec = FIELDS.get(s.field)
        uuid = _label(s.labels, "UUID", "uuid")
        if spec is None or uuid is None or len(s.ts_ms) == 0:
            continue
        info = _device(s.labels, uuid, stamp)
        devices[info.device_id] = info
        work = workload_of(s.labels)
        if work is not None:
            workloads[work.workload_key] = work
        mig = info.parent_device_id is not None
        key = work.workload_key if work else ""
        meta.append((len(meta), spec[0], spec[1], info.device_id, uuid, mig, info.gpu_fraction, key))
        ts_parts.append(np.asarray(s.ts_ms, dtype=np.int64))
        value_parts.append(np.asarray(s.values, dtype=np.float64))
    if not meta:
        return SampleBatch(empty_samples(), [])
    names = ["sid", "key", "scale", "device_id", "parent", "mig", "fraction", "workload_key"]
    table = pl.DataFrame(meta, schema=names, orient="row")
    sid = np.repeat(np.arange(len(meta), dtype=np.int64), [len(p) for p in ts_parts])
    frame = (
        pl.DataFrame({"sid": sid, "ts_ms": np.concatenate(ts_parts), "raw": np.concatenate(value_parts)})
        .join(table, on="sid")
        .with_columns(
            pl.when(pl.col("scale") < 0)
            .then(pl.col("raw") / -pl.col("scale"))
            .otherwise(pl.col("raw") * pl.col("scale"))
            .alias("value")
        )
        .filter(pl.col("value").is_not_nan())
    )
    instance = frame.filter(pl.col("mig"))
    # A GPU is in MIG mode at the times its instances report (a GPU can change mode mid-window).
    mig_times = instance.select("parent", "ts_ms").unique()
    gpu = frame.filter(~pl.col("mig"))
    full = gpu.join(mig_times, on=["parent", "ts_ms"], how="anti")
    parent = gpu.join(mig_times, on=["parent", "ts_ms"], how="semi")
    key_col = pl.col("key")
    parts = [
        full.filter(key_col.is_in(_DIRECT)).with_columns(key_col.alias("metric")),
        instance.filter(key_col.is_in([*_DIRECT, "gr_engine"]) & (key_col != "gpu_util")).with_columns(
            key_col.replace("gr_engine", "gpu_util").alias("metric")
        ),
        _memory(pl.concat([full, instance]).filter(key_col.is_in(_FB))),
        _from_parent(parent, instance),
    ]
    columns = [pl.col(c).cast(t) for c, t in SAMPLE_SCHEMA.items() if c != "share"]
    samples = pl.concat([p.select(*columns, pl.lit(1.0).alias("share")) for p in parts])
    used = set(samples["device_id"].unique().to_list())  # a GPU only ever in MIG mode is no device
    kept = [info for device_id, info in devices.items() if device_id in used]
    return SampleBatch(samples, kept, list(workloads.values()))


def _memory(fb: pl.DataFrame) -> pl.DataFrame:
    """FB used/free/reserved (bytes) at one reading → ``mem_used_b`` and ``mem_total_b``."""
    of = {k: pl.col("value").filter(pl.col("key") == k).max() for k in _FB}
    wide = fb.group_by("device_id", "ts_ms", "workload_key").agg(
        of["fb_used"].alias("mem_used_b"),
        (of["fb_used"] + of["fb_free"] + of["fb_reserved"].fill_null(0.0)).alias("mem_total_b"),
    )
    return wide.unpivot(
        on=["mem_used_b", "mem_total_b"],
        index=["device_id", "ts_ms", "workload_key"],
        variable_name="metric",
        value_name="value",
    ).filter(pl.col("value").is_not_null())


def _from_parent(parent: pl.DataFrame, instance: pl.DataFrame) -> pl.DataFrame:
    """A MIG-mode GPU's power, energy and temperature, carried to each instance reporting then."""
    readings = instance.select("device_id", "parent", "ts_ms", "workload_key", "fraction").unique()
    scaled = pl.when(pl.col("key").is_in(_SPLIT)).then(pl.col("value") * pl.col("fraction"))
    return (
        parent.filter(pl.col("key").is_in(_FROM_PARENT))
        .select("parent", "ts_ms", "key", "value")
        .join(readings, on=["parent", "ts_ms"], how="inner")
        .with_columns(scaled.otherwise(pl.col("value")).alias("value"), pl.col("key").alias("metric"))
    )
