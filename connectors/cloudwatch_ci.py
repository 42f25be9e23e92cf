"""Container Insights GPU semantics for the ``cloudwatch`` connector: names, keys, and the node join.

Checked against amazon-cloudwatch-agent v1.300071.0 (commit ab55b8d, 2026-08-07) and its
OpenTelemetry fork amazon-contributing/opentelemetry-collector-contrib (commit 8e059f1):

* **Series.** Enhanced observability with accelerated-compute metrics publishes, from dcgm-exporter
  scraped every 60 s (``receiver/awscontainerinsightreceiver/internal/gpu/dcgmscraper_config.go``),
  each DCGM field three times under ``container_``/``pod_``/``node_`` prefixes
  (``translator/translate/otel/processor/metricstransformprocessor/translator.go``,
  ``renameMapForDcgm``): ``DCGM_FI_DEV_GPU_UTIL`` → ``*_gpu_utilization`` (%),
  ``DCGM_FI_DEV_FB_USED``/``_FB_TOTAL`` → ``*_gpu_memory_used``/``_total`` (MiB × 2²⁰: bytes),
  ``DCGM_FI_DEV_POWER_USAGE`` → ``*_gpu_power_draw`` (W), ``DCGM_FI_DEV_GPU_TEMP`` →
  ``*_gpu_temperature`` (°C), ``DCGM_FI_DEV_FB_USED_PERCENT`` → ``*_gpu_memory_utilization`` (×100)
  and ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` → ``*_gpu_tensor_core_utilization`` **unscaled: a 0–1
  ratio**, read here ×100 as ``tensor_active``. ``*_gpu_memory_utilization`` is frame-buffer
  occupancy, not a ledger metric, and is not read.
* **Dimensions** (``translator/translate/otel/exporter/awsemf/kubernetes.go``,
  ``getGPUMetricDeclarations``): ``node_gpu_*`` per GPU with ``{ClusterName, NodeName, InstanceId,
  InstanceType, GpuDevice}``; ``container_gpu_*`` per GPU with ``{ClusterName, Namespace, PodName,
  FullPodName, ContainerName, GpuDevice}``; the other sets are roll-ups and are skipped.
  ``GpuDevice`` is dcgm-exporter's ``device`` label (``nvidia0``).
* **Names.** ``PodName`` is the *workload*: the Deployment (through its ReplicaSet), DaemonSet,
  Job/CronJob or ReplicationController that owns the pod; only a StatefulSet's or a bare pod's is
  its own name (``internal/stores/podstore.go``, ``addPodOwnersAndPodName``). ``FullPodName`` is the
  pod. So a container is keyed ``k8s:<Namespace>/<FullPodName>/<ContainerName>`` — the key the
  ``prometheus`` connector gives the same container from dcgm-exporter's ``pod`` label — and
  ``PodName`` becomes the workload's ``workload`` field (replicas of one Deployment stay apart).
* **The node join.** No ``container_gpu_*`` dimension set names the node, instance or GPU UUID, so
  on a cluster with two GPU nodes ``nvidia0`` of a container series is ambiguous in the metrics.
  The agent keeps ``NodeName``, ``InstanceId`` and ``UUID`` on the container datapoints
  (``plugins/processors/gpuattributes/internal/metricFilters/gpumetricfilters.go``,
  ``ContainerGpuLabelFilter``) and the EMF exporter writes every label into the performance log
  event (fork ``exporter/awsemfexporter/metric_translator.go``), log group
  ``/aws/containerinsights/<ClusterName>/performance``, stream ``<NodeName>``, ``Type``
  ``ContainerGPU``. The connector reads those events (``logs:FilterLogEvents``) for the window
  and ties each container reading to the node its latest event names (a StatefulSet pod that moves
  keeps its name: the placement is per time, not per pod). Without such an event a container is
  tied to a GPU only when exactly one GPU of its cluster has that ``GpuDevice`` (``sole_gpu``);
  otherwise its readings stay unattributed and the reason is counted
  (:attr:`Attribution.unjoined`) and logged: ``ambiguous`` (several nodes have that device),
  ``no_gpu`` (no node series has it), ``placed_on_unlisted_gpu`` (the log names a node whose
  ``node_gpu_*`` series for that device are missing).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from connectors.cloud import MetricSpec
from connectors.sdk import DeviceInfo, Metric, WorkloadInfo

log = logging.getLogger(__name__)

NODE_METRICS: dict[str, MetricSpec] = {
    "node_gpu_utilization": MetricSpec(Metric.GPU_UTIL),
    "node_gpu_tensor_core_utilization": MetricSpec(Metric.TENSOR_ACTIVE, 100.0),  # DCGM 0–1 ratio
    "node_gpu_memory_used": MetricSpec(Metric.MEM_USED_B),  # already bytes (agent scales MiB)
    "node_gpu_memory_total": MetricSpec(Metric.MEM_TOTAL_B),
    "node_gpu_power_draw": MetricSpec(Metric.POWER_W),
    "node_gpu_temperature": MetricSpec(Metric.TEMP_C),
}
CONTAINER_METRIC = "container_gpu_utilization"
CONTAINER_GPU_TYPE = "ContainerGPU"
#: The columns that name one container on one GPU (the placement join's ``by``).
CONTAINER_COLS = ("cluster", "namespace", "full_pod", "container", "gpu_device")


def log_group(cluster: str) -> str:
    """The performance log group the agent writes ``cluster``'s EMF events to."""
    return f"/aws/containerinsights/{cluster}/performance"


def gpu_number(value: str | None) -> int | None:
    """``"0"`` (agent ``index``) or ``"nvidia0"`` (Container Insights ``GpuDevice``) → 0."""
    match = re.search(r"(\d+)$", value or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """One container on one GPU as a ``container_gpu_*`` series names it."""

    cluster: str
    namespace: str
    full_pod: str
    container: str
    gpu_device: str
    gpu_index: int
    pod_name: str  # the workload (Deployment, DaemonSet, …)

    @classmethod
    def of(cls, dims: dict[str, str]) -> ContainerRef | None:
        """None for a roll-up (a set without ``FullPodName``, ``ContainerName`` or ``GpuDevice``)."""
        names = [dims.get(k) for k in ("ClusterName", "Namespace", "FullPodName", "ContainerName")]
        index = gpu_number(dims.get("GpuDevice"))
        if index is None or not all(names):
            return None
        cluster, namespace, full_pod, container = (str(n) for n in names)
        return cls(cluster, namespace, full_pod, container, dims["GpuDevice"], index,
                   dims.get("PodName") or full_pod)  # fmt: skip

    @property
    def workload_key(self) -> str:
        return f"k8s:{self.namespace}/{self.full_pod}/{self.container}"

    def workload(self) -> WorkloadInfo:
        return WorkloadInfo(self.workload_key, namespace=self.namespace, workload=self.pod_name)


def placements(events: Iterable[dict[str, Any]], cluster: str) -> pl.DataFrame:
    """``ContainerGPU`` performance log events → one row per event: ``CONTAINER_COLS``, ``ts_ms``,
    ``node``, ``instance_id``. Events of other types or without a node are dropped (a server-side
    filter pattern is a saving, not a guarantee)."""
    rows: dict[str, list[Any]] = {c: [] for c in (*CONTAINER_COLS, "ts_ms", "node", "instance_id")}
    for event in events:
        try:
            body = json.loads(event.get("message", ""))
        except ValueError:
            continue
        if not isinstance(body, dict) or body.get("Type") != CONTAINER_GPU_TYPE:
            continue
        keys = (body.get("Namespace"), body.get("FullPodName"), body.get("ContainerName"))
        node, device = body.get("NodeName") or event.get("logStreamName"), body.get("GpuDevice")
        if not all(keys) or not node or not device or body.get("ClusterName", cluster) != cluster:
            continue
        for column, value in zip(CONTAINER_COLS, (cluster, *keys, device), strict=True):
            rows[column].append(str(value))
        rows["ts_ms"].append(int(event["timestamp"]))
        rows["node"].append(str(node))
        rows["instance_id"].append(body.get("InstanceId"))
    schema = {**{c: pl.String for c in CONTAINER_COLS}, "ts_ms": pl.Int64, "node": pl.String,
              "instance_id": pl.String}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


@dataclass
class Attribution:
    """How container readings were tied to GPUs, summed over the connector's life (container
    readings, one per series and period): ``joined`` by basis, ``unjoined`` by reason;
    ``log_problems``: performance log groups that could not be read (``"<group>: <code>"``)."""

    joined: Counter[str] = field(default_factory=Counter)
    unjoined: Counter[str] = field(default_factory=Counter)
    log_problems: Counter[str] = field(default_factory=Counter)


def attach(
    occupancy: pl.DataFrame,
    found: pl.DataFrame,
    nodes: list[DeviceInfo],
    period_ms: int,
    tally: Attribution,
) -> pl.DataFrame:
    """Container readings (``CONTAINER_COLS``, ``ts_ms``, ``workload_key``) → ``device_id``,
    ``ts_ms``, ``workload_key`` of the GPU each ran on; readings that cannot be tied are dropped,
    counted in ``tally`` and logged.

    A reading at ``t`` (the period ``[t, t + period)``) takes the node of the container's latest
    placement event before ``t + period``, else its first one after; without any event, the sole
    GPU of the cluster with that ``GpuDevice``.
    """
    gpus = pl.DataFrame(
        {
            "cluster": [d.cluster or "" for d in nodes],
            "node": [d.node or "" for d in nodes],
            "gpu_index": [d.gpu_index for d in nodes],
            "device_id": [d.device_id for d in nodes],
        },
        schema={"cluster": pl.String, "node": pl.String, "gpu_index": pl.Int64, "device_id": pl.String},
    ).unique(subset=["cluster", "node", "gpu_index"], keep="first")
    by = list(CONTAINER_COLS)
    events = found.select(*by, "ts_ms", "node").sort("ts_ms")
    readings = occupancy.with_columns((pl.col("ts_ms") + period_ms - 1).alias("_until")).sort("_until")
    before = readings.join_asof(
        events.rename({"ts_ms": "_event"}),
        left_on="_until",
        right_on="_event",
        by=by,
        strategy="backward",
        check_sortedness=False,
    )
    after = before.filter(pl.col("node").is_null()).drop("node", "_event").sort("ts_ms")
    after = after.join_asof(
        events.rename({"ts_ms": "_event"}),
        left_on="ts_ms",
        right_on="_event",
        by=by,
        strategy="forward",
        check_sortedness=False,
    )
    placed = pl.concat([before.filter(pl.col("node").is_not_null()), after], how="diagonal_relaxed")
    placed = placed.join(gpus, on=["cluster", "node", "gpu_index"], how="left")
    sole = gpus.group_by("cluster", "gpu_index").agg(
        pl.len().alias("_n"), pl.col("device_id").first().alias("_sole")
    )
    placed = placed.join(sole, on=["cluster", "gpu_index"], how="left").with_columns(
        pl.when(pl.col("node").is_not_null())
        .then(pl.when(pl.col("device_id").is_null()).then(pl.lit("placed_on_unlisted_gpu")))
        .when(pl.col("_n").is_null())
        .then(pl.lit("no_gpu"))
        .when(pl.col("_n") > 1)
        .then(pl.lit("ambiguous"))
        .alias("_reason"),
        pl.when(pl.col("node").is_not_null())
        .then(pl.lit("performance_log"))
        .when(pl.col("_n") == 1)
        .then(pl.lit("sole_gpu"))
        .alias("_basis"),
    )
    placed = placed.with_columns(
        pl.when(pl.col("node").is_null() & (pl.col("_n") == 1))
        .then(pl.col("_sole"))
        .otherwise(pl.col("device_id"))
        .alias("device_id")
    )
    failed = placed.filter(pl.col("_reason").is_not_null())
    if failed.height:
        counts = failed.group_by("_reason").agg(pl.len(), pl.col("workload_key").n_unique().alias("_k"))
        for reason, readings, containers in counts.sort("_reason").iter_rows():
            tally.unjoined[reason] += readings
            log.warning(
                "Container Insights: %d readings of %d containers not tied to a GPU (%s)",
                readings, containers, reason,
            )  # fmt: skip
    good = placed.filter(pl.col("_reason").is_null())
    for basis, readings in good.group_by("_basis").agg(pl.len()).iter_rows():
        tally.joined[basis] += readings
    return good.select("device_id", "ts_ms", "workload_key")
