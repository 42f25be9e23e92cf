"""What the cloud metrics connectors (``cloudwatch``, ``gcp_monitoring``, ``azure_monitor``) share.

* **Mapping tables.** Each connector maps its source metric names to ledger metrics with a
  :class:`MetricSpec` table (unit conversion included) and turns a long frame of readings into
  ``SAMPLE_SCHEMA`` with :func:`to_samples`, columnar.
* **Period aggregates.** A cloud datapoint is already an aggregate over its period (CloudWatch
  ``Period=60`` Average, Cloud Monitoring ``ALIGN_MEAN`` over 60 s, a Log Analytics 1-minute row):
  docs/design.md §3.1 says it stands for ``[t, t + period)`` where ``t`` is the period's *start*. So its
  :func:`aggregate_sampling` has ``max_gap = period`` (not 2 × period as for a gauge), and a
  connector whose source stamps the period's *end* (Cloud Monitoring) moves the stamp back by one
  period before it hands the reading over.
* **Settings every cloud connector has** (:class:`CloudMetricsConfig`): retries, timeouts,
  presence gap, the period.
* **Errors with the operator's next step** (:func:`auth_error`, :func:`permission_error`).

Device ids join billing (docs/design.md §4, docs/formats.md §7): ``DeviceInfo.instance_id`` is the id the
bill's resource column carries — the EC2 instance id, the GCE numeric instance id, the Azure
resource id in lower case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl
from pydantic import Field

from connectors.sdk import SAMPLE_SCHEMA, ConnectorConfig, FatalSourceError, Metric, Sampling

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """Where a source metric goes in the ledger: ``value_in_ledger_unit = raw × scale``.

    ``divide`` says to divide by ``scale`` instead: exact where multiplying by an inexact
    reciprocal is not (1e-3 is not a binary fraction).
    """

    metric: Metric
    scale: float = 1.0
    divide: bool = False


def to_samples(readings: pl.DataFrame, mapping: Mapping[str, MetricSpec]) -> pl.DataFrame:
    """Long readings → ``SAMPLE_SCHEMA`` samples.

    ``readings`` has columns ``device_id``, ``ts_ms``, ``source_metric`` (a key of ``mapping``),
    ``value`` (raw unit) and optionally ``workload_key`` (default ``''``) and ``share`` (default
    1.0). Metrics the table does not name and NaN/null values are dropped.
    """
    if readings.is_empty():
        return pl.DataFrame(schema=SAMPLE_SCHEMA)
    table = pl.DataFrame(
        {
            "source_metric": list(mapping),
            "metric": [s.metric.value for s in mapping.values()],
            "_scale": [s.scale for s in mapping.values()],
            "_divide": [s.divide for s in mapping.values()],
        },
        schema={"source_metric": pl.String, "metric": pl.String, "_scale": pl.Float64, "_divide": pl.Boolean},
    )
    frame = readings
    if "workload_key" not in frame.columns:
        frame = frame.with_columns(pl.lit("").alias("workload_key"))
    if "share" not in frame.columns:
        frame = frame.with_columns(pl.lit(1.0).alias("share"))
    raw = pl.col("value").cast(pl.Float64)
    return (
        frame.join(table, on="source_metric", how="inner")
        .with_columns(
            pl.when(pl.col("_divide"))
            .then(raw / pl.col("_scale"))
            .otherwise(raw * pl.col("_scale"))
            .alias("value")
        )
        .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
        .select([pl.col(c).cast(t) for c, t in SAMPLE_SCHEMA.items()])
    )


def aggregate_sampling(period_s: float, presence_gap_s: float) -> Sampling:
    """Sampling of a source whose readings are aggregates over ``[t, t + period_s)``."""
    return Sampling(period_s=period_s, max_gap_s=period_s, presence_gap_s=presence_gap_s)


class CloudMetricsConfig(ConnectorConfig):
    """Keys every cloud metrics connector has.

    * ``period_s``: the aggregation period asked of the source (seconds, default 60). Data older
      than the source keeps at that resolution is asked for at the coarsest period it keeps
      (CloudWatch: 1-minute data 15 days, 5-minute 63 days, 1-hour 455 days).
    * ``max_retries``: tries after the first on throttling, 5xx and timeouts, with exponential
      backoff from ``backoff_s``; ``timeout_s``: per request.
    * ``presence_gap_s``: a silence up to this long keeps a GPU present but unobserved.
    """

    period_s: int = Field(60, ge=1, le=86_400)
    max_retries: int = Field(5, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0)
    timeout_s: float = Field(60.0, gt=0)
    presence_gap_s: float = Field(3600.0, gt=0)


def auth_error(source: str, detail: str, next_step: str) -> FatalSourceError:
    """Credentials missing, expired or refused: a fatal error saying what to fix."""
    return FatalSourceError(f"{source}: authentication failed ({detail}). Next step: {next_step}")


def permission_error(source: str, detail: str, permission: str) -> FatalSourceError:
    """Authenticated but not allowed: a fatal error naming the permission to grant."""
    return FatalSourceError(
        f"{source}: permission denied ({detail}). Next step: grant the connector's identity {permission}"
    )
