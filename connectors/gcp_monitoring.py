"""``gcp_monitoring``: GPU metrics from Google Cloud Monitoring (``MetricService.ListTimeSeries``).

Sources (docs/formats.md §3), grouped in *families* the config can pick:

* ``ops_agent``: Ops Agent ``agent.googleapis.com/gpu/utilization`` (0–100 % → ``gpu_util``) and
  ``gpu/memory/bytes_used`` (``memory_state`` = used → ``mem_used_b``; used + free at one time →
  ``mem_total_b``).
* ``dcgm``: DCGM through the Ops Agent, receiver v2, ``workload.googleapis.com/gpu.dcgm.*``. Ratios
  0–1 are scaled to %: ``utilization`` → ``gpu_util``, ``sm.utilization`` → ``sm_active``,
  ``pipe.utilization{pipe="tensor"}`` → ``tensor_active``, ``memory.bandwidth_utilization`` →
  ``mem_bw``; ``temperature`` → ``temp_c``; ``memory.bytes_used{state}`` as above (total = free +
  used + reserved, as DCGM's FB_FREE + FB_USED + FB_RESERVED); ``energy_consumption`` → ``energy_j``.
  ``gpu.dcgm.utilization`` is DCGM's *graphics engine active* (PROF_GR_ENGINE_ACTIVE): the fraction
  of time any graphics/compute engine was busy. That is what nvidia-smi's "GPU util" measures (time a
  kernel ran), so it maps to ``gpu_util`` — as :mod:`connectors.dcgm` does under MIG. SM activity,
  when present, is the ledger's default metric anyway. Where the Ops Agent's and DCGM's utilization
  both report for one GPU at one time, the ledger keeps the larger (its rule for repeated readings).
* ``dcgm_v1``: receiver v1 names of the same ratios (the agent renames them, no scaling):
  ``dcgm.gpu.profiling.sm_utilization`` → ``sm_active``, ``pipe_utilization{pipe="tensor"}`` →
  ``tensor_active``, ``dram_utilization`` → ``mem_bw``.
* ``gke_container`` / ``gke_node``: GKE system metrics ``kubernetes.io/{container,node}/accelerator/``
  ``duty_cycle`` (% → ``gpu_util``), ``memory_used``, ``memory_total`` (bytes).

Time: gauges are read with ``ALIGN_MEAN`` over ``period_s``. An aligned point stamped ``T`` (its
end time) is the mean over ``[T − period, T)``, so its reading is moved back to ``T − period``
(``cloud.aggregate_sampling``: it stands for one period, never more). The request interval ends on
a multiple of the period so the alignment windows fall on the period grid. The energy counter
(CUMULATIVE, J) is read **raw**, not with ``ALIGN_DELTA``: the ledger wants counter readings and
takes the deltas itself, so joules are exact differences of the counter, energy spent during a gap
in reporting still counts (the counter kept counting), and a reset (the point's start time moves,
the value restarts near 0) is the ledger's counter-reset rule. ``ALIGN_DELTA`` would interpolate at
window edges and lose the energy of windows without points. Raw readings are stamped at their end
time (the reading's instant). Points come newest first; order does not matter to the ledger.

Devices: GCE ``<instance_id>/gpu<gpu_number>`` with ``instance_id`` the numeric id the bill's
``resource.global_name`` carries, region = zone minus its last ``-x``. The machine type and instance
name are not in the metric: with ``read_system_labels`` the gauge queries group by
``metadata.system_labels.machine_type``/``name`` (the API returns metadata only for labels named in a
reduction; ``REDUCE_MEAN`` over one series changes nothing), else ``instance_type``/``node`` stay None.
Instance labels, as attribution facts: ``user_labels`` names the Compute Engine label keys to read
(the API returns none it is not asked for by name); the gauge queries then group by
``metadata.user_labels.<key>`` too, and each GCE GPU's ``DeviceInfo.tags`` are its labels as
``cloud.tag:<key>`` (a label the instance lacks is no fact). A key other than ``[a-z0-9_]`` is
written quoted (``metadata.user_labels."cost-center"``), as the filter syntax quotes it. GKE GPUs
get none: their ``k8s_node`` resource carries no instance labels.
GKE (``gke_node`` / ``gke_container``): the series come from the GKE GPU device plugin's metrics
server (container-engine-accelerators ``pkg/gpu/nvidia/metrics``), whose ``accelerator_id`` label is
the GPU's NVML UUID (``GPU-…``), ``model`` its NVML name (``NVIDIA L4``) and ``make`` ``nvidia``. No
label carries a GPU index (the plugin's ``nvidia<minor>`` device names are never exported), so:

* the device id is the UUID itself, as :mod:`connectors.dcgm` keys the same GPU; ``gpu_index`` is
  None; a series without ``accelerator_id`` is skipped (counted in ``skipped_series``, logged);
* ``node`` comes from the ``k8s_node`` series of the same UUID in the same project (its
  ``node_name`` resource label: GKE node names are the GCE instance names); a ``k8s_container``
  series names no node, so a GPU seen only through containers has ``node`` None;
  ``instance_id`` stays None (the numeric GCE id is not in either resource);
* a container's readings carry ``k8s:<namespace_name>/<pod_name>/<container_name>`` and replace the
  node's own reading of that metric at that time on the same UUID (the node reading would
  otherwise count as a time-slice sharing the GPU); the node's readings at other times are the
  unallocated GPU's.

The plugin writes container series only for whole GPUs: time-shared (``nvidia0/vgpu0``) and MIG
(``nvidia0/gi0``) allocations get none, so on such node pools every GPU's time is unattributed.

Errors: the SDK's retry (``google.api_core.retry.Retry``) retries UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED and INTERNAL with exponential backoff from ``backoff_s``, at most ``max_retries``
times per page and within ``timeout_s × (max_retries + 1)`` plus the backoff, then
``RetriableError``. UNAUTHENTICATED and missing credentials raise ``FatalSourceError`` saying how to
log in; PERMISSION_DENIED names ``roles/monitoring.viewer``. NOT_FOUND "cannot find metric" (a metric
type no agent in the project ever wrote) is an empty answer.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
import polars as pl
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exceptions
from google.cloud import monitoring_v3
from pydantic import Field, field_validator

from connectors.cloud import (
    CloudMetricsConfig,
    MetricSpec,
    aggregate_sampling,
    auth_error,
    permission_error,
    to_samples,
)
from connectors.cloud_tags import facts
from connectors.sdk import (
    ConnectorConfig,
    DeviceInfo,
    FatalSourceError,
    Metric,
    RetriableError,
    SampleBatch,
    WorkloadInfo,
    devices_in,
    to_ms,
)

Family = Literal["ops_agent", "dcgm", "dcgm_v1", "gke_container", "gke_node"]
FAMILIES: tuple[Family, ...] = ("ops_agent", "dcgm", "dcgm_v1", "gke_container", "gke_node")
LOGIN_STEP = "run `gcloud auth application-default login` or set credentials_file to a service-account key"
READ_SCOPE = "https://www.googleapis.com/auth/monitoring.read"
_RETRYABLE = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.InternalServerError,
)
_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Query:
    """One metric type to read; ``spec`` None means a memory metric split by ``state_label``."""

    family: Family
    metric_type: str
    resource_type: str
    spec: MetricSpec | None = None
    pipe: str | None = None
    state_label: str | None = None
    cumulative: bool = False

    @property
    def key(self) -> str:
        return self.metric_type + (f"{{pipe={self.pipe}}}" if self.pipe else "")


_PCT = MetricSpec(Metric.GPU_UTIL)
_GCE, _POD, _NODE = "gce_instance", "k8s_container", "k8s_node"
_AG, _WL = "agent.googleapis.com/gpu/", "workload.googleapis.com/"
_K8C, _K8N = "kubernetes.io/container/accelerator/", "kubernetes.io/node/accelerator/"


def _ratio(metric: Metric) -> MetricSpec:
    return MetricSpec(metric, 100.0)  # 0–1 → %


QUERIES: tuple[_Query, ...] = (
    _Query("ops_agent", _AG + "utilization", _GCE, _PCT),
    _Query("ops_agent", _AG + "memory/bytes_used", _GCE, state_label="memory_state"),
    _Query("dcgm", _WL + "gpu.dcgm.utilization", _GCE, _ratio(Metric.GPU_UTIL)),
    _Query("dcgm", _WL + "gpu.dcgm.sm.utilization", _GCE, _ratio(Metric.SM_ACTIVE)),
    _Query("dcgm", _WL + "gpu.dcgm.pipe.utilization", _GCE, _ratio(Metric.TENSOR_ACTIVE), "tensor"),
    _Query("dcgm", _WL + "gpu.dcgm.memory.bandwidth_utilization", _GCE, _ratio(Metric.MEM_BW)),
    _Query("dcgm", _WL + "gpu.dcgm.temperature", _GCE, MetricSpec(Metric.TEMP_C)),
    _Query("dcgm", _WL + "gpu.dcgm.memory.bytes_used", _GCE, state_label="state"),
    _Query("dcgm", _WL + "gpu.dcgm.energy_consumption", _GCE, MetricSpec(Metric.ENERGY_J), cumulative=True),
    _Query("dcgm_v1", _WL + "dcgm.gpu.profiling.sm_utilization", _GCE, _ratio(Metric.SM_ACTIVE)),
    _Query(
        "dcgm_v1", _WL + "dcgm.gpu.profiling.pipe_utilization", _GCE, _ratio(Metric.TENSOR_ACTIVE), "tensor"
    ),
    _Query("dcgm_v1", _WL + "dcgm.gpu.profiling.dram_utilization", _GCE, _ratio(Metric.MEM_BW)),
    _Query("gke_container", _K8C + "duty_cycle", _POD, _PCT),
    _Query("gke_container", _K8C + "memory_used", _POD, MetricSpec(Metric.MEM_USED_B)),
    _Query("gke_container", _K8C + "memory_total", _POD, MetricSpec(Metric.MEM_TOTAL_B)),
    _Query("gke_node", _K8N + "duty_cycle", _NODE, _PCT),
    _Query("gke_node", _K8N + "memory_used", _NODE, MetricSpec(Metric.MEM_USED_B)),
    _Query("gke_node", _K8N + "memory_total", _NODE, MetricSpec(Metric.MEM_TOTAL_B)),
)
MAPPING: dict[str, MetricSpec] = {
    **{q.key: q.spec for q in QUERIES if q.spec is not None},
    "mem_used": MetricSpec(Metric.MEM_USED_B),
    "mem_total": MetricSpec(Metric.MEM_TOTAL_B),
}


class GcpMonitoringConfig(CloudMetricsConfig):
    """``type = "gcp_monitoring"``: Cloud Monitoring GPU metrics of one or more projects.

    * ``projects``: project ids to read (each needs ``roles/monitoring.viewer`` for the identity).
    * ``families``: which metric families to read (default all: ``ops_agent``, ``dcgm``,
      ``dcgm_v1``, ``gke_container``, ``gke_node``; see the module docstring).
    * ``credentials_file``: a service-account JSON key; unset means Application Default Credentials.
    * ``api_endpoint``: ``host:port`` instead of ``monitoring.googleapis.com`` (private endpoints).
    * ``read_system_labels``: also ask for the GCE machine type and instance name (metadata).
    * ``user_labels``: Compute Engine label keys to read as ``cloud.tag:<key>`` facts (metadata).
    * ``page_size``: series per page (0: the server's default).
    Plus :class:`CloudMetricsConfig`'s ``period_s`` (the alignment period), ``max_retries``,
    ``backoff_s``, ``timeout_s`` (per request) and ``presence_gap_s``.
    """

    type: str = "gcp_monitoring"
    projects: list[str] = Field(min_length=1)
    families: list[Family] = Field(default_factory=lambda: list(FAMILIES), min_length=1)
    credentials_file: str | None = None
    api_endpoint: str | None = None
    read_system_labels: bool = False
    user_labels: list[str] = Field(default_factory=list, max_length=64)
    page_size: int = Field(0, ge=0, le=100_000)

    @field_validator("user_labels")
    @classmethod
    def _label_keys(cls, keys: list[str]) -> list[str]:
        for key in keys:  # Compute Engine's rule for label keys
            if not re.fullmatch(r"[\w-]{1,63}", key) or not key[0].isalpha() or key != key.lower():
                raise ValueError(f"{key!r} is not a Compute Engine label key (lower case, digits, _ and -)")
        return keys

    @field_validator("projects")
    @classmethod
    def _project_ids(cls, projects: list[str]) -> list[str]:
        for project in projects:
            if not re.fullmatch(r"[a-z0-9][a-z0-9:.\-]{2,62}", project):
                raise ValueError(f"{project!r} is not a project id")
        return projects


class _TriesExhausted(Exception):
    pass


@dataclass(slots=True)
class _Read:
    """One series as columns, plus what it says about its device and workload."""

    query: _Query
    resource: dict[str, str]
    labels: dict[str, str]
    system: dict[str, str]  # metadata.system_labels asked for (string values)
    user: dict[str, str]  # metadata.user_labels asked for
    ts_ms: np.ndarray
    value: np.ndarray


class GcpMonitoringConnector:
    """Cloud Monitoring GPU metrics; see the module docstring."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = GcpMonitoringConfig

    def __init__(
        self,
        config: GcpMonitoringConfig,
        *,
        client: monitoring_v3.MetricServiceClient | None = None,
        credentials: Any = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        # No ``sleep``: backoff is the SDK's own Retry (it sleeps with time.sleep); tests keep it
        # short through backoff_s/max_retries.
        self.config = config
        self.sampling = aggregate_sampling(config.period_s, config.presence_gap_s)
        self._client, self._owns_client = client, client is None
        self._credentials, self._clock = credentials, clock
        self._queries = [q for q in QUERIES if q.family in config.families]
        #: GKE series skipped since the connector was made: no ``accelerator_id`` to key them by.
        self.skipped_series = 0

    def close(self) -> None:
        """Close the gRPC channel of a client the connector made (an injected one is the caller's)."""
        if self._owns_client and self._client is not None:
            self._client.transport.close()
            self._client = None

    def __enter__(self) -> GcpMonitoringConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> list[DeviceInfo]:
        """GPUs that reported in the last 10 minutes (or 4 periods, if longer)."""
        end = self._clock()
        start = end - dt.timedelta(seconds=max(600, 4 * self.config.period_s))
        return devices_in(self.collect(start, end))

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Readings with ``start <= ts < end``, one batch per project."""
        start_ms, end_ms = to_ms(start), to_ms(end)
        for project in self.config.projects:
            reads = [r for q in self._queries for r in self._read(project, q, start_ms, end_ms)]
            batch, skipped = _to_batch(reads, start_ms, end_ms)
            if skipped:
                self.skipped_series += skipped
                log.warning("gcp_monitoring %s: %d GKE series of project %s carry no accelerator_id; skipped",
                            self.config.name, skipped, project)  # fmt: skip
            if batch.samples.height:
                yield batch

    # --- the API ----------------------------------------------------------------------------------

    def _client_or_build(self) -> monitoring_v3.MetricServiceClient:
        if self._client is None:
            source = f"gcp_monitoring {self.config.name}"
            credentials = self._credentials
            try:
                if credentials is None and self.config.credentials_file is not None:
                    from google.oauth2 import service_account

                    credentials = service_account.Credentials.from_service_account_file(
                        self.config.credentials_file, scopes=[READ_SCOPE]
                    )
                options = {"api_endpoint": self.config.api_endpoint} if self.config.api_endpoint else None
                self._client = monitoring_v3.MetricServiceClient(
                    credentials=credentials, client_options=options
                )
            except (auth_exceptions.DefaultCredentialsError, OSError, ValueError) as exc:
                raise auth_error(source, type(exc).__name__, LOGIN_STEP) from None
        return self._client

    def _request(
        self, project: str, query: _Query, start_ms: int, end_ms: int
    ) -> monitoring_v3.ListTimeSeriesRequest:
        filters = [f'metric.type = "{query.metric_type}"', f'resource.type = "{query.resource_type}"']
        if query.pipe:
            filters.append(f'metric.labels.pipe = "{query.pipe}"')
        request: dict[str, Any] = {
            "name": f"projects/{project}",
            "filter": " AND ".join(filters),
            "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
            "page_size": self.config.page_size,
        }
        if query.cumulative:
            # The API serves end times in (start, end]: one second earlier keeps a reading at start.
            request["interval"] = _interval(start_ms - 1000, end_ms)
            return monitoring_v3.ListTimeSeriesRequest(request)
        # Alignment windows end at the interval's end: put it on the period grid. Points stamped
        # (s0, e0] are the windows starting in [s0, e0 − period] ⊂ [start, end).
        p = self.config.period_s * 1000
        request["interval"] = _interval(-(-start_ms // p) * p, -(-end_ms // p) * p)
        aggregation: dict[str, Any] = {
            "alignment_period": {"seconds": self.config.period_s},
            "per_series_aligner": monitoring_v3.Aggregation.Aligner.ALIGN_MEAN,
        }
        config = self.config
        if (config.read_system_labels or config.user_labels) and query.resource_type == "gce_instance":
            labels = ["project_id", "instance_id", "zone"]
            metric = ["gpu_number", "model", "uuid", *([query.state_label] if query.state_label else [])]
            system = ["machine_type", "name"] if config.read_system_labels else []
            aggregation["cross_series_reducer"] = monitoring_v3.Aggregation.Reducer.REDUCE_MEAN
            aggregation["group_by_fields"] = [
                *(f"resource.label.{x}" for x in labels),
                *(f"metric.label.{x}" for x in metric),
                *(f"metadata.system_labels.{x}" for x in system),
                *(f"metadata.user_labels.{_quoted(x)}" for x in config.user_labels),
            ]
        request["aggregation"] = aggregation
        return monitoring_v3.ListTimeSeriesRequest(request)

    def _read(self, project: str, query: _Query, start_ms: int, end_ms: int) -> Iterator[_Read]:
        config = self.config
        source = f"gcp_monitoring {config.name} (project {project}, {query.metric_type})"
        tries = [0]

        def count(exc: Exception) -> None:
            tries[0] += 1
            if tries[0] > config.max_retries:
                raise _TriesExhausted(exc) from exc

        backoff = sum(min(30.0, config.backoff_s * 2**k) for k in range(config.max_retries))
        retry = gretry.Retry(
            predicate=gretry.if_exception_type(*_RETRYABLE),
            initial=config.backoff_s,
            maximum=30.0,
            multiplier=2.0,
            timeout=config.timeout_s * (config.max_retries + 1) + backoff,
            on_error=count,
        )
        request = self._request(project, query, start_ms, end_ms)
        shift = 0 if query.cumulative else config.period_s * 1000
        try:
            pager = self._client_or_build().list_time_series(request, retry=retry, timeout=config.timeout_s)
            for page in pager.pages:
                tries[0] = 0  # the try budget is per page
                for series in type(page).pb(page).time_series:
                    read = _series(query, series, shift)
                    if read is not None:
                        yield read
        except _TriesExhausted as exc:
            cause = exc.args[0]
            raise RetriableError(
                f"{source}: {type(cause).__name__}: {cause.message} (after {config.max_retries + 1} tries)"
            ) from None
        except gexc.RetryError as exc:
            raise RetriableError(f"{source}: retry deadline passed: {exc.cause}") from None
        except gexc.Unauthenticated as exc:
            raise auth_error(source, exc.message, LOGIN_STEP) from None
        except gexc.PermissionDenied as exc:
            raise permission_error(
                source,
                exc.message,
                f"roles/monitoring.viewer (monitoring.timeSeries.list) on project {project}",
            ) from None
        except gexc.NotFound as exc:
            if "metric" not in exc.message.lower():
                raise FatalSourceError(f"{source}: {exc.message}") from None
        except _RETRYABLE as exc:
            raise RetriableError(f"{source}: {type(exc).__name__}: {exc.message}") from None
        except gexc.GoogleAPICallError as exc:
            raise FatalSourceError(f"{source}: {type(exc).__name__}: {exc.message}") from None
        except (auth_exceptions.DefaultCredentialsError, auth_exceptions.RefreshError) as exc:
            raise auth_error(source, type(exc).__name__, LOGIN_STEP) from None


def _interval(start_ms: int, end_ms: int) -> monitoring_v3.TimeInterval:
    def stamp(ms: int) -> dict[str, int]:
        return {"seconds": ms // 1000, "nanos": ms % 1000 * 1_000_000}

    return monitoring_v3.TimeInterval({"start_time": stamp(start_ms), "end_time": stamp(end_ms)})


def _series(query: _Query, series: Any, shift_ms: int) -> _Read | None:
    """One raw ``TimeSeries`` message as columns (None for a value type that is not a number)."""
    points = series.points
    if not points:
        return None
    kind = points[0].value.WhichOneof("value")
    if kind not in ("double_value", "int64_value"):
        return None
    n = len(points)
    end_s = np.fromiter((p.interval.end_time.seconds for p in points), np.int64, n)
    end_ns = np.fromiter((p.interval.end_time.nanos for p in points), np.int64, n)
    value = np.fromiter((getattr(p.value, kind) for p in points), np.float64, n)
    return _Read(
        query,
        dict(series.resource.labels),
        dict(series.metric.labels),
        {k: v.string_value for k, v in series.metadata.system_labels.fields.items()},
        dict(series.metadata.user_labels),
        end_s * 1000 + end_ns // 1_000_000 - shift_ms,
        value,
    )


def _quoted(key: str) -> str:
    """A label key as a field path names it: quoted unless it is a plain identifier."""
    return key if re.fullmatch(r"[a-z_][a-z0-9_]*", key) else f'"{key}"'


def _region(location: str) -> str:
    match = _ZONE.match(location)
    return match.group(1) if match else location


def _gce_device(read: _Read) -> DeviceInfo:
    res, labels = read.resource, read.labels
    number = labels.get("gpu_number", "")
    return DeviceInfo(
        device_id=f"{res.get('instance_id', '')}/gpu{number}",
        environment="gcp",
        provider="gcp",
        account=res.get("project_id"),
        region=_region(res.get("zone", "")) or None,
        node=read.system.get("name") or None,
        instance_id=res.get("instance_id"),
        instance_type=read.system.get("machine_type") or None,
        gpu_model=labels.get("model"),
        gpu_index=int(number) if number.isdigit() else None,
        tags=facts(read.user.items()),
    )


def _gke_device(read: _Read, node: str | None) -> DeviceInfo:
    res = read.resource
    return DeviceInfo(
        device_id=read.labels["accelerator_id"],
        environment="gcp",
        provider="gcp",
        account=res.get("project_id"),
        region=_region(res.get("location", "")) or None,
        cluster=res.get("cluster_name"),
        node=node,
        gpu_model=read.labels.get("model"),
    )


def _to_batch(reads: list[_Read], start_ms: int, end_ms: int) -> tuple[SampleBatch, int]:
    """Series → one columnar batch (device ids, memory totals, pod attribution, ledger units), and
    how many GKE series were skipped for want of an ``accelerator_id``."""
    gke = [r for r in reads if r.query.resource_type != "gce_instance"]
    kept = [r for r in gke if r.labels.get("accelerator_id")]
    skipped = len(gke) - len(kept)
    reads = [r for r in reads if r.query.resource_type == "gce_instance"] + kept
    # The node of each GPU UUID, from the k8s_node series (UUIDs are unique: no ambiguity).
    node_of = {
        (r.resource.get("project_id"), r.labels["accelerator_id"]): r.resource.get("node_name")
        for r in kept
        if r.query.resource_type == "k8s_node"
    }
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    frames: list[pl.DataFrame] = []
    for read in reads:  # one step per series; the points stay columns
        res, query = read.resource, read.query
        workload = ""
        if query.resource_type == "gce_instance":
            info = _gce_device(read)
            known = devices.get(info.device_id)
            if known is not None:  # keep what a grouped (metadata) series told; a raw one has none
                info = replace(
                    info,
                    instance_type=known.instance_type or info.instance_type,
                    node=known.node or info.node,
                    tags=known.tags or info.tags,
                )
        else:
            info = _gke_device(read, node_of.get((res.get("project_id"), read.labels["accelerator_id"])))
        if query.resource_type == "k8s_container":
            ns, pod = res.get("namespace_name", ""), res.get("pod_name", "")
            workload = f"k8s:{ns}/{pod}/{res.get('container_name', '')}"
            workloads[workload] = WorkloadInfo(workload, namespace=ns or None, workload=pod or None)
        devices[info.device_id] = info
        source = query.key
        if query.state_label is not None:
            source = f"state:{read.labels.get(query.state_label, '')}"
        frames.append(
            pl.DataFrame(
                {"ts_ms": read.ts_ms, "value": read.value},
                schema={"ts_ms": pl.Int64, "value": pl.Float64},
            ).with_columns(
                pl.lit(info.device_id).alias("device_id"),
                pl.lit(source).alias("source_metric"),
                pl.lit(workload).alias("workload_key"),
            )
        )
    if not frames:
        return SampleBatch(to_samples(pl.DataFrame(), MAPPING), []), skipped
    readings = pl.concat(frames, how="vertical").filter(
        pl.col("ts_ms").is_between(start_ms, end_ms, closed="left")
    )
    readings = pl.concat([readings, _memory(readings)], how="diagonal").filter(
        ~pl.col("source_metric").str.starts_with("state:")
    )
    samples = to_samples(readings, MAPPING)
    # A container's reading replaces the node's own reading of the same metric at the same time.
    claimed = samples.filter(pl.col("workload_key") != "").select("device_id", "ts_ms", "metric").unique()
    samples = pl.concat(
        [
            samples.filter(pl.col("workload_key") != ""),
            samples.filter(pl.col("workload_key") == "").join(
                claimed, on=["device_id", "ts_ms", "metric"], how="anti"
            ),
        ]
    )
    used = set(samples["device_id"].unique().to_list())
    used_wl = set(samples["workload_key"].unique().to_list())
    batch = SampleBatch(
        samples,
        [d for d in devices.values() if d.device_id in used],
        [w for w in workloads.values() if w.workload_key in used_wl],
    )
    return batch, skipped


def _memory(readings: pl.DataFrame) -> pl.DataFrame:
    """Memory-by-state readings → ``mem_used`` (state used) and ``mem_total`` (all states at one
    time, where both used and free reported)."""
    states = readings.filter(pl.col("source_metric").str.starts_with("state:"))
    used = states.filter(pl.col("source_metric") == "state:used").with_columns(
        pl.lit("mem_used").alias("source_metric")
    )
    total = (
        states.group_by("device_id", "ts_ms", "workload_key")
        .agg(
            pl.col("value").sum(),
            pl.col("source_metric").is_in(["state:used"]).any().alias("_used"),
            pl.col("source_metric").is_in(["state:free"]).any().alias("_free"),
        )
        .filter(pl.col("_used") & pl.col("_free"))
        .drop("_used", "_free")
        .with_columns(pl.lit("mem_total").alias("source_metric"))
    )
    return pl.concat([used, total.select(used.columns)])
