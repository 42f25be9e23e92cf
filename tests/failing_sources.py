"""A metrics connector and a billing source that deliver some good data, then fail one way.

``failure`` (a key of ``FAILURES``) names the exception; both raise the same one, so a test can
check that every runner records a failure the same way whichever ingestor it came through.
Registered through in-test entry points (``failing_registry``), so `gpu-ledger ingest` builds them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from typing import ClassVar, Literal

import polars as pl

from connectors.registry import ENTRY_POINT_GROUP, Registry
from connectors.sdk import (
    MONEY,
    SAMPLE_SCHEMA,
    BillingBatch,
    BillingConfig,
    ConfigurationError,
    ConnectorConfig,
    ConnectorError,
    DeviceInfo,
    FatalSourceError,
    RefusedRow,
    RetriableError,
    SampleBatch,
    Sampling,
    conform,
)

DAY0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
AUG = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def _not_json() -> Exception:
    try:
        json.loads("<html>502 Bad Gateway</html>")
    except json.JSONDecodeError as error:
        return error
    raise AssertionError("unreachable")


#: One exception per kind of failure (and per way of raising it: a connector's own class, or an
#: unwrapped library error).
FAILURES: dict[str, Callable[[], Exception]] = {
    "configuration": lambda: ConfigurationError("project 'gpu-prod' has no billing export table"),
    "unreachable": lambda: RetriableError("HTTP 503 from the source"),
    "refused-socket": lambda: ConnectionRefusedError(111, "Connection refused"),
    "access-denied": lambda: FatalSourceError("HTTP 403: AccessDenied"),
    "bad-data": lambda: ConnectorError("series 'DCGM_FI_DEV_POWER_USAGE' has no values"),
    "not-json": _not_json,
    "bug": lambda: KeyError("gpu_uuid"),
}


class FailingConfig(ConnectorConfig):
    failure: str


class FailingMetrics:
    """Day one of a window: 62 samples (60 good, 2 refused); the next day's read fails."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = FailingConfig
    sampling = Sampling.every(60.0)

    def __init__(self, config: FailingConfig) -> None:
        self.failure = FAILURES[config.failure]
        self.calls = 0

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("GPU-a", "onprem"), DeviceInfo("GPU-b", "onprem")]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        self.calls += 1
        if self.calls > 1:
            raise self.failure()
        t0 = int(DAY0.timestamp() * 1000)
        rows = [("GPU-a", t0 + i * 60_000, "gpu_util", 50.0, "", 1.0) for i in range(60)]
        rows += [("GPU-b", t0, "gpu_util", 250.0, "", 1.0), ("GPU-x", t0, "gpu_util", 5.0, "", 1.0)]
        yield SampleBatch(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), self.discover())


class FailingBillingConfig(BillingConfig, FailingConfig):
    path: str = "unused"


class FailingBilling:
    """August's file (2 lines accepted, 1 refused) is complete; September's fails mid-way."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[ConnectorConfig]] = FailingBillingConfig

    def __init__(self, config: FailingBillingConfig) -> None:
        self.failure = FAILURES[config.failure]

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        refused = [RefusedRow("aug.csv", 4, "billed_cost", "not a number")]
        yield _batch("aug.csv", AUG, SEP, ["a1", "a2"], refused)
        yield _batch("sep.csv", SEP, OCT, ["s1"])
        raise self.failure()


def _batch(
    name: str, start: dt.datetime, end: dt.datetime, keys: list[str], refused: list[RefusedRow] | None = None
) -> BillingBatch:
    frame = pl.DataFrame(
        {
            "source_file": name,
            "line_no": range(2, len(keys) + 2),
            "line_key": keys,
            "provider": "aws",
            "charge_start": start,
            "charge_end": start + dt.timedelta(days=1),
            "charge_category": "Usage",
            "billed_cost": "10",
            "effective_cost": "10",
            "currency": "USD",
        }
    ).with_columns(pl.col("billed_cost", "effective_cost").cast(MONEY))
    refused = refused or []
    return BillingBatch(
        lines=conform(frame),
        source_file=name,
        refused=refused,
        read=len(keys) + len(refused),
        period_start=start,
        period_end=end,
    )


def failing_registry() -> Registry:
    return Registry(
        [
            EntryPoint(
                name="failing_metrics", value="failing_sources:FailingMetrics", group=ENTRY_POINT_GROUP
            ),
            EntryPoint(
                name="failing_billing", value="failing_sources:FailingBilling", group=ENTRY_POINT_GROUP
            ),
        ],
        disabled=(),
    )
