"""dcgm-exporter series → GPU Ledger samples: the mapping shared by ``prometheus`` and ``dcgm_scrape``.

docs/formats.md §1 has the exporter's fields, units and labels. Each rule below was checked against
dcgm-exporter's own source (github.com/NVIDIA/dcgm-exporter at d5e5f51, "Rename Hostname label to
hostname (#655)", and its Helm chart ``deployment/``) and the exporter issues named. What this
module decides:

* **Fields and units.** ``DCGM_FI_DEV_GPU_UTIL`` (%) → ``gpu_util``; ``DCGM_FI_PROF_SM_ACTIVE``,
  ``_PIPE_TENSOR_ACTIVE``, ``_DRAM_ACTIVE`` (ratios 0–1, ×100) → ``sm_active``, ``tensor_active``,
  ``mem_bw``; ``DCGM_FI_DEV_FB_USED`` (MiB) → ``mem_used_b``, and ``FB_USED + FB_FREE (+ FB_RESERVED)``
  of the *device* → ``mem_total_b`` (bytes) where used and free come at the same time;
  ``DCGM_FI_DEV_POWER_USAGE`` (W) → ``power_w``; ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (counter,
  mJ) → ``energy_j`` (J); ``DCGM_FI_DEV_GPU_TEMP`` → ``temp_c``. Other fields are ignored. Names
  are matched case-insensitively: some pipelines lower-case them (``dcgm_fi_prof_gr_engine_active``,
  exporter issue #272).
* **Devices.** A GPU is its ``UUID`` (``uuid`` with ``--use-old-namespace``). A series with
  ``GPU_I_ID`` is a MIG instance: its id is a real MIG UUID label where one exists
  (``dra_mig_device_uuid``), else ``MIG-<parent UUID>-<GI id>``; ``parent_device_id`` is the GPU's
  UUID, ``mig_profile`` is ``GPU_I_PROFILE`` and ``gpu_fraction`` its compute slices (the profile's
  leading ``Ng``) over the GPU's slices (7; 4 on an A30).
* **MIG (flex mode, the exporter's default ``-d f``).** On a MIG-enabled GPU the exporter watches
  only the GPU instances: there is no series without ``GPU_I_*`` for that GPU, and every
  *device-level* field appears once per instance carrying the whole GPU's value (issue #317:
  ``DCGM_FI_DEV_POWER_USAGE{…GPU_I_ID="3"} 52.636`` and the same on ``GPU_I_ID="4"``).
  Device-level fields are the ones DCGM keeps per physical GPU, which a GPU instance entity
  reads through from its GPU: of the fields mapped here ``POWER_USAGE``,
  ``TOTAL_ENERGY_CONSUMPTION`` and ``GPU_TEMP`` (also the clocks, which all instances share, #50),
  plus ``GPU_UTIL``, which DCGM does not support for instances (it reads 0, #216). The
  instance-level fields are the profiling ones (``DCGM_FI_PROF_*``, measured per GPU instance)
  and the frame buffer (``FB_USED``/``FREE``/``RESERVED``, per MIG device since DCGM 3.1.3). So a
  MIG-mode GPU's device-level value at a time is read **once**: from the GPU's own series when
  one reports then (``-d g`` or ``-d a`` add it), else the largest of its instances' readings
  (one field read at slightly different moments: #317 shows 52.636 and 52.746 on one GPU), and
  then **split by gpu_fraction** for power and energy (a ``3g`` instance of a 700 W GPU draws
  300 W), temperature as is — at the times the instance itself reports, with its workload. The
  share of slices no instance holds (an A30 with two 1g of 4 slices: half) is attributed to no
  device: an unpartitioned part of a GPU runs nothing. An instance's ``gpu_util`` is
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` ×100; on a full GPU GR_ENGINE is ignored (GPU_UTIL is the one
  nvidia-smi users know). A GPU is in MIG mode at the times any of its instances reports; then
  it is not a device of the ledger itself, and its own utilization and memory series are dropped.
* **Node.** The first non-empty of ``node_labels``: default ``node``, ``kubernetes_node`` (what a
  scrape config relabels from ``__meta_kubernetes_pod_node_name``: the node for sure), then
  ``NODE_NAME``, ``hostname`` (since #655) and ``Hostname`` (before). The exporter fills its
  hostname label from the ``NODE_NAME`` environment variable when set (``internal/pkg/hostname``,
  since #129) and the chart and the GPU Operator set it from ``spec.nodeName``: the node. Older
  exporters, or a deployment without ``NODE_NAME``, write the container's hostname — the exporter
  *pod* under Kubernetes — so a value that names the exporter's pod (``exporter_pod_pattern``) is
  never taken for a node. A configured ``node`` (the node agent) wins over all labels.
* **Workload.** ``pod_labels`` lists (namespace, pod, container) label triples, first pod found
  wins; by default ``exported_namespace``/``exported_pod``/``exported_container`` (what Prometheus
  makes of the exporter's labels with the chart's default ``serviceMonitor.honorLabels: false``,
  exporter issue #85), then ``namespace``/``pod``/``container``, then the old
  ``pod_namespace``/``pod_name``/``container_name``. Prometheus also attaches its scrape target's
  own ``pod``/``namespace`` (the exporter's) to every series, so a pod is never a workload when it
  is the scrape target's: a ``pod`` that a series carries beside ``exported_pod`` (then it is
  the target label), or one matching ``exporter_pod_pattern`` (default: names containing
  ``dcgm-exporter``; the idle GPUs of a node carry only that). → ``k8s:<ns>/<pod>/<container>``
  with namespace and workload = pod; ``hpc_job`` → ``hpc:<job>``; project/team/user from
  ``label_project``/``label_team``/``label_user`` where a recording rule joined pod labels in.
  No workload: ``''`` (unallocated).
* **Time-shared GPUs** (``--kubernetes-virtual-gpus``, PR #594, ``transformation/kubernetes.go``):
  the exporter writes each field once per pod sharing a GPU (the device's value, pod labels and
  ``vgpu``) and, for ``GPU_UTIL`` and ``FB_USED``, keeps the device-level line (no pod labels)
  beside per-pod lines holding each pod's processes' SM utilization and memory. So at a reading
  where any series of a device names a workload, the line without one is the device, not an
  unallocated user: the device's value of every field (the line without pod where there is one,
  else the pods' copies) is given to each pod with ``share`` = the pod's ``GPU_UTIL`` over the
  pods' sum (evenly where that is 0 or the pods' lines are copies). A pod's ``mem_used_b`` is its
  own ``FB_USED``; ``mem_total_b`` is always the device's used + free (+ reserved).

The work is columnar: one Python step per *series* collects its labels; the samples of all
series are concatenated as arrays and mapped with Polars.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np
import polars as pl

from connectors.exporter_profile import (
    DEFAULT_EXPORTER_POD_PATTERN,
    DEFAULT_NODE_LABELS,
    DEFAULT_POD_LABELS,
    ExporterProfile,
    Series,
    Stamp,
    k8s_workload,
    target_pods,
)
from connectors.sdk import DeviceInfo, SampleBatch, WorkloadInfo, categorical_sample_schema, empty_samples
from connectors.vgpu import mig_fraction  # shared with the node agent: 7 slices, 4 on an A30

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
#: DCGM keeps these per physical GPU: a MIG instance's series repeats the whole GPU's value
DEVICE_LEVEL = ["power_w", "energy_j", "temp_c"]
_SPLIT = ["power_w", "energy_j"]  # additive: a MIG instance gets its fraction
_INSTANCE = ["sm_active", "tensor_active", "mem_bw", "gr_engine", *_FB]  # per GPU instance
__all__ = [  # Series, Stamp and the label defaults live in connectors.exporter_profile now
    "DEFAULT_EXPORTER_POD_PATTERN",
    "DEFAULT_NODE_LABELS",
    "DEFAULT_POD_LABELS",
    "FIELDS",
    "PROFILE",
    "Series",
    "Stamp",
    "field_key",
    "mig_fraction",
    "node_of",
    "target_pods",
    "to_batch",
    "workload_of",
]
_MIG_UUID_LABELS = ("dra_mig_device_uuid",)


def field_key(name: str) -> str | None:
    """The exporter field a metric name is, whatever its case (#272): ``FIELDS`` key or None."""
    upper = name.upper()
    return upper if upper in FIELDS else None


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def workload_of(
    labels: Mapping[str, str], stamp: Stamp | None = None, targets: frozenset[str] | set[str] = frozenset()
) -> WorkloadInfo | None:
    """The pod (or HPC job) a series names, or None when nothing occupies the device."""
    stamp = stamp or _DEFAULT_STAMP
    pod = ns = container = None
    for ns_label, pod_label, container_label in stamp.pod_labels:
        value = labels.get(pod_label)
        if value and value not in targets and not stamp.is_exporter_pod(value):
            pod, ns, container = value, labels.get(ns_label) or None, labels.get(container_label) or ""
            break
    job = _label(labels, "hpc_job")
    if not pod and not job:
        return None
    project, team = _label(labels, "label_project"), _label(labels, "label_team")
    user = _label(labels, "label_user")
    if pod:
        held = k8s_workload(ns or "", pod, container or "")
        return replace(held, project=project, team=team, user_name=user)
    return WorkloadInfo(f"hpc:{job}", project, team, user, workload=job)


def node_of(labels: Mapping[str, str], stamp: Stamp) -> str | None:
    """The configured node, else the first ``node_labels`` value that is not the exporter's pod."""
    if stamp.node:
        return stamp.node
    for name in stamp.node_labels:
        value = labels.get(name)
        if value and not stamp.is_exporter_pod(value):
            return value
    return None


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
        node=node_of(labels, stamp),
        gpu_model=model,
        gpu_index=int(gpu) if gpu.isdigit() else None,
        vendor="nvidia",  # the exporter reads NVIDIA GPUs only
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


_DEFAULT_STAMP = Stamp()


def to_batch(series: Iterable[Series], stamp: Stamp) -> SampleBatch:
    """Map exporter series to one columnar batch (see the module docstring for every rule)."""
    listed = list(series)
    targets = target_pods((s.labels for s in listed), stamp)
    meta: list[tuple[int, str, float, str, str, bool, float, str]] = []
    ts_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    for s in listed:  # one step per series; samples stay in arrays
        name = field_key(s.field)
        uuid = _label(s.labels, "UUID", "uuid")
        if name is None or uuid is None or len(s.ts_ms) == 0:
            continue
        spec = FIELDS[name]
        info = _device(s.labels, uuid, stamp)
        devices[info.device_id] = info
        work = workload_of(s.labels, stamp, targets)
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
    # The text columns are Categorical: each string is hashed once per series here, and every
    # sample then carries a code (the gather below, joins, and normalization read codes only).
    text = ("key", "device_id", "parent", "workload_key")
    table = pl.DataFrame(meta, schema=names, orient="row").with_columns(pl.col(text).cast(pl.Categorical))
    # Each sample takes its series' row by position (a gather, not a hash join) and its value in
    # the ledger's unit in NumPy: dividing where the factor is negative (exact for mJ → J).
    sid = np.repeat(np.arange(len(meta), dtype=np.int64), [len(p) for p in ts_parts])
    raw = np.concatenate(value_parts)
    scale = table["scale"].to_numpy()[sid]
    with np.errstate(invalid="ignore"):
        value = np.where(scale < 0, raw / np.abs(scale), raw * scale)
    frame = (
        table.drop("sid", "scale")[sid]
        .with_columns(pl.Series("ts_ms", np.concatenate(ts_parts)), pl.Series("value", value))
        .filter(pl.col("value").is_not_nan())
    )
    key_col = pl.col("key")
    cols = ["device_id", "ts_ms", "key", "value", "workload_key"]
    if table["mig"].any():
        instance = frame.filter(pl.col("mig"))
        # A GPU is in MIG mode at the times its instances report (a GPU can change mode mid-window).
        mig_times = instance.select("parent", "ts_ms").unique()
        gpu = frame.filter(~pl.col("mig"))
        full = gpu.join(mig_times, on=["parent", "ts_ms"], how="anti")
        parent = gpu.join(mig_times, on=["parent", "ts_ms"], how="semi")
        rows = pl.concat(
            [
                full.filter(key_col.is_in([*_DIRECT, *_FB])).select(cols),
                instance.filter(key_col.is_in(_INSTANCE))
                .with_columns(key_col.replace("gr_engine", "gpu_util"))
                .select(cols),
                _device_level(parent, instance).select(cols),
            ]
        )
    else:  # no MIG instance in the batch: every series is a full GPU's
        rows = frame.filter(key_col.is_in([*_DIRECT, *_FB])).select(cols)
    keys: dict[str, set[str]] = {}
    for _, _, _, device_id, _, _, _, key in meta:
        keys.setdefault(device_id, set()).add(key)
    varied = {device_id for device_id, seen in keys.items() if len(seen) > 1}
    samples = _attributed(rows, varied)
    used = set(samples["device_id"].unique().to_list())  # a GPU only ever in MIG mode is no device
    kept = [info for device_id, info in devices.items() if device_id in used]
    return SampleBatch(samples, kept, list(workloads.values()))


def _device_level(parent: pl.DataFrame, instance: pl.DataFrame) -> pl.DataFrame:
    """A MIG-mode GPU's power, energy and temperature, read once per GPU and time — its own series
    where it has one then, else the largest of its instances' copies — and carried to each
    instance reporting then (power and energy by gpu_fraction)."""
    pooled = pl.concat(
        [
            parent.filter(pl.col("key").is_in(DEVICE_LEVEL)).select(
                "parent", "ts_ms", "key", "value", pl.lit(0).alias("src")
            ),
            instance.filter(pl.col("key").is_in(DEVICE_LEVEL)).select(
                "parent", "ts_ms", "key", "value", pl.lit(1).alias("src")
            ),
        ]
    )
    once = (
        pooled.filter(pl.col("src") == pl.col("src").min().over("parent", "ts_ms", "key"))
        .group_by("parent", "ts_ms", "key")
        .agg(pl.col("value").max())
    )
    readings = instance.select("device_id", "parent", "ts_ms", "workload_key", "fraction").unique()
    scaled = pl.when(pl.col("key").is_in(_SPLIT)).then(pl.col("value") * pl.col("fraction"))
    return once.join(readings, on=["parent", "ts_ms"], how="inner").with_columns(
        scaled.otherwise(pl.col("value")).alias("value")
    )


def _attributed(rows: pl.DataFrame, varied: set[str]) -> pl.DataFrame:
    """Readings per (device, ts) → samples with workload and share (time-shared GPUs, memory).

    At a reading where a series names a workload, the lines without one are the device's own
    (``--kubernetes-virtual-gpus``): every metric gets the device's value (that line, else the
    pods' copies) once per pod, split by ``share``; a pod's memory used is its own. Readings with
    one workload (all but time-shared GPUs) take the direct path."""
    at = ["device_id", "ts_ms"]
    single, multi = rows, None
    if varied:  # only a device whose series name several workloads can be shared at a reading
        maybe = pl.col("device_id").is_in(pl.Series(sorted(varied), dtype=pl.String).implode())
        rows = rows.with_columns(
            pl.when(maybe).then(pl.col("workload_key").n_unique().over(at)).otherwise(1).alias("_n")
        )
        single, multi = rows.filter(pl.col("_n") == 1).drop("_n"), rows.filter(pl.col("_n") > 1).drop("_n")
    parts = [
        single.filter(pl.col("key").is_in(_DIRECT)).select(
            *at, "workload_key", pl.col("key").alias("metric"), "value", pl.lit(1.0).alias("share")
        )
    ]
    fb = single.filter(pl.col("key").is_in(_FB))
    if not fb.is_empty():
        owners = single.select(*at, "workload_key").unique().with_columns(pl.lit(1.0).alias("share"))
        parts.append(_memory(fb, owners, at, None))
    if multi is not None and not multi.is_empty():
        parts += _shared(multi, at)
    columns = [pl.col(c).cast(t) for c, t in categorical_sample_schema().items()]
    return pl.concat([p.select(columns) for p in parts])


def _shared(rows: pl.DataFrame, at: list[str]) -> list[pl.DataFrame]:
    """Readings of time-shared devices: the device's value per metric, once per pod, by share."""
    wl = pl.col("workload_key")
    device = rows.group_by(*at, "key").agg(
        pl.coalesce(pl.col("value").filter(wl == "").max(), pl.col("value").max()).alias("value")
    )
    pods = rows.filter(wl != "").select(*at, "workload_key").unique()
    util = (
        rows.filter((wl != "") & (pl.col("key") == "gpu_util"))
        .group_by(*at, "workload_key")
        .agg(pl.col("value").max().alias("u"))
    )
    total = pl.col("u").sum().over(at)
    owners = (
        pods.join(util, on=[*at, "workload_key"], how="left")
        .with_columns(pl.col("u").fill_null(0.0).clip(lower_bound=0.0))
        .with_columns(
            pl.when(total > 0).then(pl.col("u") / total).otherwise(1.0 / pl.len().over(at)).alias("share")
        )
        .drop("u")
    )
    own_fb = (
        rows.filter((wl != "") & (pl.col("key") == "fb_used"))
        .group_by(*at, "workload_key")
        .agg(pl.col("value").max().alias("own"))
    )
    gauges = (
        device.filter(pl.col("key").is_in(_DIRECT))
        .join(owners, on=at)
        .select(*at, "workload_key", pl.col("key").alias("metric"), "value", "share")
    )
    return [gauges, _memory(device.filter(pl.col("key").is_in(_FB)), owners, at, own_fb)]


def _memory(
    fb: pl.DataFrame, owners: pl.DataFrame, at: list[str], own_fb: pl.DataFrame | None
) -> pl.DataFrame:
    """FB used/free/reserved (bytes) of a device at one reading → each owner's ``mem_used_b`` (its
    own where ``own_fb`` has it) and the device's ``mem_total_b``."""
    of = {k: pl.col("value").filter(pl.col("key") == k).max() for k in _FB}
    wide = fb.group_by(at).agg(
        of["fb_used"].alias("mem_used_b"),
        (of["fb_used"] + of["fb_free"] + of["fb_reserved"].fill_null(0.0)).alias("mem_total_b"),
    )
    wide = wide.join(owners, on=at)
    if own_fb is not None:
        wide = wide.join(own_fb, on=[*at, "workload_key"], how="left").with_columns(
            pl.coalesce("own", "mem_used_b").alias("mem_used_b")
        )
    return wide.unpivot(
        on=["mem_used_b", "mem_total_b"],
        index=[*at, "workload_key", "share"],
        variable_name="metric",
        value_name="value",
    ).filter(pl.col("value").is_not_null())


#: NVIDIA's exporter as a profile of the Prometheus connectors (connectors.exporter_profile)
PROFILE = ExporterProfile(
    name="dcgm",
    vendor="nvidia",
    exporter="dcgm-exporter",
    fields=tuple(FIELDS),
    to_batch=to_batch,
    exporter_pod_pattern=DEFAULT_EXPORTER_POD_PATTERN,
    check_query='count by (job) ({__name__=~"DCGM_FI_.*"})',
    any_case=True,
    shown_fields="DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_*",
)
