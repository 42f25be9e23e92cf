"""The samples contract: text columns may be String, Categorical or Enum, and validation treats
them alike (the same rows accepted, the same rejections counted and described)."""

from __future__ import annotations

import polars as pl
import pytest

from connectors.sdk import (
    SAMPLE_COLUMNS,
    SAMPLE_SCHEMA,
    SAMPLE_TEXT_COLUMNS,
    categorical_sample_schema,
    sample_dtype_ok,
)
from service.ledger.validate import validate_samples


def test_which_dtypes_keep_the_contract() -> None:
    assert SAMPLE_TEXT_COLUMNS == ("device_id", "metric", "workload_key")
    for column in SAMPLE_COLUMNS:
        assert sample_dtype_ok(column, SAMPLE_SCHEMA[column])
    for column in SAMPLE_TEXT_COLUMNS:
        assert sample_dtype_ok(column, pl.Categorical())
        assert sample_dtype_ok(column, pl.Enum(["a", "b"]))
        assert not sample_dtype_ok(column, pl.Int64())
    assert not sample_dtype_ok("ts_ms", pl.Categorical())
    assert not sample_dtype_ok("value", pl.Enum(["1"]))
    assert not sample_dtype_ok("ts_ms", pl.Float64())
    assert not sample_dtype_ok("nonsense", pl.String())
    schema = categorical_sample_schema()
    assert list(schema) == list(SAMPLE_COLUMNS)
    assert [c for c, t in schema.items() if t == pl.Categorical()] == list(SAMPLE_TEXT_COLUMNS)


ROWS = [
    ("A", 0, "gpu_util", 5.0, "w", 1.0),
    ("B", 0, "gpu_util", 500.0, "", 1.0),  # utilization outside 0–100 %
    ("A", 60_000, "bogus", 1.0, "", 1.0),  # unknown metric
    ("", 60_000, "power_w", 1.0, "", 1.0),  # missing device id
    (None, 60_000, "power_w", 1.0, "", 1.0),  # missing device id
    ("Z", 60_000, "power_w", 1.0, "", 1.0),  # not described
    ("A", 60_000, None, 1.0, None, 1.0),  # unknown metric
    ("A", 120_000, "power_w", -1.0, "w", 0.5),  # negative
    ("B", 120_000, "power_w", 250.0, None, None),
]


@pytest.mark.parametrize("kind", ["categorical", "enum"])
def test_validation_is_the_same_for_categorical_columns(kind: str) -> None:
    strings = pl.DataFrame(ROWS, schema=SAMPLE_SCHEMA, orient="row")
    if kind == "categorical":
        other = strings.with_columns(pl.col(SAMPLE_TEXT_COLUMNS).cast(pl.Categorical))
    else:  # categories in another order than the strings sort, with an unused one
        other = strings.with_columns(
            pl.col(c).cast(pl.Enum(["zz", *sorted(set(strings[c].drop_nulls()), reverse=True)]))
            for c in SAMPLE_TEXT_COLUMNS
        )
    want = validate_samples(strings, ["A", "B"])
    got = validate_samples(other, ["A", "B"])
    assert (want.read, want.rejected, want.accepted.height) == (9, 7, 2)
    assert (got.read, got.rejected) == (want.read, want.rejected)
    assert all(
        sample_dtype_ok(c, t) and t != pl.String()
        for c, t in got.accepted.schema.items()
        if c in SAMPLE_TEXT_COLUMNS
    )
    as_strings = got.accepted.with_columns(pl.col(SAMPLE_TEXT_COLUMNS).cast(pl.String))
    assert as_strings.rows() == want.accepted.rows()
    assert sorted(str(r["reason"]) for r in got.rejections) == sorted(
        str(r["reason"]) for r in want.rejections
    )
    assert sorted(str(r["reason"]) for r in want.rejections) == [
        "device not described by the connector (1 samples in this batch)",
        "missing device id (2 samples in this batch)",
        "missing device id (2 samples in this batch)",
        "negative reading (1 samples in this batch)",
        "unknown metric (2 samples in this batch)",
        "unknown metric (2 samples in this batch)",
        "utilization outside 0–100 % (1 samples in this batch)",
    ]
