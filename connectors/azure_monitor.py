"""``azure_monitor``: AKS GPU rows from Log Analytics (Container insights) and VM GPU metrics.

**AKS, Log Analytics ``InsightsMetrics``** (docs/formats.md §4.1), read with azure-monitor-query's
``LogsQueryClient.query_workspace`` (KQL), rows with ``Namespace == "container.azm.ms/gpu"``,
collected every 60 s and binned in the query to ``period_s`` so the rows of one collection share
one timestamp. Per docs/design.md §3.1 and :mod:`connectors.cloud` a row stands for ``[t, t + period)``.
(``containerGpuDutyCycle`` strictly describes the 60 s *before* collection; it is kept at the
collection stamp so that duty cycle, requests and capacity of one collection share one time and
one slot assignment, at the cost of being up to one period early.)

* **Devices are GPU slots of a node**: ``<Computer>/gpu<n>``, ``n`` in ``0 … nodeGpuCapacity − 1``.
  Modern clusters no longer send the per-GPU rows (they came from kubelet accelerator metrics,
  deprecated since Kubernetes 1.20), so a GPU is known only as "one of the node's 8"; the slot
  model gives the same device ids with and without per-GPU rows. Slots are assigned per
  collection from that collection's rows only: containers sorted by ``containerName`` take
  consecutive slots, as many as ``containerGpuRequests`` (or as many GPUs as their per-GPU rows
  name, if more); a container's per-GPU rows go to its slots in ``gpuId`` order. Because the
  assignment looks at nothing outside one collection, hour-by-hour and long ingestions agree.
  The kubelet ``gpuId`` itself is not kept as the id: it exists only on the deprecated rows and only
  for allocated GPUs, so an index "by sorted gpuId" would renumber GPUs whenever a pod comes or goes.
  A slot is therefore a position on the node, not a physical GPU.
* **Presence**: every slot of a reported ``nodeGpuCapacity`` is present for the period (the VM is
  billed for all its GPUs). Allocated slots are attributed to their container's workload, the rest
  to ``''``. ``nodeGpuAllocatable`` is not used: an unallocatable GPU is still present.
* **Presence without a measurement.** A slot with no per-GPU reading at a collection gets one
  ``present`` reading (``Metric.PRESENT``): the slot is present and *unobserved* (``observed_s``
  0, neither busy nor idle), with no energy, power, temperature or memory.
* **Metrics**: ``containerGpuDutyCycle`` (%) → ``gpu_util``, ``containerGpumemoryUsedBytes`` →
  ``mem_used_b``, ``containerGpumemoryTotalBytes`` → ``mem_total_b``.
* **Workloads**: the GPU rows name a container as ``"<podUid>/<container>"`` and carry no
  namespace (the agent's ``k8sNamespace`` tag is commented out) and no controller. With
  ``pod_inventory`` (default) one more query per Log Analytics window joins the UIDs to
  ``KubePodInventory`` of the same workspace (:mod:`connectors.azure_pod_inventory`), so the key is
  ``k8s:<Namespace>/<Name>/<container>`` as the DCGM keys are, and ``WorkloadInfo`` carries the
  namespace and the pod name. A UID the inventory has no row for keeps
  ``k8s:<k8sNamespace tag or ''>/<podUid>/<container>`` (workload: a ``controllerName`` tag, else the
  UID); such pods are counted in ``pods_not_in_inventory`` and logged. Rows without a node
  (``Computer`` empty: a pending pod's requests) hold no GPU and are dropped.
* **``instance_id``**: billing names AKS nodes by their scale set. A node ``aks-<pool>-<n>-vmss<6
  chars>`` belongs to ``…/resourcegroups/<node rg>/providers/microsoft.compute/
  virtualmachinescalesets/aks-<pool>-<n>-vmss`` (lower case), where the node resource group is
  ``node_resource_group`` or, by AKS' default naming, ``MC_<rg>_<cluster>_<region>`` from the
  ``_ResourceId`` column (else ``resource_group`` and ``cluster``) and ``region``. Without them it
  is ``None`` (never a guess).
* **Partial results** (HTTP 200 with an ``error`` beside the tables: a query limit hit, a workspace
  timed out) raise ``RetriableError`` naming the error and ingest nothing: a partial answer would
  write short hours that look complete, and the ingestor keeps the watermark so the window is
  read again. A partial error that persists is usually the 500,000-row limit: lower
  ``query_chunk_s``.

**VMs, Azure Monitor metrics** through azure-monitor-querymetrics' ``MetricsClient.query_resources``:
azure-monitor-query 2.0 dropped ``MetricsQueryClient``; ``MetricsClient`` uses the regional batch
endpoint ``POST /subscriptions/{sub}/metrics:getBatch`` (up to 50 resources per call). VM platform
metrics have no GPU metrics, so the metric namespace and names are those of the guest collector
(``vm_metric_namespace``, ``vm_metrics``: source name → ledger metric and scale). Device
``<vm name>/gpu<n>`` with ``n`` from the ``vm_gpu_dimension`` dimension if the series has it, else
``gpu0``; datapoints are time-grain aggregates stamped at the grain's start.

**Tags and labels** (attribution facts, ``DeviceInfo.tags``; both off by default, each costs
requests): ``node_labels`` reads each AKS node's labels from ``KubeNodeInventory`` in the same
workspace, one more query per window (:mod:`connectors.azure_node_inventory`), as
``k8s.node_label:<key>``; ``resource_tags`` reads the Azure tags of each GPU VM and AKS node scale
set from Azure Resource Manager, one GET per resource per connector life
(:mod:`connectors.azure_resource_tags`), as ``cloud.tag:<key>``.

**Errors**: 429/5xx/timeouts are retried by azure-core's retry policy (``retry_total`` =
``max_retries``, ``retry_backoff_factor`` = ``backoff_s``) and then raise ``RetriableError``; 401
and a refused token raise ``FatalSourceError`` saying to check the credentials, 403 one naming
the role to grant.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar, Literal

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from connectors import azure_node_inventory, azure_pod_inventory
from connectors.azure_auth import build_credential, call_azure
from connectors.azure_resource_tags import ArmTags
from connectors.cloud import (
    CloudMetricsConfig,
    MetricSpec,
    aggregate_sampling,
    to_samples,
)
from connectors.sdk import (
    ConnectorConfig,
    ConnectorError,
    DeviceInfo,
    Metric,
    RetriableError,
    SampleBatch,
    devices_in,
    to_ms,
)

SOURCE = "azure_monitor"
GPU_NAMESPACE = "container.azm.ms/gpu"
PER_GPU = {
    "containerGpuDutyCycle": MetricSpec(Metric.GPU_UTIL),
    "containerGpumemoryUsedBytes": MetricSpec(Metric.MEM_USED_B),
    "containerGpumemoryTotalBytes": MetricSpec(Metric.MEM_TOTAL_B),
}
_PRESENCE = "_presence"  # the slot-presence reading, see the module docstring
_MAPPING = {**PER_GPU, _PRESENCE: MetricSpec(Metric.PRESENT)}
_COUNTS = ("nodeGpuCapacity", "containerGpuRequests")
_NAMES = (*PER_GPU, *_COUNTS, "nodeGpuAllocatable")
_TAGS = pl.Struct(
    {
        "container.azm.ms/clusterName": pl.String,
        "containerName": pl.String,
        "gpuId": pl.String,
        "gpuModel": pl.String,
        "k8sNamespace": pl.String,
        "controllerName": pl.String,
    }
)
_AKS_NODE = re.compile(r"^(aks-[a-z0-9]+-[0-9]+-vmss)[0-9a-z]{6}$")
_CLUSTER_ID = re.compile(
    r"^/subscriptions/([^/]+)/resourcegroups/([^/]+)/providers/microsoft\.containerservice/managedclusters/([^/]+)$"
)
_METRICS_ID = re.compile(r"/providers/microsoft\.insights/metrics/.*$", re.IGNORECASE)
_BATCH = 50  # resources per metrics:getBatch call (the API's limit)
Facts = dict[str, str]
log = logging.getLogger(__name__)


class VmMetric(BaseModel):
    """Where a VM guest metric goes: ``ledger value = raw × scale`` (e.g. MiB → bytes: 1048576)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Metric
    scale: float = Field(1.0, gt=0)


class AzureMonitorConfig(CloudMetricsConfig):
    """``type = "azure_monitor"``.

    * ``workspace_id``: the Log Analytics workspace (GUID) Container insights writes to (AKS path).
    * ``vm_resource_ids``: VM ARM ids for the metrics path, with ``vm_metric_namespace``,
      ``vm_metrics`` (source metric name → ``{metric, scale}``) and ``vm_gpu_dimension``.
    * ``subscription_id``, ``cluster``, ``region``: stamped on devices (``cluster`` defaults to the
      rows' cluster name, the subscription to the resource ids').
    * ``node_resource_group``: the AKS node resource group, for VMSS ``instance_id`` s; without it,
      ``MC_<rg>_<cluster>_<region>`` from the rows' cluster id (else ``resource_group``/``cluster``).
    * ``tenant_id``, ``client_id``, ``client_secret``: a service principal; none of them means
      ``DefaultAzureCredential``. ``authority_host``: the Azure AD host of a sovereign cloud.
    * ``logs_endpoint`` (default ``https://api.loganalytics.io``), ``metrics_endpoint`` (default
      ``https://<region>.metrics.monitor.azure.com``), ``metrics_audience``: sovereign clouds, tests.
    * ``ca_file``: PEM bundle to verify the endpoints with (azure-core ``connection_verify``).
    * ``query_chunk_s``: one Log Analytics query covers at most this long (its row limit is 500,000).
    * ``pod_inventory``: join pod UIDs to namespace and pod name from ``KubePodInventory`` (one more
      query per window); ``pod_inventory_margin_s``: how far around the window to look for a pod's
      inventory row (it is collected every 60 s by default).
    * ``node_labels``: AKS node labels from ``KubeNodeInventory`` (one more query per window, within
      ``pod_inventory_margin_s``); ``resource_tags``: VM / node scale set tags from Azure Resource
      Manager (``arm_endpoint``, default ``https://management.azure.com``; the Reader role).
    """

    type: str = "azure_monitor"
    workspace_id: str | None = None
    subscription_id: str | None = None
    resource_group: str | None = None
    cluster: str | None = None
    region: str | None = None
    node_resource_group: str | None = None
    tenant_id: str | None = None
    authority_host: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    logs_endpoint: str | None = None
    metrics_endpoint: str | None = None
    metrics_audience: str | None = None
    ca_file: str | None = None
    query_chunk_s: int = Field(3600, ge=60, le=86_400)
    pod_inventory: bool = True
    pod_inventory_margin_s: int = Field(900, ge=0, le=86_400)
    node_labels: bool = False
    resource_tags: bool = False
    arm_endpoint: str = "https://management.azure.com"
    vm_resource_ids: tuple[str, ...] = ()
    vm_metric_namespace: str | None = None
    vm_metrics: dict[str, VmMetric] = Field(default_factory=dict)
    vm_gpu_dimension: str | None = None

    @model_validator(mode="after")
    def _something_to_read(self) -> AzureMonitorConfig:
        if self.workspace_id is None and not self.vm_resource_ids:
            raise ValueError("give workspace_id (AKS via Log Analytics) and/or vm_resource_ids (VM metrics)")
        if self.vm_resource_ids and (not self.vm_metric_namespace or not self.vm_metrics):
            raise ValueError("vm_resource_ids need vm_metric_namespace and vm_metrics")
        if self.query_chunk_s % self.period_s:
            raise ValueError(
                "query_chunk_s must be a multiple of period_s (a bin must not straddle two queries)"
            )
        if self.vm_resource_ids and self.metrics_endpoint is None and self.region is None:
            raise ValueError(
                "vm_resource_ids need region (or metrics_endpoint): metrics:getBatch is regional"
            )
        return self


class AzureMonitorConnector:
    """AKS Container insights GPU rows and VM GPU metrics; see the module docstring."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = AzureMonitorConfig

    def __init__(
        self,
        config: AzureMonitorConfig,
        *,
        credential: Any = None,
        logs_client: Any = None,
        metrics_client: Any = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.sampling = aggregate_sampling(config.period_s, config.presence_gap_s)
        self._clock, self._sleep = clock, sleep  # retries sleep inside azure-core's policy
        self._credential = credential
        self._owned: list[Any] = []
        self._logs, self._metrics = logs_client, metrics_client
        #: GPU pods whose UID no ``KubePodInventory`` row named, summed over windows since made.
        self.pods_not_in_inventory = 0
        self._arm: ArmTags | None = None

    def _client_kwargs(self) -> dict[str, Any]:
        c = self.config
        kwargs: dict[str, Any] = {
            "retry_total": c.max_retries,
            "retry_backoff_factor": c.backoff_s,
            "connection_timeout": c.timeout_s,
            "read_timeout": c.timeout_s,
        }
        if c.ca_file is not None:
            kwargs["connection_verify"] = c.ca_file
        return kwargs

    def _cred(self) -> Any:
        if self._credential is None:
            c = self.config
            self._credential = build_credential(c.tenant_id, c.client_id, c.client_secret, c.authority_host)
            self._owned.append(self._credential)
        return self._credential

    def _logs_client(self) -> Any:
        if self._logs is None:
            from azure.monitor.query import LogsQueryClient

            kwargs = self._client_kwargs()
            if self.config.logs_endpoint is not None:
                kwargs["endpoint"] = self.config.logs_endpoint
            self._logs = LogsQueryClient(self._cred(), **kwargs)
            self._owned.append(self._logs)
        return self._logs

    def _metrics_client(self) -> Any:
        if self._metrics is None:
            from azure.monitor.querymetrics import MetricsClient

            c = self.config
            kwargs = self._client_kwargs()
            if c.metrics_audience is not None:
                kwargs["audience"] = c.metrics_audience
            endpoint = c.metrics_endpoint or f"https://{c.region}.metrics.monitor.azure.com"
            self._metrics = MetricsClient(endpoint, self._cred(), **kwargs)
            self._owned.append(self._metrics)
        return self._metrics

    def _arm_tags(self) -> ArmTags:
        if self._arm is None:
            self._arm = ArmTags(SOURCE, self._cred(), self.config.arm_endpoint, self._client_kwargs())
            self._owned.append(self._arm)
        return self._arm

    def _tagged(self, devices: list[DeviceInfo]) -> list[DeviceInfo]:
        """``devices`` with their instance's Azure tags added to their facts (``resource_tags``)."""
        ids = [d.instance_id for d in devices if d.instance_id]
        if not self.config.resource_tags or not ids:
            return devices
        tags = self._arm_tags().tags(ids)
        return [
            replace(d, tags={**tags.get(d.instance_id.lower(), {}), **d.tags}) if d.instance_id else d
            for d in devices
        ]

    def close(self) -> None:
        """Close the clients and credential the connector built itself (injected ones are the caller's)."""
        while self._owned:
            closer = getattr(self._owned.pop(), "close", None)
            if callable(closer):
                closer()

    def __enter__(self) -> AzureMonitorConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> list[DeviceInfo]:
        """GPUs that reported in the last 15 minutes (or 4 periods, if longer)."""
        end = self._clock()
        start = end - dt.timedelta(seconds=max(900, 4 * self.config.period_s))
        return devices_in(self.collect(start, end))

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Readings with ``start <= ts < end``: one batch per Log Analytics chunk, one for the VMs."""
        if self.config.workspace_id is not None:
            chunk = dt.timedelta(seconds=self.config.query_chunk_s)
            chunk_start = start
            while chunk_start < end:
                chunk_end = min(end, chunk_start + chunk)
                rows = _on_nodes(self._query_logs(chunk_start, chunk_end))
                batch = self._aks_batch(
                    rows,
                    self._inventory(rows, chunk_start, chunk_end),
                    self._node_labels(rows, chunk_start, chunk_end),
                )
                if batch.samples.height:
                    yield batch
                chunk_start = chunk_end
        if self.config.vm_resource_ids:
            batch = self._vm_batch(start, end)
            if batch.samples.height:
                yield batch

    # --- AKS: Log Analytics -------------------------------------------------------------------

    def kql(self, start: dt.datetime, end: dt.datetime) -> str:
        """The query for ``[start, end)``: GPU rows binned to the period (counts by max, the rest by mean)."""
        names = ", ".join(f'"{n}"' for n in _NAMES)
        counts = ", ".join(f'"{n}"' for n in _COUNTS)
        return (
            "InsightsMetrics\n"
            f"| where TimeGenerated >= datetime({_iso(start)}) and TimeGenerated < datetime({_iso(end)})\n"
            f'| where Namespace == "{GPU_NAMESPACE}" and Name in ({names})\n'
            f"| summarize AvgVal = avg(Val), MaxVal = max(Val) by TimeGenerated = bin(TimeGenerated, "
            f"{self.config.period_s}s), Computer, Name, Tags, _ResourceId\n"
            f"| project TimeGenerated, Computer, Name, Val = iif(Name in ({counts}), MaxVal, AvgVal), "
            "Tags, _ResourceId"
        )

    def _workspace_query(self, kql: str, timespan: tuple[dt.datetime, dt.datetime]) -> Any:
        return self._logs_client().query_workspace(self.config.workspace_id, kql, timespan=timespan)

    def _complete(self, result: Any, start: dt.datetime, end: dt.datetime) -> Any:
        from azure.monitor.query import LogsQueryPartialResult

        if isinstance(result, LogsQueryPartialResult):
            error = result.partial_error
            raise RetriableError(
                f"{SOURCE}: Log Analytics returned a partial result for {_iso(start)}–{_iso(end)} "
                f"({getattr(error, 'code', '')}: {getattr(error, 'message', error)}); nothing was ingested "
                "for the window. If it persists, lower query_chunk_s (a query returns at most 500,000 rows)."
            )
        return result

    def _query_logs(self, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
        assert self.config.workspace_id is not None
        result = call_azure(
            SOURCE,
            "Log Analytics Reader on the workspace",
            functools.partial(self._workspace_query, self.kql(start, end), (start, end)),
        )
        result = self._complete(result, start, end)
        if not result.tables:
            return pl.DataFrame()
        table = result.tables[0]
        try:
            frame = pl.DataFrame([list(r) for r in table.rows], schema=list(table.columns), orient="row")
            if frame.is_empty():
                return frame
            stamp = pl.col("TimeGenerated")
            if frame.schema["TimeGenerated"] == pl.String:
                stamp = stamp.str.to_datetime(time_zone="UTC")
            return frame.with_columns(stamp.dt.epoch("ms").alias("ts_ms")).filter(
                (pl.col("ts_ms") >= to_ms(start)) & (pl.col("ts_ms") < to_ms(end))
            )
        except (pl.exceptions.PolarsError, KeyError) as exc:
            raise ConnectorError(f"{SOURCE}: unreadable Log Analytics answer: {exc}") from exc

    def _inventory(self, rows: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
        """``KubePodInventory`` rows (``azure_pod_inventory.COLUMNS``) of the pods ``rows`` name."""
        on = self.config.pod_inventory and not rows.is_empty()
        uids = rows["containerName"].drop_nulls().str.split("/").list.first().unique().to_list() if on else []
        if not uids:
            return azure_pod_inventory.empty()
        margin = dt.timedelta(seconds=self.config.pod_inventory_margin_s)
        result = call_azure(
            SOURCE,
            "Log Analytics Reader on the workspace",
            lambda: azure_pod_inventory.query(self._workspace_query, uids, start, end, margin),
        )
        frame = azure_pod_inventory.read_answer(self._complete(result, start, end))
        if frame is None:
            log.warning("%s %s: no KubePodInventory answer for %s–%s; GPU pods stay keyed by UID",
                        SOURCE, self.config.name, _iso(start), _iso(end))  # fmt: skip
            return azure_pod_inventory.empty()
        return frame

    def _node_labels(
        self, rows: pl.DataFrame, start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, str]]:
        """Node name → its labels as facts (``node_labels``; nothing when off or not collected)."""
        if not self.config.node_labels or rows.is_empty():
            return {}
        nodes = rows["Computer"].unique().to_list()
        margin = dt.timedelta(seconds=self.config.pod_inventory_margin_s)
        result = call_azure(
            SOURCE,
            "Log Analytics Reader on the workspace",
            lambda: azure_node_inventory.query(self._workspace_query, nodes, start, end, margin),
        )
        return azure_node_inventory.labels(self._complete(result, start, end) if result is not None else None)

    def _aks_batch(
        self, rows: pl.DataFrame, inventory: pl.DataFrame, labels: dict[str, dict[str, str]] | None = None
    ) -> SampleBatch:
        if rows.is_empty():
            return SampleBatch(pl.DataFrame(), [])
        key = ["Computer", "ts_ms"]
        per_gpu = rows.filter(pl.col("Name").is_in(list(PER_GPU)) & pl.col("gpuId").is_not_null())
        requests = (
            rows.filter((pl.col("Name") == "containerGpuRequests") & pl.col("containerName").is_not_null())
            .group_by(*key, "containerName")
            .agg(pl.col("Val").max().ceil().cast(pl.Int64).alias("requested"))
        )
        named = per_gpu.group_by(*key, "containerName").agg(pl.col("gpuId").n_unique().alias("named"))
        alloc = (
            requests.join(named, on=[*key, "containerName"], how="full", coalesce=True)
            .with_columns(
                pl.max_horizontal(pl.col("requested").fill_null(0), pl.col("named").fill_null(0)).alias("n")
            )
            .filter(pl.col("n") > 0)
            .sort(*key, "containerName")
            .with_columns((pl.col("n").cum_sum().over(key) - pl.col("n")).alias("first_slot"))
        )
        capacity = (
            rows.filter(pl.col("Name") == "nodeGpuCapacity")
            .group_by(key)
            .agg(pl.col("Val").max().round().cast(pl.Int64).alias("capacity"))
        )
        # A node reports capacity and allocations together; if it somehow allocates more than its
        # capacity (or sends no capacity), the allocated GPUs are still present.
        slots = (
            capacity.join(
                alloc.group_by(key).agg(pl.col("n").sum().alias("allocated")),
                on=key,
                how="full",
                coalesce=True,
            )
            .with_columns(
                pl.max_horizontal(pl.col("capacity").fill_null(0), pl.col("allocated").fill_null(0)).alias(
                    "total"
                )
            )
            .select(*key, pl.int_ranges(0, pl.col("total")).alias("slot"))
            .explode("slot")
            .drop_nulls("slot")
        )
        owner = alloc.select(
            *key,
            "containerName",
            pl.int_ranges("first_slot", pl.col("first_slot") + pl.col("n")).alias("slot"),
        ).explode("slot")
        slots = slots.join(owner, on=[*key, "slot"], how="left")
        gpu_readings = per_gpu.join(
            alloc.select(*key, "containerName", "first_slot"), on=[*key, "containerName"]
        ).with_columns(
            (
                pl.col("first_slot")
                + pl.col("gpuId").rank("dense").over([*key, "containerName"]).cast(pl.Int64)
                - 1
            ).alias("slot")
        )
        markers = slots.join(
            gpu_readings.select(*key, "slot").unique(), on=[*key, "slot"], how="anti"
        ).with_columns(pl.lit(_PRESENCE).alias("Name"), pl.lit(1.0).alias("Val"))
        readings = pl.concat(
            [
                gpu_readings.select(*key, "slot", "containerName", "Name", "Val"),
                markers.select(*key, "slot", "containerName", "Name", "Val"),
            ]
        )
        mine = rows.join(
            readings.select("containerName").drop_nulls().unique(), on="containerName", how="semi"
        )
        workloads, missing = azure_pod_inventory.workloads(mine, inventory)
        if self.config.pod_inventory and missing:
            self.pods_not_in_inventory += len(missing)
            log.warning("%s %s: %d GPU pod(s) not in KubePodInventory, kept by UID (namespace unknown): %s",
                        SOURCE, self.config.name, len(missing), ", ".join(missing[:5]))  # fmt: skip
        readings = readings.join(
            workloads.select("containerName", "workload_key"), on="containerName", how="left"
        )
        samples = to_samples(
            readings.select(
                pl.format("{}/gpu{}", "Computer", "slot").alias("device_id"),
                "ts_ms",
                pl.col("Name").alias("source_metric"),
                pl.col("Val").alias("value"),
                pl.col("workload_key").fill_null(""),
            ),
            _MAPPING,
        )
        devices = self._tagged(self._aks_devices(rows, slots, labels or {}))
        return SampleBatch(samples, devices, azure_pod_inventory.workload_infos(workloads))

    def _aks_devices(
        self, rows: pl.DataFrame, slots: pl.DataFrame, labels: dict[str, dict[str, str]]
    ) -> list[DeviceInfo]:
        nodes = rows.group_by("Computer").agg(
            pl.col("_ResourceId").drop_nulls().first(),
            pl.col("container.azm.ms/clusterName").drop_nulls().first().alias("cluster"),
            pl.col("gpuModel").drop_nulls().sort().first(),
        )
        node_info = {r["Computer"]: r for r in nodes.iter_rows(named=True)}
        c = self.config
        devices = []
        for node, slot in slots.select("Computer", "slot").unique().sort("Computer", "slot").iter_rows():
            info = node_info[node]
            cluster_id = (info["_ResourceId"] or "").lower()
            match = _CLUSTER_ID.match(cluster_id)
            devices.append(
                DeviceInfo(
                    device_id=f"{node}/gpu{slot}",
                    environment="azure",
                    provider="azure",
                    account=c.subscription_id or (match.group(1) if match else None),
                    region=c.region,
                    cluster=c.cluster or info["cluster"],
                    node=node,
                    instance_id=self._vmss_id(node, match),
                    gpu_model=info["gpuModel"],
                    gpu_index=slot,
                    tags=labels.get(node, {}),
                )
            )
        return devices

    def _vmss_id(self, node: str, cluster: re.Match[str] | None) -> str | None:
        vmss = _AKS_NODE.match(node.lower())
        if vmss is None:
            return None
        c = self.config
        subscription = c.subscription_id or (cluster.group(1) if cluster else None)
        node_rg = c.node_resource_group
        group = cluster.group(2) if cluster else c.resource_group
        name = cluster.group(3) if cluster else c.cluster
        if node_rg is None and group and name and c.region:
            node_rg = f"mc_{group}_{name}_{c.region}"
        if subscription is None or node_rg is None:
            return None
        return (
            f"/subscriptions/{subscription}/resourcegroups/{node_rg}"
            f"/providers/microsoft.compute/virtualmachinescalesets/{vmss.group(1)}"
        ).lower()

    # --- VMs: Azure Monitor metrics -----------------------------------------------------------

    def _vm_batch(self, start: dt.datetime, end: dt.datetime) -> SampleBatch:
        c = self.config
        assert c.vm_metric_namespace is not None
        dimension = c.vm_gpu_dimension
        frames: list[pl.DataFrame] = []
        devices: dict[str, DeviceInfo] = {}
        ids = list(c.vm_resource_ids)

        def query(batch: list[str]) -> Any:
            return self._metrics_client().query_resources(
                resource_ids=batch,
                metric_namespace=c.vm_metric_namespace,
                metric_names=list(c.vm_metrics),
                timespan=(start, end),
                granularity=dt.timedelta(seconds=c.period_s),
                aggregations=["Average"],
                filter=f"{dimension} eq '*'" if dimension else None,
            )

        for first in range(0, len(ids), _BATCH):
            results = call_azure(
                SOURCE,
                "Monitoring Reader on the VMs (or their subscription)",
                functools.partial(query, ids[first : first + _BATCH]),
            )
            for result in results:
                for metric in result.metrics:
                    resource = _METRICS_ID.sub("", metric.id or "").lower()
                    vm = resource.rsplit("/", 1)[-1]
                    for series in metric.timeseries:  # one step per series, columnar inside
                        meta = {k.lower(): v for k, v in (series.metadata_values or {}).items()}
                        gpu = meta.get(dimension.lower(), "0") if dimension else "0"
                        device_id = f"{vm}/gpu{gpu}"
                        ts = np.asarray([to_ms(p.timestamp) for p in series.data], dtype=np.int64)
                        values = np.asarray(
                            [np.nan if p.average is None else p.average for p in series.data],
                            dtype=np.float64,
                        )
                        frames.append(
                            pl.DataFrame({"ts_ms": ts, "value": values}).with_columns(
                                pl.lit(device_id).alias("device_id"),
                                pl.lit(metric.name).alias("source_metric"),
                            )
                        )
                        devices[device_id] = DeviceInfo(
                            device_id=device_id,
                            environment="azure",
                            provider="azure",
                            account=c.subscription_id or _subscription(resource),
                            region=result.resource_region or c.region,
                            cluster=c.cluster,
                            node=vm,
                            instance_id=resource or None,
                            gpu_index=int(gpu) if str(gpu).isdigit() else None,
                        )
        if not frames:
            return SampleBatch(pl.DataFrame(), [])
        readings = pl.concat(frames, how="vertical_relaxed").filter(
            (pl.col("ts_ms") >= to_ms(start)) & (pl.col("ts_ms") < to_ms(end))
        )
        mapping = {name: MetricSpec(m.metric, m.scale) for name, m in c.vm_metrics.items()}
        return SampleBatch(to_samples(readings, mapping), self._tagged(list(devices.values())))


def _on_nodes(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with their ``Tags`` as columns, of nodes only: a pending pod's requests have an empty
    ``Computer`` (the agent writes ``spec.nodeName``, unset until scheduled) and hold no GPU."""
    if rows.is_empty():
        return rows
    try:
        rows = rows.with_columns(pl.col("Tags").str.json_decode(_TAGS).alias("t")).unnest("t")
    except pl.exceptions.PolarsError as exc:
        raise ConnectorError(f"{SOURCE}: Tags is not JSON: {exc}") from exc
    return rows.filter(pl.col("Computer").fill_null("") != "")


def _subscription(resource_id: str) -> str | None:
    parts = resource_id.split("/")
    return parts[2] if len(parts) > 2 and parts[1] == "subscriptions" else None


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
