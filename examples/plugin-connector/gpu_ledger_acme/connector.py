"""``acme_csv``: GPU readings from the CSV files of a (fictional) accelerator tool, ``acme-smi``.

A metrics connector is one class (the SDK's ``MetricsConnector`` Protocol): a ``config_model``, a
``sampling`` that says how often the source reads, ``discover()`` and ``collect(start, end)``. It
keeps no cursor — the service owns watermarks, retries and idempotency — and imports nothing but
``connectors.sdk`` (and Polars, which gpu-ledger brings).

The file, one reading per GPU per minute::

    timestamp,gpu_uuid,gpu_model,host,busy_pct,board_power_w,job,project
    2026-11-30T10:00:00Z,ACME-0001,ACME X1,node-a,97.5,410.0,train-42,vision

``busy_pct`` is "% of time a kernel ran" (the ledger's ``gpu_util``); ``job`` is empty when the GPU
was free. A row that cannot be read fails the collect with its line and column: the ledger's own
validation quarantines readings that are out of range (a busy_pct of 130).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl

from connectors.sdk import (
    ConfigurationError,
    ConnectorConfig,
    ConnectorError,
    DeviceInfo,
    Metric,
    SampleBatch,
    Sampling,
    WorkloadInfo,
    to_ms,
)

COLUMNS = {
    "timestamp": pl.String,
    "gpu_uuid": pl.String,
    "gpu_model": pl.String,
    "host": pl.String,
    "busy_pct": pl.Float64,
    "board_power_w": pl.Float64,
    "job": pl.String,
    "project": pl.String,
}
#: The file's value columns and the ledger metrics they are.
METRICS = {"busy_pct": Metric.GPU_UTIL, "board_power_w": Metric.POWER_W}


class AcmeCsvConfig(ConnectorConfig):
    """``[[connectors]] type = "acme_csv"``: ``path`` the CSV file, ``period_s`` its reading period."""

    type: Literal["acme_csv"] = "acme_csv"
    path: str
    period_s: float = 60.0


class AcmeCsvConnector:
    """GPU readings of an ``acme-smi`` CSV file (module docstring)."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = AcmeCsvConfig

    def __init__(self, config: AcmeCsvConfig) -> None:
        self.config = config
        self.sampling = Sampling.every(config.period_s)

    def discover(self) -> list[DeviceInfo]:
        return _devices(self._read())

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        rows = self._read().filter(pl.col("ts_ms").is_between(to_ms(start), to_ms(end), closed="left"))
        if rows.is_empty():
            return
        readings = rows.unpivot(
            on=list(METRICS), index=["gpu_uuid", "ts_ms", "job"], variable_name="column", value_name="value"
        )
        samples = readings.select(
            pl.col("gpu_uuid").alias("device_id"),
            "ts_ms",
            pl.col("column").replace_strict({c: m.value for c, m in METRICS.items()}).alias("metric"),
            "value",
            pl.when(pl.col("job") != "")
            .then(pl.format("acme:{}", "job"))
            .otherwise(pl.lit(""))
            .alias("workload_key"),
            pl.lit(1.0).alias("share"),
        ).drop_nulls("value")
        jobs = rows.filter(pl.col("job") != "").unique("job", keep="last", maintain_order=True)
        workloads = [
            WorkloadInfo(f"acme:{job}", project=project or None, workload=job, facts={"ext.acme.job": job})
            for job, project in jobs.select("job", "project").iter_rows()
        ]
        yield SampleBatch(samples, _devices(rows), workloads)

    def _read(self) -> pl.DataFrame:
        path = Path(self.config.path)
        try:
            frame = pl.read_csv(path, schema=COLUMNS, has_header=True)
        except FileNotFoundError:
            raise ConfigurationError(f"{path}: no such file") from None
        except pl.exceptions.PolarsError as exc:
            raise ConnectorError(f"{path}: not an acme-smi CSV ({str(exc).splitlines()[0]})") from None
        ts = pl.col("timestamp").str.to_datetime("%Y-%m-%dT%H:%M:%S%#z", time_unit="ms", strict=False)
        frame = frame.with_columns(ts.dt.epoch("ms").alias("ts_ms"), pl.col("job", "project").fill_null(""))
        bad = frame.with_row_index("line", offset=2).filter(
            pl.col("ts_ms").is_null() | pl.col("gpu_uuid").is_null()
        )
        if not bad.is_empty():
            line, text = bad.select("line", "timestamp").row(0)
            raise ConnectorError(f"{path}, line {line}, column timestamp/gpu_uuid: cannot read {text!r}")
        return frame


def _devices(rows: pl.DataFrame) -> list[DeviceInfo]:
    gpus = rows.unique("gpu_uuid", keep="last", maintain_order=True).select("gpu_uuid", "gpu_model", "host")
    return [
        DeviceInfo(device_id=uuid, environment="onprem", node=host, gpu_model=model)
        for uuid, model, host in gpus.iter_rows()
    ]
