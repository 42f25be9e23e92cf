"""HAMi's per-container core allocation from its scheduler's metrics, for the Prometheus path.

A HAMi pod's processes run on the physical GPU, so dcgm-exporter reports the GPU as one device and
names the pod on its series; nothing in the exporter's series says the pod reserved 30 % of the
cores. HAMi's scheduler says it (``cmd/scheduler/metrics.go``, Project-HAMi/HAMi):

* ``hami_vgpu_core_allocated_ratio{namespace, node, pod, container_index, device_uuid}``: the cores
  a container holds on one GPU, in percent of the GPU despite the name (``Usedcores``; AMD's
  compute units are normalized to a percentage by the scheduler). Releases before the
  ``hami_*`` names, and a scheduler run with legacy metrics, export ``vGPUCoreAllocated`` with the
  labels ``podnamespace, nodename, podname, containeridx, deviceuuid`` (raw ``Usedcores``).
* ``hami_gpu_core_limit_ratio{node, device_uuid, device_index, device_type}`` (legacy
  ``GPUDeviceCoreLimit{nodeid, deviceuuid, …}``): the GPU's core total, 100 unless HAMi's
  ``deviceCoreScaling`` raised it.

:class:`HamiCaps` asks Prometheus for both over a chunk (``last_over_time(…[chunk])`` at its end:
the allocation is fixed for a pod's life, so the chunk's last value is the pod's) and prices each
capped pod at its cap, as the node agent does (``connectors.vgpu.capped_shares``, docs/virtual-gpus.md):
at every reading of the GPU a capped pod holds ``cores / total``; what the caps leave goes to the
uncapped pods there by their measured split, or, with none, to the unallocated workload ``''``.

HAMi names a container by its index in the pod, dcgm-exporter by its name, and Prometheus holds
nothing that joins the two (kube-state-metrics' ``kube_pod_container_info`` has no index). So a cap
is the **pod's on one GPU**: the sum over its containers there. A pod with one GPU container (the
usual case) gets exactly its container's cap; several containers of one pod on one GPU share their
summed cap by their measured split. MIG instances are devices of their own (``gpu_fraction``) and
never capped here; a cap of 0 cores is HAMi's "no cap" (``defaultCores``), as on the agent path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from connectors.kube_state import Query
from connectors.sdk import ConnectorError, SampleBatch, WorkloadInfo
from connectors.vgpu import core_fraction

#: (metric, namespace label, pod label, device label) of the container series, newest name first
CONTAINER_CORES = (
    ("hami_vgpu_core_allocated_ratio", "namespace", "pod", "device_uuid"),
    ("vGPUCoreAllocated", "podnamespace", "podname", "deviceuuid"),
)
#: (metric, device label) of the GPU core totals, newest name first
GPU_CORE_LIMIT = (("hami_gpu_core_limit_ratio", "device_uuid"), ("GPUDeviceCoreLimit", "deviceuuid"))
#: the metrics whose values are ``share``: gauges every owner of a reading carries (``_DIRECT``)
_GAUGES = ("gpu_util", "sm_active", "tensor_active", "mem_bw", "power_w", "energy_j", "temp_c", "mem_total_b")


def pod_caps(
    containers: Iterable[Mapping[str, str | float]], limits: Iterable[Mapping[str, str | float]]
) -> dict[tuple[str, str, str], float]:
    """(namespace, pod, device UUID) → the pod's fraction of the GPU: its containers' cores there
    over the GPU's core total (100 where HAMi exported none), at most 1; pods at 0 cores left out.
    Each item is a series' labels with its value under ``"value"``."""
    totals: dict[str, float] = {}
    for item in limits:
        for metric, device_label in GPU_CORE_LIMIT:
            if item.get("__name__") == metric and item.get(device_label):
                totals.setdefault(str(item[device_label]), float(item["value"]))
    cores: dict[tuple[str, str, str], float] = {}
    seen: set[tuple[str, str, str, str]] = set()
    for item in containers:
        for metric, ns_label, pod_label, device_label in CONTAINER_CORES:
            if item.get("__name__") != metric:
                continue
            ns, pod, uuid = (str(item.get(k) or "") for k in (ns_label, pod_label, device_label))
            index = str(item.get("container_index") or item.get("containeridx") or "")
            if not (ns and pod and uuid) or (ns, pod, uuid, index) in seen:
                continue  # the same container under the new and the legacy name counts once
            seen.add((ns, pod, uuid, index))
            cores[(ns, pod, uuid)] = cores.get((ns, pod, uuid), 0.0) + float(item["value"])
    out = {}
    for (ns, pod, uuid), pct in cores.items():
        fraction = core_fraction(pct, totals.get(uuid, 100.0))
        if fraction is not None:
            out[(ns, pod, uuid)] = fraction
    return out


def apply_caps(batch: SampleBatch, caps: Mapping[tuple[str, str, str], float]) -> SampleBatch:
    """The batch's shares with the pods' caps (module docstring): per (device, reading), capped pods
    hold their caps (scaled to add to 1 where they add to more), uncapped pods share the rest by
    their previous split, and with none the rest becomes ``''`` rows carrying the device's gauges."""
    pods: dict[str, tuple[str, str]] = {
        w.workload_key: (w.namespace or "", w.workload or "") for w in batch.workloads if _is_pod(w)
    }
    devices = {d.device_id for d in batch.devices if d.parent_device_id is None}
    # caps by pod, so matching is one lookup per pod, not a scan of every cap per pod
    by_pod: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for (cap_ns, cap_pod, device), cap in caps.items():
        if device in devices:
            by_pod.setdefault((cap_ns, cap_pod), []).append((device, cap))
    rows = [
        (device, key, ns, pod, cap)
        for key, (ns, pod) in pods.items()
        for device, cap in by_pod.get((ns, pod), ())
    ]
    samples = batch.samples
    if not rows or samples.is_empty():
        return batch
    text = samples.schema["device_id"]
    capped = pl.DataFrame(
        rows, schema=["device_id", "workload_key", "ns", "pod", "cap"], orient="row"
    ).with_columns(pl.col("device_id", "workload_key").cast(text))
    at = ["device_id", "ts_ms"]
    owners = (
        samples.group_by(*at, "workload_key")
        .agg(pl.col("share").max())
        .join(capped, on=["device_id", "workload_key"], how="left")
    )
    capped_here = owners.filter(pl.col("cap").is_not_null())
    if capped_here.is_empty():
        return batch
    touched = capped_here.select(at).unique()
    owners = owners.join(touched, on=at, how="semi")
    # A pod's cap at a reading, shared by its containers there by their previous split.
    pod_total = pl.col("share").sum().over(*at, "ns", "pod")
    in_pod = (
        pl.when(pod_total > 0)
        .then(pl.col("share") / pod_total)
        .otherwise(1.0 / pl.len().over(*at, "ns", "pod"))
    )
    caps_at = (
        capped_here.group_by(*at, "ns", "pod")
        .agg(pl.col("cap").first())
        .group_by(at)
        .agg(pl.col("cap").sum().alias("caps"))
    )
    owners = owners.join(caps_at, on=at, how="left").with_columns(
        pl.min_horizontal(pl.lit(1.0), pl.col("caps")).alias("held"),
        pl.max_horizontal(pl.lit(1.0), pl.col("caps")).alias("scale"),
    )
    free = pl.col("cap").is_null() & (pl.col("workload_key").cast(pl.String) != "")
    free_total = pl.col("share").filter(free).sum().over(at)
    free_count = free.sum().over(at)
    rest = 1.0 - pl.col("held")
    new_share = (
        pl.when(pl.col("cap").is_not_null())
        .then(pl.col("cap") / pl.col("scale") * in_pod)
        .when(free)
        .then(rest * pl.when(free_total > 0).then(pl.col("share") / free_total).otherwise(1.0 / free_count))
        .otherwise(pl.col("share"))
    )
    owners = owners.with_columns(new_share.alias("new_share"), free_count.alias("_free"))
    renamed = owners.select(*at, "workload_key", "new_share")
    out = (
        samples.join(renamed, on=[*at, "workload_key"], how="left")
        .with_columns(pl.coalesce("new_share", "share").alias("share"))
        .drop("new_share")
    )
    # Readings with no uncapped pod: what the caps leave is nobody's, with the device's gauges.
    unheld = (
        owners.filter((pl.col("_free") == 0) & (pl.col("held") < 1.0))
        .group_by(at)
        .agg((1.0 - pl.col("held").first()).alias("rest"), pl.col("workload_key").first().alias("_from"))
    )
    if not unheld.is_empty():
        metric = pl.col("metric").cast(pl.String)
        gauges = (
            out.join(unheld, on=at)
            .filter((pl.col("workload_key") == pl.col("_from")) & metric.is_in(_GAUGES))
            .with_columns(pl.lit("").cast(text).alias("workload_key"), pl.col("rest").alias("share"))
            .select(out.columns)
        )
        out = pl.concat([out, gauges])
    batch.samples = out.select(samples.columns)
    return batch


class HamiCaps:
    """Reads HAMi's scheduler metrics for a chunk and applies the caps to its batch. ``selector``:
    PromQL matchers for the scheduler's series (``job="hami-scheduler"``), or ''."""

    def __init__(self, query: Query, selector: str = "") -> None:
        self._query, self._selector = query, selector.strip().strip("{}").strip()

    def join(self, batch: SampleBatch, first_ms: int, end_ms: int) -> SampleBatch:
        if not any(_is_pod(w) for w in batch.workloads):
            return batch
        at_s, span_s = end_ms / 1000, max(1, (end_ms - first_ms + 999) // 1000)
        containers = self._series([m for m, *_ in CONTAINER_CORES], at_s, span_s)
        if not containers:
            return batch
        limits = self._series([m for m, _ in GPU_CORE_LIMIT], at_s, span_s)
        return apply_caps(batch, pod_caps(containers, limits))

    def _series(self, names: list[str], at_s: float, span_s: int) -> list[dict[str, Any]]:
        selector = "{" + self._selector + "}" if self._selector else ""
        # last_over_time drops the name; label_replace keeps it, so the two spellings stay apart
        query = " or ".join(
            f'label_replace(last_over_time({name}{selector}[{span_s}s]), "__name__", "{name}", "", "")'
            for name in names
        )
        out = []
        for item in self._query(query, at_s):
            metric = item.get("metric") if isinstance(item, Mapping) else None
            value = item.get("value") if isinstance(item, Mapping) else None
            if not isinstance(metric, Mapping) or not isinstance(value, list | tuple) or len(value) != 2:
                raise ConnectorError(f"{names[0]}: a result without its labels or value")
            try:
                number = float(value[1])
            except (TypeError, ValueError) as exc:
                raise ConnectorError(f"{names[0]}: value {value[1]!r} is no number") from exc
            out.append({**{str(k): str(v) for k, v in metric.items()}, "value": number})
        return out


def _is_pod(w: WorkloadInfo) -> bool:
    return w.workload_key.startswith("k8s:") and bool(w.namespace) and bool(w.workload)
