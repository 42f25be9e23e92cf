"""Exporter series → ledger samples for exporters with one series per device and field.

The generic ``to_batch`` of an :class:`~connectors.exporter_profile.ExporterProfile` whose exporter
writes plain label sets (AMD's device-metrics-exporter; Intel's and Huawei's exporters are read the
same way): a profile describes its exporter with an :class:`ExporterLabels` and gets its mapping from
:func:`map_series`. What it decides, once for every such vendor:

* **Fields.** ``fields`` maps each exporter metric name to a :class:`FieldSpec`: the ledger metric
  (``connectors.sdk.units.Metric`` value) or a private key a ``derive`` step reads (names starting
  with ``_``, never a sample), a factor to the ledger's unit (negative: divide, exact for µJ → J) and
  a ``rank``: where two fields give one metric (edge and junction temperature), the lowest rank
  reported at a reading wins, so a metric is never counted twice.
* **Devices and workloads.** ``device(labels, stamp)`` describes the device a series is of (None:
  not a device, the series is skipped), ``workload(labels, stamp, targets)`` who held it (None:
  nobody, ``workload_key = ''``); :func:`pod_or_job` is the usual rule (pod label triples as the
  ``dcgm`` profile reads them, then a batch-scheduler job).
* **Partitions.** A device whose description has a ``parent_device_id`` is a partition of a physical
  GPU. Fields in ``whole_device`` are the physical GPU's (the exporter reads them once per GPU and
  reports them on its first partition, or on every partition as a copy): at a reading, the first
  partition's value — ``primary(labels)`` says which series are — is carried to every partition
  reporting then, the additive ones (``power_w``, ``energy_j``) times the partition's
  ``gpu_fraction``, the others as they are.
* **Sharing.** Several workloads reported for one device, metric and reading split it evenly
  (``share`` = 1/n, so each metric's shares add up to 1).
* **Bounds.** Labels are the exporter's (or anyone's who can write to the Prometheus): a series
  whose device or workload description breaks the declared column lengths
  (``connectors.sdk.shapes``: a 10 KB serial number, a 1,000-character pod) is skipped, never
  truncated into another device's name, and never reaches the database.

Columnar: one Python step per *series* (labels → device, workload); samples stay in arrays and
Polars frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from connectors.exporter_profile import Series, Stamp, k8s_workload, target_pods
from connectors.sdk import DeviceInfo, SampleBatch, WorkloadInfo, categorical_sample_schema, empty_samples
from connectors.sdk.shapes import DEVICE, WORKLOAD
from connectors.sdk.units import MEASURED_METRICS

_ADDITIVE = ("power_w", "energy_j")
_DEVICE_TEXT = tuple((a.name, a.max_length) for a in DEVICE if a.max_length is not None)
_WORKLOAD_TEXT = tuple((a.name, a.max_length) for a in WORKLOAD if a.max_length is not None)
_MEASURED = [m.value for m in MEASURED_METRICS]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One exporter field: the ledger metric (or a private ``_key`` for ``derive``), the factor to
    the ledger's unit (negative: divide by its absolute value) and its rank among fields giving the
    same metric (lowest reported wins)."""

    metric: str
    scale: float = 1.0
    rank: int = 0


Describe = Callable[[Mapping[str, str], Stamp], DeviceInfo | None]
Occupant = Callable[[Mapping[str, str], Stamp, frozenset[str]], WorkloadInfo | None]
Derive = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True, slots=True)
class ExporterLabels:
    """How :func:`map_series` reads one exporter (see the module docstring)."""

    fields: Mapping[str, FieldSpec]
    device: Describe
    workload: Occupant
    #: metrics a partition reports for its whole physical GPU
    whole_device: tuple[str, ...] = ()
    #: whether a partition's series is the one carrying the whole GPU's values
    primary: Callable[[Mapping[str, str]], bool] = lambda labels: True
    #: rows (device_id, ts_ms, workload_key, key, value) → rows with derived metrics added
    derive: Derive | None = None


def pod_or_job(
    labels: Mapping[str, str],
    stamp: Stamp,
    targets: frozenset[str],
    job_labels: tuple[str, str, str] = ("job_id", "job_user", "job_partition"),
) -> WorkloadInfo | None:
    """The pod a series names (``stamp.pod_labels`` triples, first found wins, never the scrape
    target's own pod nor the exporter's), else the batch job (``job_labels``: id, user, partition,
    as ``slurm:<id>``), else None. Facts carry what the labels said (docs/attribution.md keys)."""
    for ns_label, pod_label, container_label in stamp.pod_labels:
        pod = labels.get(pod_label)
        if pod and pod not in targets and not stamp.is_exporter_pod(pod):
            return k8s_workload(labels.get(ns_label) or "", pod, labels.get(container_label) or "")
    job_label, user_label, partition_label = job_labels
    job = labels.get(job_label)
    if not job:
        return None
    user, partition = labels.get(user_label) or None, labels.get(partition_label) or None
    facts = {"slurm.job": job}
    if user:
        facts["slurm.user"] = user
    if partition:
        facts["slurm.partition"] = partition
    return WorkloadInfo(f"slurm:{job}", user_name=user, workload=job, facts=facts)


def map_series(series: Iterable[Series], stamp: Stamp, spec: ExporterLabels) -> SampleBatch:
    """Map one exporter's series to one columnar batch (the module docstring has every rule)."""
    listed = [s for s in series if s.field in spec.fields and len(s.ts_ms)]
    targets = target_pods((s.labels for s in listed), stamp)
    meta: list[tuple[str, float, int, str, str, str, float, bool]] = []
    ts_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    for s in listed:  # one step per series; samples stay in arrays
        info = spec.device(s.labels, stamp)
        if info is None or not _fits(info, _DEVICE_TEXT):
            continue
        work = spec.workload(s.labels, stamp, targets)
        if work is not None and not _fits(work, _WORKLOAD_TEXT):
            continue
        field = spec.fields[s.field]
        devices[info.device_id] = info
        if work is not None:
            workloads[work.workload_key] = work
        parent = info.parent_device_id or ""
        meta.append(
            (
                field.metric,
                field.scale,
                field.rank,
                info.device_id,
                parent,
                work.workload_key if work else "",
                info.gpu_fraction,
                bool(parent) and spec.primary(s.labels),
            )
        )
        ts_parts.append(np.asarray(s.ts_ms, dtype=np.int64))
        value_parts.append(np.asarray(s.values, dtype=np.float64))
    if not meta:
        return SampleBatch(empty_samples(), [])
    names = ["key", "scale", "rank", "device_id", "parent", "workload_key", "fraction", "primary"]
    table = pl.DataFrame(meta, schema=names, orient="row")
    sid = np.repeat(np.arange(len(meta), dtype=np.int64), [len(p) for p in ts_parts])
    raw = np.concatenate(value_parts)
    scale = table["scale"].to_numpy()[sid]
    with np.errstate(invalid="ignore"):
        value = np.where(scale < 0, raw / np.abs(scale), raw * scale)
    rows = (
        table.drop("scale")[sid]
        .with_columns(pl.Series("ts_ms", np.concatenate(ts_parts)), pl.Series("value", value))
        .filter(pl.col("value").is_not_nan())
    )
    at = ["device_id", "ts_ms", "workload_key", "key"]
    # several fields for one metric at a reading: the lowest rank reported wins
    rows = rows.filter(pl.col("rank") == pl.col("rank").min().over(at))
    if table["parent"].str.len_chars().max():
        rows = _partitions(rows, spec.whole_device)
    rows = rows.group_by(at).agg(pl.col("value").max())  # an exporter's duplicate lines: once
    if spec.derive is not None:
        rows = spec.derive(rows)
    rows = rows.filter(pl.col("key").is_in(_MEASURED))
    count = pl.col("workload_key").n_unique().over("device_id", "ts_ms", "key")  # each metric adds to 1
    samples = rows.select(
        "device_id",
        "ts_ms",
        pl.col("key").alias("metric"),
        "value",
        "workload_key",
        (1.0 / count).alias("share"),
    ).select([pl.col(c).cast(t) for c, t in categorical_sample_schema().items()])
    used = set(samples["device_id"].unique().to_list())
    kept = [info for device_id, info in devices.items() if device_id in used]
    held = set(samples["workload_key"].unique().to_list())
    return SampleBatch(samples, kept, [w for k, w in workloads.items() if k in held])


def _fits(description: object, limits: tuple[tuple[str, int], ...]) -> bool:
    """Whether every text attribute of a description is within its column's length."""
    return all(len(getattr(description, name) or "") <= limit for name, limit in limits)


def _partitions(rows: pl.DataFrame, whole: tuple[str, ...]) -> pl.DataFrame:
    """A partitioned GPU's whole-device metrics: the primary partition's reading at each time,
    carried to every partition reporting then (additive ones by ``gpu_fraction``)."""
    part = pl.col("parent") != ""
    is_whole = pl.col("key").is_in(list(whole))
    kept = rows.filter(~part | ~is_whole)
    once = (
        rows.filter(part & is_whole & pl.col("primary"))
        .group_by("parent", "ts_ms", "key")
        .agg(pl.col("value").max())
    )
    readings = rows.filter(part).select("device_id", "parent", "ts_ms", "workload_key", "fraction").unique()
    scaled = pl.when(pl.col("key").is_in(_ADDITIVE)).then(pl.col("value") * pl.col("fraction"))
    carried = once.join(readings, on=["parent", "ts_ms"]).with_columns(
        scaled.otherwise(pl.col("value")).alias("value")
    )
    columns = ["device_id", "ts_ms", "workload_key", "key", "value"]
    return pl.concat([kept.select(columns), carried.select(columns)])
