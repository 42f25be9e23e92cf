"""The metrics half of the connector contract: what a metrics connector yields and its Protocol.

A metrics connector is one class that turns one source into columnar batches for a window it is
asked for. It keeps no cursor: the ingestor owns watermarks, idempotency and retries (docs/design.md §7).

Polars is imported only when a frame is needed (``SAMPLE_SCHEMA``, ``SampleBatch.samples``): the
node agent imports this module too and never needs a frame, and Polars alone is ~36 MB of the
agent's 100 MB RSS budget (issue 3, measured in BENCHMARKS.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import polars as pl

    from connectors.sdk.config import ConnectorConfig  # pydantic: the node agent never loads it

#: Columns of ``SampleBatch.samples``:
#: ``device_id``; ``ts_ms`` reading time, ms since the Unix epoch (UTC); ``metric`` a
#: connectors.sdk.units.Metric value; ``value`` in the metric's unit (percent 0–100, W, J
#: counter, bytes, °C); ``workload_key`` '' when nothing occupied the device at ts; ``share`` this
#: workload's share of the device at ts (time-slicing), 1.0 alone.
SAMPLE_COLUMNS: tuple[str, ...] = ("device_id", "ts_ms", "metric", "value", "workload_key", "share")
#: The text columns. ``SAMPLE_SCHEMA`` lists them as String; a connector may hand any of them over
#: as Categorical or Enum instead, and the ledger rows are the same (``sample_dtype_ok``). A
#: connector that knows a value once per series (a Prometheus series' labels) builds the column
#: from per-series codes, so neither it nor normalization hashes a string per sample (issue 13).
SAMPLE_TEXT_COLUMNS: tuple[str, ...] = ("device_id", "metric", "workload_key")


def _sample_schema() -> dict[str, pl.DataType]:
    import polars as pl

    types = (pl.String(), pl.Int64(), pl.String(), pl.Float64(), pl.String(), pl.Float64())
    return dict(zip(SAMPLE_COLUMNS, types, strict=True))


def categorical_sample_schema() -> dict[str, pl.DataType]:
    """``SAMPLE_SCHEMA`` with Categorical text columns (``SAMPLE_TEXT_COLUMNS``)."""
    import polars as pl

    schema = _sample_schema()
    return {c: pl.Categorical() if c in SAMPLE_TEXT_COLUMNS else t for c, t in schema.items()}


def sample_dtype_ok(column: str, dtype: pl.DataType) -> bool:
    """Whether a samples column ``column`` of type ``dtype`` keeps the contract: the type in
    ``SAMPLE_SCHEMA``, or Categorical/Enum for a text column."""
    import polars as pl

    if column in SAMPLE_TEXT_COLUMNS and isinstance(dtype, pl.Categorical | pl.Enum):
        return True
    return column in SAMPLE_COLUMNS and dtype == _sample_schema()[column]


def __getattr__(name: str) -> Any:
    # ``SAMPLE_SCHEMA`` (column → Polars dtype) is built on first use, so importing this module
    # does not import Polars (PEP 562).
    if name == "SAMPLE_SCHEMA":
        schema = _sample_schema()
        globals()["SAMPLE_SCHEMA"] = schema
        return schema
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A GPU or MIG instance as a source describes it (see service.models.Device)."""

    device_id: str
    environment: Literal["onprem", "aws", "gcp", "azure"]
    provider: str | None = None
    account: str | None = None
    region: str | None = None
    cluster: str | None = None
    node: str | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    gpu_model: str | None = None
    gpu_index: int | None = None
    parent_device_id: str | None = None
    mig_profile: str | None = None
    gpu_fraction: float = 1.0
    tdp_w: float | None = None
    #: Who made it; None: the service derives it from ``gpu_model`` (connectors.sdk.vendors)
    vendor: Literal["nvidia", "amd", "intel", "huawei"] | None = None
    #: What the platform says about the machine, as attribution facts (``[[attribution]]`` rules
    #: read them, docs/attribution.md): cloud instance tags/labels as ``cloud.tag:<key>``,
    #: Kubernetes node labels as ``k8s.node_label:<key>``. Not part of the hash.
    tags: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """What occupied a device: a pod/container, a Docker container, a job, a process, a VM."""

    workload_key: str
    project: str | None = None
    team: str | None = None
    user_name: str | None = None
    namespace: str | None = None
    workload: str | None = None
    #: What the source knows about the workload, as attribution facts keyed by source key
    #: (docs/attribution.md): ``k8s.namespace``, ``k8s.pod``, ``k8s.pod_label:<key>``,
    #: ``k8s.namespace_label:<key>``, ``docker.label:<key>``, ``slurm.account``,
    #: ``slurm.partition``, ``slurm.user``, ``slurm.job``, ``cloud.tag:<key>``. ``[[attribution]]``
    #: rules map them to project, team, user; project/team/user above are what the source itself
    #: named (its own labels or the node agent's rules). Not part of the hash.
    facts: Mapping[str, str] = field(default_factory=dict, hash=False)


class SampleBatch:
    """Samples of many devices as one columnar frame (``SAMPLE_SCHEMA``) plus the devices and
    workloads they name. Several rows with the same device, metric and ts but different workloads
    are a time-sliced device: their ``share`` values say how it was split and should add to 1.

    Built from a Polars frame (``SampleBatch(frame, devices)``) or from plain column lists
    (``SampleBatch.from_columns``, what the node agent does: a tick is a few dozen readings and the
    agent must stay small); each form is converted to the other only when asked for.
    """

    __slots__ = ("_frame", "_columns", "devices", "workloads")

    def __init__(
        self,
        samples: pl.DataFrame,
        devices: list[DeviceInfo],
        workloads: list[WorkloadInfo] | None = None,
    ) -> None:
        self._frame: pl.DataFrame | None = samples
        self._columns: dict[str, list[Any]] | None = None
        self.devices = devices
        self.workloads = workloads if workloads is not None else []

    @classmethod
    def from_columns(
        cls,
        columns: dict[str, list[Any]],
        devices: list[DeviceInfo],
        workloads: list[WorkloadInfo] | None = None,
    ) -> SampleBatch:
        """A batch of ``SAMPLE_COLUMNS`` lists of equal length (no Polars needed)."""
        missing = [c for c in SAMPLE_COLUMNS if c not in columns]
        if missing:
            raise ValueError(f"sample columns missing: {', '.join(missing)}")
        batch = cls.__new__(cls)
        batch._frame, batch._columns = None, {c: columns[c] for c in SAMPLE_COLUMNS}
        batch.devices, batch.workloads = devices, workloads if workloads is not None else []
        return batch

    @property
    def samples(self) -> pl.DataFrame:
        if self._frame is None:
            import polars as pl

            self._frame = pl.DataFrame(self._columns, schema=_sample_schema())
        return self._frame

    @samples.setter
    def samples(self, frame: pl.DataFrame) -> None:
        self._frame, self._columns = frame, None

    @property
    def columns(self) -> dict[str, list[Any]]:
        """The samples as ``SAMPLE_COLUMNS`` lists."""
        if self._columns is None:
            assert self._frame is not None
            self._columns = self._frame.select(SAMPLE_COLUMNS).to_dict(as_series=False)
        return self._columns

    def __repr__(self) -> str:
        rows = self._frame.height if self._frame is not None else len(self.columns["ts_ms"])
        return f"SampleBatch({rows} samples, {len(self.devices)} devices, {len(self.workloads)} workloads)"


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a metrics source samples, which fixes how the ledger reads it (docs/design.md §3.1).

    ``max_gap_s``: a gauge reading stands for at most this long (default 2 × period).
    ``presence_gap_s``: a silence up to this long keeps the device present (unobserved); longer
    means the device was gone. The ingestor reads this much before and after every window.
    """

    period_s: float
    max_gap_s: float
    presence_gap_s: float = 3600.0

    @classmethod
    def every(cls, period_s: float, presence_gap_s: float = 3600.0) -> Sampling:
        return cls(period_s=period_s, max_gap_s=2 * period_s, presence_gap_s=presence_gap_s)


@runtime_checkable
class MetricsConnector(Protocol):
    """A source of GPU metric samples."""

    kind: ClassVar[Literal["metrics"]]
    config_model: ClassVar[type[ConnectorConfig]]
    sampling: Sampling

    def discover(self) -> list[DeviceInfo]:
        """The devices this source knows of now."""
        ...

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Samples with ``start <= ts < end`` (UTC), in batches of any size, in any order."""
        ...


def devices_in(batches: Iterable[SampleBatch]) -> list[DeviceInfo]:
    """The devices a run of batches describes (a later description of a device wins): what a
    connector's ``discover()`` returns after collecting a recent window."""
    devices: dict[str, DeviceInfo] = {}
    for batch in batches:
        devices.update((d.device_id, d) for d in batch.devices)
    return list(devices.values())


def empty_samples() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(schema=_sample_schema())
