"""Properties of the shared vendor mapping steps (connectors/vendor_frames.py), against a plain
Python model of the same rules: one reading per device, time and metric; a device's own line
wins; otherwise its sub-devices combine by mean, sum or max; a stand-in counter fills only gaps."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.vendor_frames import SeriesMeta, fallback, long_frame, per_device

HOW = {"gpu_util": "mean", "power_w": "sum", "temp_c": "max"}
readings = st.lists(
    st.tuples(
        st.sampled_from(["d0", "d1"]),  # device
        st.sampled_from(["", "0", "1"]),  # '' = the whole device's own line, else a tile
        st.sampled_from(sorted(HOW)),
        st.integers(0, 3),  # time step
        st.one_of(st.floats(0, 1000, allow_nan=False), st.sampled_from([float("nan"), -1.0, float("inf")])),
    ),
    max_size=40,
    unique_by=lambda r: (r[0], r[1], r[2], r[3]),
)


def _frame(rows: list[tuple[str, str, str, int, float]]) -> pl.DataFrame:
    meta = [SeriesMeta(d, key, 1.0, part, HOW[key], "") for d, part, key, _, _ in rows]
    ts = [np.array([t * 15_000], dtype=np.int64) for *_, t, _ in rows]
    values = [np.array([v]) for *_, v in rows]
    return long_frame(meta, ts, values)


@settings(max_examples=200, deadline=None)
@given(readings)
def test_per_device_matches_the_rules(rows: list[tuple[str, str, str, int, float]]) -> None:
    if not rows:
        return
    got = {
        (r["device_id"], r["key"], r["ts_ms"] // 15_000): r["value"]
        for r in per_device(_frame(rows)).iter_rows(named=True)
    }
    good = [r for r in rows if np.isfinite(r[4]) and r[4] >= 0]  # failed reads are gaps
    expected: dict[tuple[str, str, int], float] = {}
    for d, key, t in {(d, k, t) for d, _, k, t, _ in good}:
        own = [v for dd, p, k, tt, v in good if (dd, k, tt) == (d, key, t) and p == ""]
        tiles = [v for dd, p, k, tt, v in good if (dd, k, tt) == (d, key, t) and p != ""]
        combine = {"mean": lambda x: sum(x) / len(x), "sum": sum, "max": max}[HOW[key]]
        expected[(d, key, t)] = own[0] if own else combine(tiles)
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)), k


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(0, 9)), st.sets(st.integers(0, 9)))
def test_a_stand_in_fills_only_the_gaps(first: set[int], second: set[int]) -> None:
    frame = pl.DataFrame(
        {
            "device_id": ["d"] * (len(first) + len(second)),
            "ts_ms": [*sorted(first), *sorted(second)],
            "key": ["gpu_util"] * len(first) + ["any_engine"] * len(second),
            "workload_key": [""] * (len(first) + len(second)),
            "value": [1.0] * len(first) + [2.0] * len(second),
        },
        schema={"device_id": pl.String, "ts_ms": pl.Int64, "key": pl.String, "workload_key": pl.String,
                "value": pl.Float64},
    )  # fmt: skip
    out = fallback(frame, "gpu_util", "any_engine")
    assert set(out["key"].to_list()) <= {"gpu_util"}
    got = dict(zip(out["ts_ms"].to_list(), out["value"].to_list(), strict=True))
    assert got == {t: 1.0 for t in first} | {t: 2.0 for t in second - first}
