"""Exporter series → one long frame → ledger samples: the columnar steps the Intel (XPU Manager) and
Huawei (npu-exporter) mappings share.

A mapping describes each series once (its device, the ledger key its field feeds, the factor to
the ledger's unit, whether it is a whole-device or a sub-device reading, how sub-device readings
add up, its workload); :func:`long_frame` lays every sample out with that description by
position (a gather, not a join), :func:`per_device` turns sub-device readings into one device
reading per time, :func:`fallback` fills a metric from a second counter where the first is
missing, and :func:`to_samples` gives the sample columns. No Python step per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from connectors.exporter_profile import Series
from connectors.sdk import DeviceInfo, SampleBatch, WorkloadInfo, categorical_sample_schema, empty_samples

#: how a metric's sub-device (tile) readings make the device's reading
HOW = ("mean", "sum", "max")


@dataclass(frozen=True, slots=True)
class SeriesMeta:
    """What one series stands for: ``key`` (a ledger metric or an internal key a mapping resolves
    later), ``scale`` to the ledger's unit, ``part`` ('' for the whole device, else the
    sub-device's id), ``how`` its sub-device readings combine."""

    device_id: str
    key: str
    scale: float
    part: str
    how: str
    workload_key: str


def long_frame(
    meta: Sequence[SeriesMeta], ts_parts: Sequence[np.ndarray], values: Sequence[np.ndarray]
) -> pl.DataFrame:
    """Every sample with its series' description: ``device_id, part, key, how, workload_key,
    ts_ms, value`` (value in the ledger's unit). Readings that are not finite or are negative
    (exporters write -1 for a failed read) are dropped: a gap, never a zero."""
    table = pl.DataFrame(
        {
            "device_id": [m.device_id for m in meta],
            "part": [m.part for m in meta],
            "key": [m.key for m in meta],
            "how": [m.how for m in meta],
            "workload_key": [m.workload_key for m in meta],
        }
    )
    sid = np.repeat(np.arange(len(meta), dtype=np.int64), [len(p) for p in ts_parts])
    scale = np.asarray([m.scale for m in meta], dtype=np.float64)[sid]
    with np.errstate(invalid="ignore", over="ignore"):
        value = np.concatenate(values).astype(np.float64) * scale
    keep = np.isfinite(value) & (value >= 0)
    return table[sid[keep]].with_columns(
        pl.Series("ts_ms", np.concatenate(ts_parts).astype(np.int64)[keep]), pl.Series("value", value[keep])
    )


def per_device(frame: pl.DataFrame) -> pl.DataFrame:
    """One reading per (device, time, key, workload): the whole device's own line where it has one
    then, else its sub-devices' readings combined by ``how`` (mean of ratios, sum of watts,
    joules and bytes, max of temperatures)."""
    at = ["device_id", "ts_ms", "key", "workload_key"]
    whole = frame.filter(pl.col("part") == "").group_by(at).agg(pl.col("value").mean())
    parts = frame.filter(pl.col("part") != "").join(whole.select(at), on=at, how="anti")
    how = pl.col("how").first()
    combined = parts.group_by(at).agg(
        pl.when(how == "sum")
        .then(pl.col("value").sum())
        .when(how == "max")
        .then(pl.col("value").max())
        .otherwise(pl.col("value").mean())
        .alias("value")
    )
    return pl.concat([whole, combined.select(whole.columns)])


def fallback(frame: pl.DataFrame, key: str, second: str) -> pl.DataFrame:
    """``key`` where a device has it at a time, else ``second`` renamed ``key``; other readings of
    ``second`` are dropped (it only ever stands in)."""
    at = ["device_id", "ts_ms", "workload_key"]
    first = frame.filter(pl.col("key") == key).select(at)
    stand_in = (
        frame.filter(pl.col("key") == second)
        .join(first, on=at, how="anti")
        .with_columns(pl.lit(key).alias("key"))
    )
    return pl.concat([frame.filter(pl.col("key") != second), stand_in.select(frame.columns)])


def to_samples(frame: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """The rows of ledger ``metrics`` as sample columns (Categorical text, share 1: these
    exporters name at most one workload per device at a time)."""
    columns = [pl.col(c).cast(t) for c, t in categorical_sample_schema().items()]
    return (
        frame.filter(pl.col("key").is_in(list(metrics)))
        .with_columns(pl.col("key").alias("metric"), pl.lit(1.0).alias("share"))
        .select(columns)
    )


@dataclass(slots=True)
class SeriesCollector:
    """The per-series step of a mapping: each series' description, its arrays (samples stay in
    arrays), the devices and workloads it names; :meth:`batch` makes the one columnar batch."""

    meta: list[SeriesMeta] = field(default_factory=list)
    ts_parts: list[np.ndarray] = field(default_factory=list)
    value_parts: list[np.ndarray] = field(default_factory=list)
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    workloads: dict[str, WorkloadInfo] = field(default_factory=dict)

    def add(self, s: Series, meta: SeriesMeta, device: DeviceInfo, work: WorkloadInfo | None) -> None:
        """Keep series ``s`` as ``meta`` describes it (a device's first description stands)."""
        self.devices.setdefault(meta.device_id, device)
        if work is not None:
            self.workloads[work.workload_key] = work
        self.meta.append(meta)
        self.ts_parts.append(np.asarray(s.ts_ms, dtype=np.int64))
        self.value_parts.append(np.asarray(s.values, dtype=np.float64))

    def batch(self, metrics: Sequence[str], resolve: Callable[[pl.DataFrame], pl.DataFrame]) -> SampleBatch:
        """The samples of ``metrics``: the long frame made one reading per device, then ``resolve``
        (the mapping's fallbacks); only devices with a sample are listed."""
        if not self.meta:
            return SampleBatch(empty_samples(), [])
        frame = per_device(long_frame(self.meta, self.ts_parts, self.value_parts))
        samples = to_samples(resolve(frame), metrics)
        used = set(samples["device_id"].unique().to_list())
        devices = [d for k, d in self.devices.items() if k in used]
        return SampleBatch(samples, devices, list(self.workloads.values()))
