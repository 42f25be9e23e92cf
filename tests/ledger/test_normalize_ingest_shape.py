"""The ingest path's shape takes the fast paths and gives the general paths' rows, bit for bit.

The ingestor reads a day and an hour of context either side in day-long requests and concatenates
the batches (service/ledger/ingest.py), each mapped by a connector with Categorical text columns
(connectors/dcgm.py): every (device, metric) chain then comes in pieces, one per request, each in
time order. ``normalize`` puts the pieces together without sorting every key (``_join_pieces``),
reads a column holding one value (one metric, no workload) without a gather, finds the distinct
devices among the first rows of runs, and takes presence from the aligned readings by runs of
equal ledger row. Here such reads are drawn and compared with the general paths: the sort by key
(no piece joining), presence by group-by and intervals by fill (the batch marked time-sliced);
and with the same samples in String columns, which are encoded without code ranks.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from connectors.base import SAMPLE_SCHEMA
from service.ledger import normalize as normalize_module
from service.ledger.normalize import Window, normalize

H = 3_600_000
M = 60_000
KEYS = ["device_id", "metric", "workload_key"]
METRICS = ["gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b", "temp_c"]

Row = tuple[str, int, str, float, str | None, float]


def general(samples: pl.DataFrame, window: Window) -> pl.DataFrame:
    """``normalize`` through the general paths: chains sorted by key, presence by group-by, the
    next reading by fill."""
    order = normalize_module._order
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(normalize_module, "_join_pieces", lambda *a: None)
        patch.setattr(
            normalize_module, "_order", lambda batch: dataclasses.replace(order(batch), sliced=True)
        )
        return normalize(samples, window)


def request(rows: list[Row]) -> pl.DataFrame:
    """One request's batch as a connector hands it over: Categorical text columns."""
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").with_columns(
        pl.col(KEYS).cast(pl.Categorical)
    )


@st.composite
def reads(draw: st.DrawFn) -> tuple[list[pl.DataFrame], Window]:
    """Series of a few devices over ``[-1 h, 5 h)`` (lost readings, owner changes, null owners),
    cut into requests at drawn times; each request lists its chains in a drawn order."""
    step = draw(st.sampled_from([M, 5 * M, 20 * M]))
    metrics = draw(st.lists(st.sampled_from(METRICS), min_size=1, max_size=3, unique=True))
    devices = draw(
        st.lists(st.sampled_from(["GPU-2", "GPU-10", "A", "B"]), min_size=1, max_size=4, unique=True)
    )
    series: list[list[Row]] = []
    for device in devices:
        kept = draw(st.lists(st.booleans(), min_size=6 * H // step, max_size=6 * H // step))
        owners = draw(st.lists(st.sampled_from(["", "pod-a", "pod-b", None]), min_size=1, max_size=3))
        per = draw(st.sampled_from([1, 3, 30]))  # readings per owner before it changes
        times = [-H + i * step for i, keep in enumerate(kept) if keep]
        for metric in metrics:
            series.append(
                [
                    (
                        device,
                        t,
                        metric,
                        float(draw(st.integers(0, 100))),
                        owners[(t // step // per) % len(owners)],
                        1.0,
                    )
                    for t in times
                ]
            )
    cuts = sorted(set(draw(st.lists(st.integers(0, 5 * H // M), max_size=3))))
    bounds = [-H, *(c * M for c in cuts), 5 * H]
    batches = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        order = draw(st.permutations(range(len(series))))
        rows = [row for i in order for row in series[i] if lo <= row[1] < hi]
        if rows:
            batches.append(request(rows))
    gap = draw(st.sampled_from([(2 * step, H), (2 * step, 2 * step), (step, 3 * step)]))
    window = Window(start_ms=0, end_ms=4 * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
    return batches, window


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(read=reads())
def test_a_read_in_requests_gives_the_general_rows(read: tuple[list[pl.DataFrame], Window]) -> None:
    batches, window = read
    if not batches:
        return
    samples = pl.concat(batches, how="vertical_relaxed")  # as the ingestor concatenates them
    batch = normalize_module._encode(samples, window)
    if batch.frame.is_empty():
        return
    ordered = normalize_module._order(batch)
    # The pieces were joined, not sorted by key: no key was built, nothing repeats.
    assert "k" not in ordered.rows.columns and not ordered.repeated and not ordered.sliced
    expected = general(samples, window)
    assert_frame_equal(normalize(samples, window), expected, check_exact=True)
    # String columns are encoded another way (no code ranks, no one-value shortcut): the same rows.
    strings = samples.with_columns(pl.col(KEYS).cast(pl.String))
    assert_frame_equal(normalize(strings, window), expected, check_exact=True)


def test_the_connectors_shape_takes_the_fast_paths_with_hand_computed_rows() -> None:
    """One metric every minute for two GPUs, read in two requests split at 02:30; GPU-b loses
    02:00–02:09 (a gap of 11 min: within presence_gap, beyond max_gap)."""
    window = Window(start_ms=H, end_ms=3 * H, max_gap_ms=2 * M, presence_gap_ms=H)
    times = range(0, 4 * H, M)
    rows = {
        device: [
            (device, t, "gpu_util", 40.0, "", 1.0)
            for t in times
            if device == "GPU-a" or not 2 * H <= t < 2 * H + 10 * M
        ]
        for device in ("GPU-a", "GPU-b")
    }
    split = 2 * H + 30 * M
    batches = [
        request([r for device in ("GPU-a", "GPU-b") for r in rows[device] if r[1] < split]),
        request([r for device in ("GPU-b", "GPU-a") for r in rows[device] if r[1] >= split]),
    ]
    samples = pl.concat(batches, how="vertical_relaxed")
    batch = normalize_module._encode(samples, window)
    assert batch.frame["metric"].n_unique() == 1 and batch.frame["wl"].n_unique() == 1
    ordered = normalize_module._order(batch)
    assert "k" not in ordered.rows.columns and len(ordered.starts) == 2  # two chains, joined
    assert normalize_module._aligned_readings(ordered.rows, ordered.starts) is not None
    out = normalize(samples, window)
    assert_frame_equal(out, general(samples, window), check_exact=True)
    assert out.select("device_id", "hour_index", "present_s", "observed_s", "busy_s").rows() == [
        ("GPU-a", 1, 3600.0, 3600.0, 1440.0),
        ("GPU-a", 2, 3600.0, 3600.0, 1440.0),
        ("GPU-b", 1, 3600.0, 3600.0, 1440.0),
        # 01:59 stands for 2 min observed but present until 02:10; then 02:10–03:00.
        ("GPU-b", 2, 3600.0, 3060.0, 1224.0),
    ]


@st.composite
def pieces(draw: st.DrawFn) -> tuple[pl.DataFrame, list[int]]:
    """A batch's frame concatenated from requests (columns in several chunks), each column one
    value or several (NaN and null among them), and an order of its rows."""
    n = draw(st.integers(0, 30))

    def column(pool: list, dtype: type[pl.DataType]) -> pl.Series:
        values = [draw(st.sampled_from(pool)) for _ in range(n)] if draw(st.booleans()) else [pool[0]] * n
        return pl.Series(values, dtype=dtype)

    nan = float("nan")
    frame = pl.DataFrame(
        {
            "dev": column([0, 1, 2], pl.Int64),
            "metric": column([3, 4], pl.Int64),
            "ts": column([0, 60_000, 120_000], pl.Int64),
            "wl": column([0, 1, None], pl.Int64),
            "value": column([40.0, nan, -0.0, None], pl.Float64),
            "share": column([1.0, nan, 0.5], pl.Float64),
        }
    )
    cut = draw(st.integers(0, n))
    frame = pl.concat([frame[:cut], frame[cut:]], rechunk=False)
    return frame, draw(st.permutations(range(n)))


@settings(max_examples=300, deadline=None)
@given(drawn=pieces())
def test_the_gather_of_pieces_is_polars_gather(drawn: tuple[pl.DataFrame, list[int]]) -> None:
    frame, order = drawn
    rows = np.asarray(order, dtype=np.int64)
    one_metric = frame["metric"].n_unique() <= 1
    got = normalize_module._gather(frame, rows, frame["ts"].to_numpy(), one_metric)
    assert_frame_equal(got, frame[rows], check_exact=True)


def test_one_value_columns_are_kept_others_taken() -> None:
    nan = float("nan")
    assert normalize_module._one_value(pl.Series([1.0, 1.0]))
    assert normalize_module._one_value(pl.Series([0, 0, 0]))
    assert not normalize_module._one_value(pl.Series([1.0, nan]))  # min and max both say 1.0
    assert not normalize_module._one_value(pl.Series([nan, nan]))  # NaN != NaN
    assert not normalize_module._one_value(pl.Series([], dtype=pl.Float64))
    assert not normalize_module._one_value(pl.Series([0, 1]))
    frame = pl.DataFrame({"metric": [5, 5], "ts": [1, 2], "wl": [0, 0], "share": [1.0, nan]})
    got = normalize_module._gather(frame, np.array([1, 0]), np.array([1, 2]), one_metric=True)
    assert got["metric"].to_list() == [5, 5] and got["ts"].to_list() == [2, 1]
    assert got["share"].to_list()[0] != got["share"].to_list()[0] and got["share"][1] == 1.0
