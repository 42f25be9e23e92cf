"""The contract between GPU Ledger and its connectors.

A connector is one class that turns one source into columnar batches for a window it is asked
for. It keeps no cursor: the ingestor owns watermarks, idempotency and retries (STYLE.md).
Built-ins and third-party connectors are found by name through the ``gpu_ledger.connectors``
entry-point group; the entry point names the class.

Polars is imported only when a frame is needed (``SAMPLE_SCHEMA``, ``SampleBatch.samples``): the
node agent imports this module too and never needs a frame, and Polars alone is ~36 MB of the
agent's 100 MB RSS budget (issue 3, measured in BENCHMARKS.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import polars as pl

#: Columns of ``SampleBatch.samples``:
#: ``device_id``; ``ts_ms`` reading time, ms since the Unix epoch (UTC); ``metric`` a
#: service.metrics_catalog.Metric value; ``value`` in the metric's unit (percent 0–100, W, J
#: counter, bytes, °C); ``workload_key`` '' when nothing occupied the device at ts; ``share`` this
#: workload's share of the device at ts (time-slicing), 1.0 alone.
SAMPLE_COLUMNS: tuple[str, ...] = ("device_id", "ts_ms", "metric", "value", "workload_key", "share")


def _sample_schema() -> dict[str, pl.DataType]:
    import polars as pl

    types = (pl.String(), pl.Int64(), pl.String(), pl.Float64(), pl.String(), pl.Float64())
    return dict(zip(SAMPLE_COLUMNS, types, strict=True))


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


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """What occupied a device: a pod/container, a Docker container, a job, a process, a VM."""

    workload_key: str
    project: str | None = None
    team: str | None = None
    user_name: str | None = None
    namespace: str | None = None
    workload: str | None = None


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
        rows = self._frame.height if self._frame is not None else len(self._columns["ts_ms"])  # type: ignore[index]
        return f"SampleBatch({rows} samples, {len(self.devices)} devices, {len(self.workloads)} workloads)"


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a metrics source samples, which fixes how the ledger reads it (DESIGN §3.1).

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


class ConnectorStatus(StrEnum):
    """Connector health, as the `connectors` query reports it, and what the operator should do."""

    NEVER_RUN = "NEVER_RUN"  # configured, not run yet: wait for the scheduler or run `gpu-ledger ingest`
    RUNNING = "RUNNING"  # a window is being ingested now
    OK = "OK"  # last run succeeded; the watermark says how far data is in
    MISSING_DATA = (
        "MISSING_DATA"  # the source answered but had nothing for the window (new exports lag ~48 h)
    )
    INVALID_CONFIGURATION = (
        "INVALID_CONFIGURATION"  # fix the [[connectors]] entry; it will not run until then
    )
    FAILED_CONNECTION = "FAILED_CONNECTION"  # network/auth/5xx: check reachability and credentials; retried
    PARSE_ERROR = "PARSE_ERROR"  # the source sent data we could not read; see last_error and rejections
    DISABLED = "DISABLED"  # `enabled = false` in the config
    # the process running the last run died mid-run (killed, crashed); what it committed stays and
    # the watermark did not move: the next run reads the window again (nothing to do)
    ABORTED = "ABORTED"


class ConnectorError(Exception):
    """Base of the errors a connector raises; the subclass tells the runner what to do next."""

    status: ClassVar[ConnectorStatus] = ConnectorStatus.PARSE_ERROR


class ConfigurationError(ConnectorError):
    """Bad configuration: fail at start, never retry."""

    status = ConnectorStatus.INVALID_CONFIGURATION


class RetriableError(ConnectorError):
    """Throttling, 5xx, timeouts: back off and try again."""

    status = ConnectorStatus.FAILED_CONNECTION


class FatalSourceError(ConnectorError):
    """Authentication or another 4xx: stop this source until someone looks."""

    status = ConnectorStatus.FAILED_CONNECTION


class ConnectorConfig(BaseModel):
    """Keys every ``[[connectors]]`` table has; each type extends it with its own keys.

    Unknown keys are rejected (``extra='forbid'``) so a typo is an error that names the key.
    Secrets are ``pydantic.SecretStr`` fields: masked in repr and logs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    enabled: bool = True
    interval_s: float = 300.0
    backfill_days: float = 1.0


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


@runtime_checkable
class BillingConnector(Protocol):
    """A source of billing line items (the billing issue fills this in)."""

    kind: ClassVar[Literal["billing"]]
    config_model: ClassVar[type[ConnectorConfig]]

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[Any]:
        """Normalized billing lines whose usage overlaps ``[start, end)``."""
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


def close_connector(connector: object) -> None:
    """Release what a connector holds (an HTTP client, a socket), for connectors that hold any.

    The Protocols don't require ``close()``: a connector that owns a client offers it, and the
    runner (CLI, scheduler) calls this when it is done with the instance.
    """
    close = getattr(connector, "close", None)
    if callable(close):
        close()
