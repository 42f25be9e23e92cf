"""The grid path (issue 13) gives the rows the per-sample chain path gives, bit for bit.

A regular scrape — every device reporting the same metrics at the same times for one owner at a
time, chains in order — is normalized from its grid: each reading's interval, hour split and
runs once for all its metrics, the value sums per sample in chunks of devices, and the energy
counter's pairs as shifted rows. These tests force the chain path (no grid) for the expected
rows, and check the grid path was taken where it applies.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from connectors.base import SAMPLE_SCHEMA
from service.ledger import normalize as normalize_module
from service.ledger.normalize import Window, normalize

H = 3_600_000
S = 1_000
METRICS = ["gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b", "temp_c"]

Row = tuple[str, int, str, float, str | None, float | None]


def frame(rows: list[Row]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").with_columns(
        pl.col("device_id", "metric", "workload_key").cast(pl.Categorical)
    )


def run(samples: pl.DataFrame, window: Window, grid: bool) -> tuple[pl.DataFrame, list[bool]]:
    """``normalize`` with or without the grid; and per call of the grid path, whether it answered."""
    presence, grid_stats = normalize_module._presence, normalize_module._grid_gauge_stats
    answered: list[bool] = []

    def spy(*args: Any) -> pl.DataFrame | None:
        stats = grid_stats(*args)
        answered.append(stats is not None)
        return stats

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(normalize_module, "_grid_gauge_stats", spy)
        if not grid:
            patch.setattr(normalize_module, "_presence", lambda *a: (*presence(*a)[:2], None))
        return normalize(samples, window), answered


def assert_grid_equals_chain(samples: pl.DataFrame, window: Window) -> list[bool]:
    expected, unused = run(samples, window, grid=False)
    assert unused == []
    got, answered = run(samples, window, grid=True)
    assert_frame_equal(got, expected, check_exact=True)  # every float bit for bit
    return answered


@st.composite
def regular_scrapes(draw: st.DrawFn) -> list[Row]:
    """Devices reporting the same metrics at the same (unsorted, hour-crossing) times."""
    times = sorted(
        set(draw(st.lists(st.integers(min_value=-3600, max_value=4 * 3600), min_size=1, max_size=50)))
    )
    metrics = draw(st.lists(st.sampled_from(METRICS), min_size=1, max_size=6, unique=True))
    devices = draw(
        st.lists(st.sampled_from(["GPU-2", "GPU-10", "A", "B"]), min_size=1, max_size=4, unique=True)
    )
    values = st.floats(min_value=-5, max_value=105, allow_nan=False) | st.floats(min_value=0, max_value=100)
    rows: list[Row] = []
    for device in devices:
        owners = draw(st.lists(st.sampled_from(["", "pod-a", "pod-b"]), min_size=1, max_size=3))
        for metric in metrics:
            counter = 0.0
            for t in times:
                counter += (
                    draw(st.floats(min_value=0, max_value=1e6)) if draw(st.booleans()) else -counter / 2
                )
                value = counter if metric == "energy_j" else draw(values)
                rows.append((device, t * S, metric, value, owners[t % len(owners)], 1.0))
    return rows


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=regular_scrapes(),
    window=st.sampled_from([(0, 3), (1, 2), (0, 1)]),
    gap=st.sampled_from([(120 * S, H), (600 * S, 600 * S), (30 * S, 120 * S)]),
)
def test_the_grid_path_equals_the_chain_path(rows, window, gap) -> None:
    samples = frame(rows)
    w = Window(start_ms=window[0] * H, end_ms=window[1] * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
    answered = assert_grid_equals_chain(samples, w)
    read = pl.col("ts_ms").is_between(w.read_start_ms, w.read_end_ms, closed="left")
    in_range = samples.filter(pl.col("metric").is_in(["gpu_util", "sm_active"]) & read)["value"]
    if answered and in_range.len():
        # It answers unless a utilization value lies outside [0, 100] % (the chain path clips it).
        assert answered == [bool(in_range.min() >= 0 and in_range.max() <= 100)]  # type: ignore[operator]


def test_a_scrape_crossing_hours_and_the_window_takes_the_grid_path() -> None:
    """Readings every 40 s from 0:00:20 (intervals cross each hour), a window of one hour that cuts
    a reading's interval at each end, devices in several chunks, an owner change mid-hour."""
    readings = [
        (f"GPU-{d}", t, metric, value, "pod-a" if t < 90 * 60 * S else "pod-b", 1.0)
        for d in range(40)
        for metric, value in (("gpu_util", 30.0 + d), ("power_w", 300.0), ("energy_j", None))
        for t in range(20 * S, 3 * H, 40 * S)
    ]
    rows: list[Row] = [(d, t, m, t / S * 300.0 if v is None else v, o, s) for d, t, m, v, o, s in readings]
    samples = frame(rows)
    window = Window(start_ms=H, end_ms=2 * H, max_gap_ms=60 * S, presence_gap_ms=H)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(normalize_module, "_CHUNK", 3 * 3 * 270)  # three devices a chunk
        assert assert_grid_equals_chain(samples, window) == [True]
    out = normalize(samples, window)
    assert out.height == 80 and out["hour_index"].unique().to_list() == [1]
    first = out.filter(pl.col("device_id") == "GPU-0").sort("workload_key").rows(named=True)
    # pod-a's last reading is at 1:29:40, pod-b's first at 1:30:20 (the owner changes there): the
    # readings at 0:59:40 and 1:59:40 stand across the window's edges and are cut there.
    assert [(r["workload_key"], r["present_s"], r["observed_s"]) for r in first] == [
        ("pod-a", 1820.0, 1820.0),
        ("pod-b", 1780.0, 1780.0),
    ]
    assert [r["busy_s"] for r in first] == [546.0, 534.0] and first[0]["hist_25_50_s"] == 1820.0
    assert [r["energy_j"] for r in first] == [pytest.approx(300.0 * 1820), pytest.approx(300.0 * 1780)]


def test_bucket_table_of_whole_percents() -> None:
    table = normalize_module._BUCKET_OF_WHOLE_PCT
    assert table.tolist() == [0] + [1] * 4 + [2] * 5 + [3] * 15 + [4] * 25 + [5] * 25 + [6] * 26


def test_grid_histogram_at_and_next_to_the_edges() -> None:
    """Utilization exactly at each bucket edge and just below it, two GPUs, 10 s scrape across
    an hour: the grid's bucket by whole percent puts each where the chain path's compares do."""
    values = [
        0.0,
        -0.0,
        0.999999,
        1.0,
        4.999999,
        5.0,
        9.99,
        10.0,
        24.5,
        25.0,
        49.9999,
        50.0,
        74.99,
        75.0,
        99.9,
        100.0,
    ]
    rows: list[Row] = [
        (device, t * 10 * S, metric, values[(t + d) % len(values)], "pod-a", 1.0)
        for d, device in enumerate(["GPU-a", "GPU-b"])
        for metric in ("gpu_util", "sm_active")
        for t in range(-30, 400)
    ]
    window = Window(start_ms=0, end_ms=H, max_gap_ms=20 * S, presence_gap_ms=H)
    assert assert_grid_equals_chain(frame(rows), window) == [True]
    out = normalize(frame(rows), window).filter(pl.col("device_id") == "GPU-a")
    # 360 readings of 10 s in the hour, the values in turn (t = 0 reads values[0]).
    counts = [0] * 7
    for t in range(360):
        v = values[t % len(values)]
        counts[sum(v >= e for e in (1, 5, 10, 25, 50, 75))] += 10
    assert out.select(normalize_module.HIST_COLUMNS).rows() == [tuple(float(c) for c in counts)]
