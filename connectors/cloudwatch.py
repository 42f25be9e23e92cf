"""``cloudwatch``: NVIDIA GPU metrics that the CloudWatch agent (and Container Insights) publish.

**Source.** The CloudWatch agent's ``nvidia_gpu`` section publishes to namespace ``CWAgent``
(configurable: ``namespace``). The connector reads, per region and account, with
``ListMetrics`` (to learn each GPU's *exact full* dimension set: ``GetMetricData`` matches no
subset; moto lists a set once per datapoint batch, so sets are deduplicated) and
``GetMetricData`` (``MetricStat``, ``Stat=Average`` and, at periods longer than the agent's
collection interval, ``SampleCount``; ``ScanBy=TimestampAscending``, at most 500 queries a call,
following ``NextToken``).

**Mapping** (docs/formats.md §2; the agent publishes no CloudWatch unit):

* ``nvidia_smi_utilization_gpu`` (% of time a kernel ran) → ``gpu_util``.
* ``nvidia_smi_memory_used`` / ``_total`` (MB as nvidia-smi prints it, which is MiB) → bytes × 2²⁰.
* ``nvidia_smi_power_draw`` (W) → ``power_w``; ``nvidia_smi_temperature_gpu`` (°C) → ``temp_c``.
* ``nvidia_smi_utilization_memory`` is **not read**: it is NVML's "memory utilization", the share
  of time the memory controller was busy reading or writing, not the share of peak DRAM bandwidth
  that ``mem_bw`` means (DCGM ``DRAM_ACTIVE``/GPM ``DRAM_BW_UTIL``). A kernel that reads memory
  all the time at a small fraction of peak bandwidth shows near 100 % on the former and little
  on the latter, so filling ``mem_bw`` with it would overstate memory-bound work.

**Devices.** The agent drops the GPU UUID; a GPU is ``<InstanceId>/gpu<index>``, instance id
``InstanceId``. A series without ``InstanceId`` (the site did not append it) becomes
``<host>/gpu<index>`` with ``instance_id=None``: it cannot join the bill by resource id.
``InstanceType`` comes from the dimension, else from ``ec2:DescribeInstances`` (cached per
instance), which also gives the instance's tags as ``DeviceInfo.tags`` (``cloud.tag:<Key>``, the
attribution facts ``[[attribution]]`` rules read; ``instance_tags = false`` asks EC2 only for
instances without an ``InstanceType`` dimension and reads no tags). ``gpu_model`` is ``name``;
``node`` is ``host``. Series without an ``index`` dimension (the agent's
``aggregation_dimensions`` roll-ups) are not per-GPU and are skipped.

**Container Insights** (namespace ``ContainerInsights``, EKS with enhanced observability and
accelerated-compute metrics; ``container_insights = false`` turns it off): per-GPU ``node_gpu_*``
readings (device ``<InstanceId>/gpu<n>`` from ``GpuDevice`` ``nvidia<n>``; utilization, tensor
activity, memory, power, temperature) and ``container_gpu_utilization`` for attribution: while a
container series has a datapoint, its GPU's readings belong to ``k8s:<Namespace>/<FullPodName>/
<ContainerName>`` (``PodName`` is the owning workload, kept as the workload's name; several
containers on one GPU split it evenly). Container series name no node: each is tied to its node
through the ``ContainerGPU`` events of the performance log group (``performance_logs = false``
skips them), else only when one GPU of the cluster has its ``GpuDevice``; what cannot be tied is
counted in ``attribution`` and logged. Sources, versions and rules: :mod:`connectors.cloudwatch_ci`.
``pod_gpu_*`` adds nothing the container series lack and is not read. Where the agent and
Container Insights both report a GPU, the agent's readings win. A window older than the log
group's retention has no placements and falls back to the sole-GPU rule. *OTel* Container
Insights (add-on ``v6.0.1-eksbuild.1`` and later) publishes no ``node_gpu_*`` series at all: read
it with :mod:`connectors.cloudwatch_promql`.

**Periods and the ledger.** A datapoint of period ``P`` is an average over ``[t, t + P)``
(docs/design.md §3.1). CloudWatch keeps 1-minute data 15 days, 5-minute data 63 days and 1-hour data 455
days, so windows older than 15 / 63 days are asked for at ``lcm(period_s, 300)`` /
``lcm(period_s, 3600)`` (and sub-minute ``period_s`` beyond 3 h at ``lcm(period_s, 60)``); data
older than 455 days does not exist and yields nothing. The connector's ``sampling`` is one object,
``aggregate_sampling(period_s)``, so every reading it emits stands for exactly ``period_s``: a
coarse datapoint of period ``P`` is emitted as ``P / period_s`` readings of its average at
``t, t + period_s, …`` — but only for the seconds it *covers*. **Coverage**: a coarse datapoint
is an average over the samples the agent sent in its period, however few; counting it as the
whole period made a GPU that ran 10:15–16:15 seven fully observed GPU-hours at 1-hour periods.
Where ``P`` exceeds ``collection_interval_s`` (the agent's ``metrics_collection_interval``,
default 60 s for ``nvidia_gpu`` and for Container Insights' GPU metrics) ``SampleCount`` is read
beside ``Average`` in the same ``GetMetricData`` call (250 series a call then), and a datapoint
covers ``min(SampleCount × collection_interval_s, P)`` seconds, i.e. that many ``period_s``
readings, rounded to the nearest (at least one). Where inside ``P`` they lie is not known; they
are placed against the neighbouring datapoint of the same series: at the period's end when only
the next period has one (the GPU came up), else at its start (it went away; a gap inside a run;
an isolated period). The count is read one period beyond each side of the window, so the
placement does not depend on the window asked for. The rest of the period is unobserved; the
ledger keeps it present only between readings less than ``presence_gap_s`` apart. The GPU of
10:15–16:15 is then 6 GPU-hours at every resolution. With ``period_s`` itself as long as ``P``
(one reading a period) coverage cannot be finer than the period. Ledger seconds are then exact
at every resolution (busy seconds of a 5-minute average equal the sum over its minutes), and a
missing minute is unobserved, never stretched. Each coarse query starts on a multiple of its
period and its readings are clipped to their age band, so no minute is emitted twice.

**Limits.** ``ListMetrics`` lists only metrics with data in the last two weeks, so a backfill
further back finds only GPUs that still report. The ``AWS/...`` EC2 metrics are not read.

**Accounts, regions, credentials.** ``regions`` lists the regions to read; credentials come from
the default chain, ``profile``, or static ``aws_access_key_id``/``aws_secret_access_key``; with
``role_arn`` (and ``external_id``) the connector assumes that role through STS in each region and
renews it before it expires. The account id is ``account_id`` or ``sts:GetCallerIdentity``.

**Errors.** botocore's own retries (mode ``standard``, ``total_max_attempts = max_retries + 1``, its
exponential backoff with jitter, so ``backoff_s`` does not apply and there is no ``sleep`` to
inject) handle throttling, 5xx and
connection errors; what still fails is a ``RetriableError``. Refused or expired credentials and
missing permissions are ``FatalSourceError`` naming the next step. A result whose ``StatusCode``
is ``InternalError``, or ``PartialData`` with no ``NextToken`` to continue, is a
``RetriableError``: a partial hour is never returned silently.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import boto3
import numpy as np
import polars as pl
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)
from pydantic import Field, SecretStr, field_validator, model_validator

from connectors.cloud import (
    MIB,
    CloudMetricsConfig,
    MetricSpec,
    aggregate_sampling,
    permission_error,
    to_samples,
)
from connectors.cloud_tags import facts
from connectors.cloudwatch_aws import (
    DENIED,
    PERMISSIONS,
    SOURCE,
    AwsCalls,
    ClientFactory,
    client_factory,
    error_code,
)
from connectors.cloudwatch_ci import (
    CONTAINER_COLS,
    CONTAINER_GPU_TYPE,
    CONTAINER_METRIC,
    NODE_METRICS,
    Attribution,
    ContainerRef,
    attach,
    gpu_number,
    log_group,
    placements,
)
from connectors.sdk import (
    ConnectorConfig,
    DeviceInfo,
    Metric,
    RetriableError,
    SampleBatch,
    WorkloadInfo,
)

log = logging.getLogger(__name__)

MAX_QUERIES = 500  # per GetMetricData call
DAY_S = 86_400
#: (age in seconds beyond which, minimum period CloudWatch still keeps), coarsest first.
RETENTION: tuple[tuple[int, int], ...] = ((63 * DAY_S, 3600), (15 * DAY_S, 300), (3 * 3600, 60))
OLDEST_S = 455 * DAY_S

AGENT_METRICS: dict[str, MetricSpec] = {
    "nvidia_smi_utilization_gpu": MetricSpec(Metric.GPU_UTIL),
    "nvidia_smi_memory_used": MetricSpec(Metric.MEM_USED_B, MIB),
    "nvidia_smi_memory_total": MetricSpec(Metric.MEM_TOTAL_B, MIB),
    "nvidia_smi_power_draw": MetricSpec(Metric.POWER_W),
    "nvidia_smi_temperature_gpu": MetricSpec(Metric.TEMP_C),
}
_MAPPING = {**AGENT_METRICS, **NODE_METRICS}
_LEDGER_METRIC = {name: spec.metric.value for name, spec in _MAPPING.items()}
_FILLABLE = ("cluster", "node", "instance_id", "instance_type", "gpu_model")


class CloudWatchConfig(CloudMetricsConfig):
    """``type = "cloudwatch"``: CloudWatch agent / Container Insights GPU metrics.

    * ``regions``: AWS regions to read (at least one).
    * ``namespace``: the agent's namespace (default ``CWAgent``); ``container_insights``: also
      read ``container_insights_namespace`` (default ``ContainerInsights``); ``performance_logs``:
      tie container series to nodes through the ``/aws/containerinsights/<cluster>/performance``
      log events (needs ``logs:FilterLogEvents``; default on).
    * Credentials: the default chain, or ``profile``, or static ``aws_access_key_id`` +
      ``aws_secret_access_key`` (secrets); ``role_arn`` (+ ``external_id``,
      ``role_session_name``) is assumed on top of them through STS.
    * ``account_id``: the 12-digit account; default: ``sts:GetCallerIdentity``.
    * ``endpoint_url``: one endpoint for every AWS API (a VPC endpoint proxy, a local test server).
    * ``collection_interval_s``: the agent's ``metrics_collection_interval`` for ``nvidia_gpu``
      (default 60 s, the agent's own default, which the section inherits unless it sets one);
      one ``SampleCount`` stands for this many observed seconds.
    * ``instance_tags``: read every GPU instance's tags with ``ec2:DescribeInstances`` (default on).
    * ``period_s`` (default 60; 1, 5, 10, 30 or a multiple of 60, as CloudWatch allows), retries,
      timeouts and ``presence_gap_s``: see :class:`connectors.cloud.CloudMetricsConfig`.
    """

    type: str = "cloudwatch"
    regions: list[str] = Field(min_length=1)
    namespace: str = "CWAgent"
    container_insights: bool = True
    container_insights_namespace: str = "ContainerInsights"
    performance_logs: bool = True
    profile: str | None = None
    role_arn: str | None = None
    external_id: str | None = None
    role_session_name: str = Field("gpu-ledger", min_length=2, max_length=64)
    aws_access_key_id: SecretStr | None = None
    aws_secret_access_key: SecretStr | None = None
    account_id: str | None = Field(None, pattern=r"^\d{12}$")
    endpoint_url: str | None = None
    collection_interval_s: int = Field(60, ge=1, le=86_400)
    instance_tags: bool = True

    @field_validator("period_s")
    @classmethod
    def _cloudwatch_period(cls, period: int) -> int:
        if period not in (1, 5, 10, 30) and period % 60:
            raise ValueError("CloudWatch periods are 1, 5, 10, 30 or a multiple of 60 seconds")
        return period

    @field_validator("regions")
    @classmethod
    def _region_names(cls, regions: list[str]) -> list[str]:
        for region in regions:
            if not re.match(r"^[a-z]{2}(-[a-z]+)+-\d+$", region):
                raise ValueError(f"{region!r} is not an AWS region name such as us-east-1")
        return regions

    @model_validator(mode="after")
    def _one_credential_source(self) -> CloudWatchConfig:
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValueError("aws_access_key_id and aws_secret_access_key go together")
        if self.profile is not None and self.aws_access_key_id is not None:
            raise ValueError("give profile or static access keys, not both")
        if self.external_id is not None and self.role_arn is None:
            raise ValueError("external_id needs role_arn")
        return self


@dataclass(frozen=True, slots=True)
class _Series:
    """One ListMetrics entry: a metric name and its exact, full dimension set."""

    namespace: str
    metric: str
    dims: tuple[tuple[str, str], ...]

    def query(self, qid: str, period: int, stat: str = "Average") -> dict[str, Any]:
        dimensions = [{"Name": k, "Value": v} for k, v in self.dims]
        metric = {"Namespace": self.namespace, "MetricName": self.metric, "Dimensions": dimensions}
        return {"Id": qid, "MetricStat": {"Metric": metric, "Period": period, "Stat": stat}}


def segments(start_s: int, end_s: int, now_s: int, period_s: int) -> list[tuple[int, int, int]]:
    """``[start_s, end_s)`` cut by age into ``(lo, hi, period)`` pieces CloudWatch can answer.

    Bands, oldest first: from 455 days ago at ``lcm(period_s, 3600)``, from 63 days at
    ``lcm(period_s, 300)``, from 15 days at ``lcm(period_s, 60)``, from 3 hours at ``period_s``.
    Each band's start is rounded up to the period of the band before it, so the older band asks
    for whole periods and the newer one starts inside its retention. Before the first band there
    is no data.
    """
    periods = [math.lcm(period_s, 3600), math.lcm(period_s, 300), math.lcm(period_s, 60), period_s]
    starts = [_ceil(now_s - OLDEST_S, 3600)]
    for (age, _), older_period in zip(RETENTION, periods[:-1], strict=True):
        starts.append(max(starts[-1], _ceil(now_s - age, older_period)))
    pieces: list[tuple[int, int, int]] = []
    for band, (lo, period) in enumerate(zip(starts, periods, strict=True)):
        hi = starts[band + 1] if band + 1 < len(starts) else end_s
        lo, hi = max(lo, start_s), min(hi, end_s)
        if hi <= lo:
            continue
        if pieces and pieces[-1][2] == period and pieces[-1][1] == lo:
            lo = pieces.pop()[0]
        pieces.append((lo, hi, period))
    return pieces


def expand(
    points: pl.DataFrame, period: int, period_s: int, interval_s: int, lo: int, hi: int
) -> pl.DataFrame:
    """Datapoints of ``period`` (``series``, ``ts_s`` period start, ``value`` average, ``n``
    ``SampleCount`` or null for a fully covered period) → readings every ``period_s`` over the
    seconds they cover, clipped to ``[lo, hi)``: ``series``, ``ts_ms``, ``value``.

    A datapoint covers ``min(n × interval_s, period)`` seconds, i.e. ``k`` readings (rounded to
    the nearest, at least one where ``n > 0``). Where in its period they lie is unknown; they
    are placed against the neighbouring datapoint of the same series: at the period's end when
    only the next period has a datapoint (the GPU came up during this one), else at its start
    (it went away, or a gap inside a run, or an isolated period). A GPU that ran 10:15–16:15 is
    then present and observed exactly 10:15–16:15 at 1-hour periods.
    """
    slots = period // period_s
    step = period_s * 1000
    covered = pl.min_horizontal(pl.col("n").fill_null(math.inf) * interval_s, pl.lit(float(period)))
    k = (covered / period_s + 0.5).floor().clip(1, slots).cast(pl.Int64)
    prev = pl.col("ts_s").shift(1).over("series") == pl.col("ts_s") - period
    after = pl.col("ts_s").shift(-1).over("series") == pl.col("ts_s") + period
    placed = (
        points.filter(pl.col("n").is_null() | (pl.col("n") > 0))
        .sort("series", "ts_s")
        .with_columns(
            k.alias("k"), prev.fill_null(False).alias("prev"), after.fill_null(False).alias("after")
        )
        .with_columns(
            pl.when(~pl.col("prev") & pl.col("after")).then(slots - pl.col("k")).otherwise(0).alias("first")
        )
        .filter(pl.col("ts_s").is_between(lo // period * period, hi - 1))
    )
    if not placed.height:
        return pl.DataFrame(schema={"series": pl.Int64, "ts_ms": pl.Int64, "value": pl.Float64})
    repeat = placed["k"].to_numpy()
    offsets = np.arange(int(repeat.sum()), dtype=np.int64) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    slot = np.repeat(placed["first"].to_numpy(), repeat) + offsets
    frame = pl.DataFrame(
        {
            "series": np.repeat(placed["series"].to_numpy(), repeat),
            "ts_ms": np.repeat(placed["ts_s"].to_numpy() * 1000, repeat) + slot * step,
            "value": np.repeat(placed["value"].to_numpy(), repeat),
        }
    )
    return frame.filter(pl.col("ts_ms").is_between(lo * 1000, hi * 1000, closed="left"))


def _ceil(value: int, step: int) -> int:
    return -(-value // step) * step


class CloudWatchConnector(AwsCalls):
    """CloudWatch agent and Container Insights GPU metrics; see the module docstring."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = CloudWatchConfig
    config: CloudWatchConfig

    def __init__(
        self,
        config: CloudWatchConfig,
        *,
        session: boto3.Session | None = None,
        make_client: ClientFactory | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.config = config
        self.sampling = aggregate_sampling(config.period_s, config.presence_gap_s)
        self._session_given = session
        self._make_client = make_client if make_client is not None else client_factory(config)
        self._clock = clock
        self._init_aws()
        #: (region, instance id) → (instance type, tags as facts); None: EC2 does not know it
        self._instances: dict[tuple[str, str], tuple[str | None, dict[str, str]] | None] = {}
        #: how Container Insights container readings were tied to GPUs, or why not (counted)
        self.attribution = Attribution()

    def __enter__(self) -> CloudWatchConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the contract

    def discover(self) -> list[DeviceInfo]:
        """GPUs whose metrics CloudWatch lists now (ListMetrics: data in the last two weeks)."""
        devices: dict[str, DeviceInfo] = {}
        for region in self.config.regions:
            for item in self._inventory(region):
                if item.device is not None:
                    devices.setdefault(item.device.device_id, item.device)
        return list(devices.values())

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Readings with ``start <= ts < end``, every ``period_s``; one batch per region and period."""
        now_s = int(self._clock().timestamp())
        pieces = segments(
            math.ceil(start.timestamp()), math.ceil(end.timestamp()), now_s, self.config.period_s
        )
        if not pieces:
            return
        for region in self.config.regions:
            inventory = self._inventory(region)
            if not inventory:
                continue
            for lo, hi, period in pieces:
                batch = self._batch(region, inventory, lo, hi, period)
                if batch.samples.height:
                    yield batch

    # ---- what exists

    def _inventory(self, region: str) -> list[_Listed]:
        """Every series to read in ``region``, tied to its device (or workload), deduplicated."""
        account = self._account_id(region)
        cfg = self.config
        listed: list[_Listed] = []
        agent = self._list(region, cfg.namespace, AGENT_METRICS)
        for series in agent:
            device = self._device(series, region, account, "index", "host")
            if device is not None:
                listed.append(_Listed(series, device, "", 0))
        if cfg.container_insights:
            ns = cfg.container_insights_namespace
            for series in self._list(region, ns, NODE_METRICS):
                device = self._device(series, region, account, "GpuDevice", "NodeName")
                if device is not None:
                    listed.append(_Listed(series, device, "", 1))
            for series in self._list(region, ns, {CONTAINER_METRIC: None}):
                ref = ContainerRef.of(dict(series.dims))
                if ref is not None:  # else a roll-up, not one container on one GPU
                    listed.append(_Listed(series, None, ref.workload_key, 2, ref))
        self._describe_instances(region, listed)
        return listed

    def _list(self, region: str, namespace: str, names: Iterable[str]) -> list[_Series]:
        cloudwatch = self._client(region, "cloudwatch")
        found: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = {}
        for name in names:
            pages = cloudwatch.get_paginator("list_metrics").paginate(Namespace=namespace, MetricName=name)
            for page in self._call(functools.partial(list, pages), "cloudwatch:ListMetrics"):
                for metric in page.get("Metrics", []):
                    dims = tuple((d["Name"], d["Value"]) for d in metric.get("Dimensions", []))
                    # a set for deduplication; the query keeps the listed order (moto matches
                    # dimensions in order, CloudWatch as a set)
                    found.setdefault((name, tuple(sorted(dims))), _Series(namespace, name, dims))
        return list(found.values())

    @staticmethod
    def _device(series: _Series, region: str, account: str, gpu_key: str, node_key: str) -> DeviceInfo | None:
        """The GPU a per-GPU series describes (agent: ``index``/``host``; Container Insights:
        ``GpuDevice``/``NodeName``); None for a roll-up over GPUs, hosts or a cluster."""
        dims = dict(series.dims)
        index, instance, node = gpu_number(dims.get(gpu_key)), dims.get("InstanceId"), dims.get(node_key)
        if index is None or not (instance or node):
            return None
        return DeviceInfo(
            device_id=f"{instance or node}/gpu{index}",
            environment="aws",
            provider="aws",
            account=account,
            region=region,
            cluster=dims.get("ClusterName"),
            node=node,
            instance_id=instance,
            instance_type=dims.get("InstanceType"),
            gpu_model=dims.get("name"),
            gpu_index=index,
        )

    def _describe_instances(self, region: str, listed: list[_Listed]) -> None:
        """Instance types the dimensions lack and (``instance_tags``) every instance's tags, from
        ``ec2:DescribeInstances``, 200 ids a call, cached per instance."""
        wanted = {
            x.device.instance_id
            for x in listed
            if x.device and x.device.instance_id and (self.config.instance_tags or not x.device.instance_type)
        }
        missing = sorted(wanted - {i for r, i in self._instances if r == region})
        if missing:
            ec2 = self._client(region, "ec2")
            for first in range(0, len(missing), 200):
                ids = missing[first : first + 200]
                paginator = ec2.get_paginator("describe_instances")
                pages = paginator.paginate(Filters=[{"Name": "instance-id", "Values": ids}])
                found = {
                    instance["InstanceId"]: (
                        instance.get("InstanceType"),
                        facts((t.get("Key"), t.get("Value")) for t in instance.get("Tags", [])),
                    )
                    for page in self._call(functools.partial(list, pages), "ec2:DescribeInstances")
                    for reservation in page.get("Reservations", [])
                    for instance in reservation.get("Instances", [])
                }
                for instance_id in ids:  # gone from EC2 (terminated long ago): stays unknown
                    self._instances[(region, instance_id)] = found.get(instance_id)
        for position, item in enumerate(listed):
            device = item.device
            if device is None or not device.instance_id:
                continue
            known = self._instances.get((region, device.instance_id))
            if known is None:
                continue
            instance_type, tags = known
            filled = replace(
                device,
                instance_type=device.instance_type or instance_type,
                tags=tags if self.config.instance_tags else device.tags,
            )
            if filled != device or filled.tags != device.tags:
                listed[position] = replace(item, device=filled)

    # ---- reading

    def _batch(self, region: str, inventory: list[_Listed], lo: int, hi: int, period: int) -> SampleBatch:
        points = self._fetch(region, [x.series for x in inventory], lo, hi, period)
        numbered = [(i, x, x.device) for i, x in enumerate(inventory) if x.device is not None]
        gpus = [x for _, x, _ in numbered]
        table = pl.DataFrame(
            {
                "series": np.asarray([i for i, _, _ in numbered], dtype=np.int64),
                "device_id": [d.device_id for _, _, d in numbered],
                "source_metric": [x.series.metric for x in gpus],
                "rank": np.asarray([x.rank for x in gpus], dtype=np.int64),
            },
            schema={"series": pl.Int64, "device_id": pl.String, "source_metric": pl.String, "rank": pl.Int64},
        )
        joined = points.join(table, on="series", how="inner")
        # The agent's reading of a GPU wins over Container Insights' (both may report one GPU).
        ledger_metric = pl.col("source_metric").replace_strict(_LEDGER_METRIC, default=None)
        readings = (
            joined.with_columns(ledger_metric.alias("_metric"))
            .sort("rank", maintain_order=True)
            .unique(subset=["device_id", "_metric", "ts_ms"], keep="first")
        )
        samples = to_samples(readings.select("device_id", "ts_ms", "source_metric", "value"), _MAPPING)
        occupancy = self._occupancy(region, inventory, points, lo, hi, period)
        workloads: list[WorkloadInfo] = []
        if occupancy.height:
            occupancy = occupancy.with_columns((1.0 / pl.len().over("device_id", "ts_ms")).alias("share"))
            samples = (
                samples.drop("workload_key", "share")
                .join(occupancy, on=["device_id", "ts_ms"], how="left")
                .with_columns(pl.col("workload_key").fill_null(""), pl.col("share").fill_null(1.0))
                .select(samples.columns)
            )
            keys = set(occupancy["workload_key"].unique().to_list())
            refs = {x.container.workload_key: x.container for x in inventory if x.container is not None}
            workloads = [refs[key].workload() for key in sorted(keys)]
        seen = set(samples["device_id"].unique().to_list())
        devices: dict[str, DeviceInfo] = {}
        for item in sorted(gpus, key=lambda x: x.rank):  # the agent's fields first, gaps filled
            assert item.device is not None
            known = devices.setdefault(item.device.device_id, item.device)
            gaps = {f: getattr(item.device, f) for f in _FILLABLE if getattr(known, f) is None}
            devices[known.device_id] = replace(known, **{f: v for f, v in gaps.items() if v is not None})
        return SampleBatch(samples, [d for k, d in devices.items() if k in seen], workloads)

    def _occupancy(
        self, region: str, inventory: list[_Listed], points: pl.DataFrame, lo: int, hi: int, period: int
    ) -> pl.DataFrame:
        """Container readings with a datapoint, tied to their GPUs: ``device_id``, ``ts_ms``,
        ``workload_key`` (see :func:`connectors.cloudwatch_ci.attach`)."""
        refs = [(i, x.container) for i, x in enumerate(inventory) if x.container is not None]
        empty = pl.DataFrame(schema={"device_id": pl.String, "ts_ms": pl.Int64, "workload_key": pl.String})
        if not refs:
            return empty
        columns: dict[str, list[Any]] = {c: [getattr(r, c) for _, r in refs] for c in CONTAINER_COLS}
        table = pl.DataFrame(
            {"series": [i for i, _ in refs], **columns, "gpu_index": [r.gpu_index for _, r in refs],
             "workload_key": [r.workload_key for _, r in refs]},
            schema_overrides={"series": pl.Int64, "gpu_index": pl.Int64},
        )  # fmt: skip
        readings = (
            points.filter(pl.col("value").is_not_nan())
            .join(table, on="series", how="inner")
            .drop("series", "value")
            .unique()
        )
        if not readings.height:
            return empty
        clusters = sorted(set(readings["cluster"].to_list()))
        found = pl.concat([self._placements(region, c, lo - period, hi + period) for c in clusters])
        nodes = [x.device for x in inventory if x.device is not None and x.rank == 1]
        return attach(readings, found, nodes, period * 1000, self.attribution)

    def _placements(self, region: str, cluster: str, lo: int, hi: int) -> pl.DataFrame:
        """Where ``cluster``'s containers ran over ``[lo, hi)``: its ``ContainerGPU`` performance
        log events. A missing log group or a refused read leaves none (logged): the join then
        falls back to the sole-GPU rule."""
        if not self.config.performance_logs:
            return placements([], cluster)
        logs = self._client(region, "logs")
        group = log_group(cluster)
        pages = logs.get_paginator("filter_log_events").paginate(
            logGroupName=group,
            startTime=lo * 1000,
            endTime=hi * 1000,
            filterPattern=f'{{ $.Type = "{CONTAINER_GPU_TYPE}" }}',
        )
        try:
            events = [e for page in pages for e in page.get("events", [])]
        except ClientError as exc:
            code = error_code(exc)
            if code == "ResourceNotFoundException" or code in DENIED:
                log.warning("%s %s: %s on %s: container series are not joined to nodes through it",
                            SOURCE, region, code, group)  # fmt: skip
                self.attribution.log_problems[f"{group}: {code}"] += 1
                return placements([], cluster)
            raise self._mapped(exc, "logs:FilterLogEvents") from exc
        except BotoCoreError as exc:
            raise self._mapped(exc, "logs:FilterLogEvents") from exc
        return placements(events, cluster)

    def _fetch(self, region: str, series: list[_Series], lo: int, hi: int, period: int) -> pl.DataFrame:
        """Average datapoints of ``series`` at ``period`` over ``[lo, hi)`` (epoch seconds), each
        emitted as readings every ``period_s`` for the seconds it covers: columns ``series``,
        ``ts_ms``, ``value`` (see :func:`expand`).

        When ``period`` is longer than the agent's ``collection_interval_s`` a datapoint may
        cover only part of its period, so ``SampleCount`` is asked for beside ``Average`` (same
        call), one period more on each side so that where a partial period lies does not depend
        on the window asked for."""
        counted = period > self.config.collection_interval_s
        margin = period if counted else 0
        start = lo // period * period - margin
        end = _ceil(hi, period) + margin
        per_call = MAX_QUERIES // 2 if counted else MAX_QUERIES
        index: list[np.ndarray] = []
        stats: list[np.ndarray] = []
        stamps: list[Any] = []
        values: list[Any] = []
        for first in range(0, len(series), per_call):
            chunk = series[first : first + per_call]
            queries = [s.query(f"a{first + i}", period) for i, s in enumerate(chunk)]
            if counted:
                queries += [s.query(f"n{first + i}", period, "SampleCount") for i, s in enumerate(chunk)]
            for result in self._results(region, queries, start, end):
                ts = result.get("Timestamps", [])
                index.append(np.full(len(ts), int(result["Id"][1:]), dtype=np.int64))
                stats.append(np.full(len(ts), result["Id"][0] == "n", dtype=np.bool_))
                stamps.extend(ts)
                values.extend(result.get("Values", []))
        if not stamps:
            return pl.DataFrame(schema={"series": pl.Int64, "ts_ms": pl.Int64, "value": pl.Float64})
        points = pl.DataFrame(
            {
                "series": np.concatenate(index),
                "count": np.concatenate(stats),
                "ts_s": pl.Series(stamps, dtype=pl.Datetime("ms", "UTC")).dt.epoch("s"),
                "value": np.asarray(values, dtype=np.float64),
            }
        )
        averages = points.filter(~pl.col("count")).drop("count")
        if counted:
            counts = points.filter(pl.col("count")).select("series", "ts_s", pl.col("value").alias("n"))
            averages = averages.join(counts, on=["series", "ts_s"], how="left")
        else:
            averages = averages.with_columns(pl.lit(None, pl.Float64).alias("n"))
        return expand(averages, period, self.config.period_s, self.config.collection_interval_s, lo, hi)

    def _results(
        self, region: str, queries: list[dict[str, Any]], start: int, end: int
    ) -> Iterator[dict[str, Any]]:
        """Every ``MetricDataResult`` of ``queries`` over ``[start, end)``, following ``NextToken``."""
        cloudwatch = self._client(region, "cloudwatch")
        token: str | None = None
        while True:
            request: dict[str, Any] = {
                "MetricDataQueries": queries,
                "StartTime": dt.datetime.fromtimestamp(start, dt.UTC),
                "EndTime": dt.datetime.fromtimestamp(end, dt.UTC),
                "ScanBy": "TimestampAscending",
            }
            if token:
                request["NextToken"] = token
            page = self._call(
                functools.partial(cloudwatch.get_metric_data, **request), "cloudwatch:GetMetricData"
            )
            partial = False
            for result in page.get("MetricDataResults", []):
                partial |= self._check_status(result, region)
                yield result
            token = page.get("NextToken")
            if not token:
                if partial:
                    raise RetriableError(
                        f"{SOURCE} {region}: GetMetricData answered PartialData without a NextToken"
                    )
                return

    def _check_status(self, result: dict[str, Any], region: str) -> bool:
        """Raise on a failed result; True when it is ``PartialData``."""
        status = result.get("StatusCode", "Complete")
        messages = "; ".join(f"{m.get('Code')}: {m.get('Value')}" for m in result.get("Messages", []))[:300]
        if status == "Forbidden":
            raise permission_error(SOURCE, f"{region} GetMetricData result Forbidden {messages}", PERMISSIONS)
        if status == "InternalError":
            raise RetriableError(f"{SOURCE} {region}: GetMetricData result InternalError {messages}")
        return status == "PartialData"


@dataclass(frozen=True, slots=True)
class _Listed:
    """A series to read, the device it describes, and for a container series its workload key.
    ``rank``: 0 agent, 1 Container Insights node, 2 Container Insights container (attribution)."""

    series: _Series
    device: DeviceInfo | None  # None for a container series: its GPU is found per reading
    workload_key: str
    rank: int
    container: ContainerRef | None = None
