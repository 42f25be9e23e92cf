"""Properties of connectors.exporter_map against a plain model: one sample per device, time, metric
and workload; where several fields give one metric the lowest rank reported wins; the shares of a
reading add up to 1; units scale exactly as the field says."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.exporter_map import ExporterLabels, FieldSpec, map_series, pod_or_job
from connectors.exporter_profile import Series, Stamp
from connectors.sdk import DeviceInfo

FIELDS = {
    "util": FieldSpec("gpu_util"),
    "power_a": FieldSpec("power_w", rank=0),
    "power_b": FieldSpec("power_w", rank=1),
    "energy_uj": FieldSpec("energy_j", -1_000_000.0),
    "vram_mb": FieldSpec("mem_used_b", 1024.0 * 1024.0),
}
SPEC = ExporterLabels(
    fields=FIELDS,
    device=lambda labels, stamp: DeviceInfo(labels["dev"], "onprem"),
    workload=pod_or_job,
)

readings = st.lists(
    st.tuples(
        st.sampled_from(["d1", "d2"]),
        st.sampled_from(sorted(FIELDS)),
        st.sampled_from(["", "p1", "p2"]),  # the pod holding the device on that series
        st.integers(0, 3),  # reading time (s)
        st.floats(0, 1e12, allow_nan=False),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(readings)
def test_one_sample_per_key_lowest_rank_wins_and_shares_add_up(
    rows: list[tuple[str, str, str, int, float]],
) -> None:
    # one series per (device, field, pod); a time repeated on a series keeps its first value
    by_series: dict[tuple[str, str, str], dict[int, float]] = {}
    for dev, field, pod, t, v in rows:
        by_series.setdefault((dev, field, pod), {}).setdefault(t, v)
    series = [
        Series(field, {"dev": dev, "pod": pod, "namespace": "ns" if pod else ""},
               np.array([t * 1000 for t in sorted(vals)], np.int64),
               np.array([vals[t] for t in sorted(vals)], np.float64))
        for (dev, field, pod), vals in by_series.items()
    ]  # fmt: skip
    batch = map_series(series, Stamp(exporter_pod_pattern=""), SPEC)
    got = batch.samples.with_columns(pl.col(pl.Categorical).cast(pl.String))
    keys = ["device_id", "ts_ms", "metric", "workload_key"]
    assert got.select(keys).is_duplicated().sum() == 0
    # the plain model: per (device, time, pod, metric) the lowest-rank field's value (max of dupes)
    model: dict[tuple[str, int, str, str], tuple[int, float]] = {}
    for (dev, field, pod), vals in by_series.items():
        spec = FIELDS[field]
        for t, v in vals.items():
            value = v / 1e6 if spec.scale < 0 else v * spec.scale
            key = (dev, t * 1000, spec.metric, f"k8s:ns/{pod}/" if pod else "")
            old = model.get(key)
            if old is None or spec.rank < old[0] or (spec.rank == old[0] and value > old[1]):
                model[key] = (spec.rank, value)
    assert {tuple(r[:4]): r[4] for r in got.select(*keys, "value").iter_rows()} == {
        k: v for k, (_, v) in model.items()
    }
    shares = got.group_by("device_id", "ts_ms", "metric").agg(pl.col("share").sum())
    assert all(abs(s - 1.0) < 1e-9 for s in shares["share"].to_list())
