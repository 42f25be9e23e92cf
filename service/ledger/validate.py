"""Sample validation: bad readings are counted and quarantined with their reason; good ones go on.

Checks are column expressions over the whole batch. Every rejected sample is counted (so
``read = accepted + rejected``); a few examples per reason are kept in the ``rejection`` table,
because a broken exporter can send millions of identical bad readings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from connectors.base import SAMPLE_SCHEMA
from connectors.sdk import sample_dtype_ok
from service.metrics_catalog import UTIL_METRICS, Metric

EXAMPLES_PER_REASON = 20


@dataclass(frozen=True, slots=True)
class Checked:
    read: int
    accepted: pl.DataFrame
    rejected: int
    rejections: list[dict[str, object]] = field(default_factory=list)


def _reasons(known_devices: list[str]) -> list[tuple[str, str, pl.Expr]]:
    """(field, reason, expression true for a bad row), first match wins."""
    value, metric = pl.col("value"), pl.col("metric")
    util = metric.is_in([m.value for m in UTIL_METRICS])
    return [
        ("device_id", "missing device id", pl.col("device_id").is_null() | (pl.col("device_id") == "")),
        ("device_id", "device not described by the connector", ~pl.col("device_id").is_in(known_devices)),
        ("ts_ms", "missing timestamp", pl.col("ts_ms").is_null()),
        ("metric", "unknown metric", metric.is_null() | ~metric.is_in([m.value for m in Metric])),
        ("value", "missing or NaN value", value.is_null() | value.is_nan()),
        ("value", "utilization outside 0–100 %", util & ((value < 0) | (value > 100))),
        ("value", "negative reading", ~util & (value < 0)),
        (
            "share",
            "share outside 0–1",
            pl.col("share").is_not_null() & ((pl.col("share") < 0) | (pl.col("share") > 1)),
        ),
    ]


def validate_samples(samples: pl.DataFrame, known_devices: Iterable[str]) -> Checked:
    """Split a batch into accepted samples and counted, described rejections."""
    if samples.is_empty():
        return Checked(read=0, accepted=pl.DataFrame(schema=SAMPLE_SCHEMA), rejected=0)
    # Columns that keep the contract stay as they are: Categorical/Enum text columns too, whose
    # codes normalization reads without hashing a string per sample (issue 13).
    samples = samples.select(
        pl.col(c) if c in samples.schema and sample_dtype_ok(c, samples.schema[c]) else pl.col(c).cast(t)
        for c, t in SAMPLE_SCHEMA.items()
    )
    reasons = _reasons(sorted(set(known_devices)))
    code = pl.lit(None, dtype=pl.Int64)
    for index, (_, _, bad) in reversed(list(enumerate(reasons))):
        code = pl.when(bad.fill_null(True)).then(pl.lit(index)).otherwise(code)
    tagged = samples.with_columns(code.alias("_reason"))
    accepted = tagged.filter(pl.col("_reason").is_null()).drop("_reason")
    refused = tagged.filter(pl.col("_reason").is_not_null())
    rejections: list[dict[str, object]] = []
    if not refused.is_empty():
        counts = dict(refused.group_by("_reason").len().iter_rows())
        examples = refused.group_by("_reason").head(EXAMPLES_PER_REASON)
        for row in examples.iter_rows(named=True):
            index = row.pop("_reason")
            field_name, reason, _ = reasons[index]
            rejections.append(
                {
                    "field": field_name,
                    "reason": f"{reason} ({counts[index]} samples in this batch)",
                    "raw": json.dumps(row, default=str),
                }
            )
    return Checked(read=samples.height, accepted=accepted, rejected=refused.height, rejections=rejections)
