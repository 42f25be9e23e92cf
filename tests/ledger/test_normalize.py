"""Normalization on small hand-computed cases (docs/design.md §3), then its invariants as properties."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.base import SAMPLE_SCHEMA
from service.ledger.normalize import Window, normalize
from service.metrics_catalog import HIST_COLUMNS

H = 3_600_000  # one hour in ms
M = 60_000  # one minute in ms
T10 = 10 * H  # 10:00 on 1970-01-01, hour_index 10


def frame(*rows: tuple[str, int, str, float, str, float]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=SAMPLE_SCHEMA, orient="row")


def every_minute(
    device: str, metric: str, start: int, count: int, value: float, workload: str = "", share: float = 1.0
):
    return [(device, start + i * M, metric, value, workload, share) for i in range(count)]


def row(out: pl.DataFrame, hour: int, workload: str = "", device: str = "D") -> dict[str, object]:
    picked = out.filter(
        (pl.col("device_id") == device)
        & (pl.col("hour_index") == hour)
        & (pl.col("workload_key") == workload)
    )
    assert picked.height == 1, picked
    return picked.row(0, named=True)


WINDOW = Window(start_ms=T10, end_ms=T10 + 2 * H, max_gap_ms=2 * M, presence_gap_ms=H)


def test_gap_is_present_but_unobserved_never_idle() -> None:
    # 10:00–10:09 at 50 %, silence, 10:30–10:59 at 0 %. max_gap 120 s.
    samples = frame(
        *every_minute("D", "gpu_util", T10, 10, 50.0),
        *every_minute("D", "gpu_util", T10 + 30 * M, 30, 0.0),
    )
    out = normalize(samples, WINDOW)
    r = row(out, 10)
    # First block: 9 × 60 s + the last reading capped at max_gap (120 s) = 660 s observed.
    # Second block: 30 readings × 60 s = 1800 s (the last one's 120 s is cut at 11:00).
    assert r["observed_s"] == 660 + 1800
    assert r["busy_s"] == 660 * 0.5
    assert r["idle_s"] == 1800  # only the 0 % block; the gap is not idle
    # The 20-minute silence is shorter than presence_gap: present all hour.
    assert r["present_s"] == 3600
    assert r["hist_0_1_s"] == 1800 and r["hist_50_75_s"] == 660
    assert sum(r[c] for c in HIST_COLUMNS) == r["observed_s"]
    assert r["default_metric"] == "gpu_util"
    # The last reading at 10:59 stands for 60 s of 11:00–11:01.
    r11 = row(out, 11)
    assert (r11["present_s"], r11["observed_s"], r11["idle_s"]) == (60, 60, 60)


def test_silence_longer_than_presence_gap_means_absent() -> None:
    window = Window(start_ms=T10, end_ms=T10 + 2 * H, max_gap_ms=2 * M, presence_gap_ms=10 * M)
    samples = frame(
        *every_minute("D", "gpu_util", T10, 10, 50.0), *every_minute("D", "gpu_util", T10 + 30 * M, 30, 0.0)
    )
    r = row(normalize(samples, window), 10)
    # 20-minute silence > 10-minute presence gap: absent from 10:11 to 10:30.
    assert r["present_s"] == 660 + 1800


def test_energy_counter_delta_split_at_hour_and_reset() -> None:
    samples = frame(
        *every_minute("D", "gpu_util", T10 + 59 * M, 5, 100.0),
        ("D", T10 + 59 * M, "energy_j", 1000.0, "", 1.0),
        ("D", T10 + 61 * M, "energy_j", 13000.0, "", 1.0),  # +12000 J over 120 s, 60 s each side of 11:00
        ("D", T10 + 62 * M, "energy_j", 500.0, "", 1.0),  # reset: counts 500 from zero
        ("D", T10 + 63 * M, "energy_j", 1500.0, "", 1.0),  # +1000
    )
    out = normalize(samples, WINDOW)
    assert row(out, 10)["energy_j"] == pytest.approx(6000.0, abs=1e-9)
    assert row(out, 11)["energy_j"] == pytest.approx(6000.0 + 500.0 + 1000.0, abs=1e-9)
    assert row(out, 11)["energy_estimated"] is False


def test_energy_from_power_when_no_counter_is_flagged() -> None:
    samples = frame(
        *every_minute("D", "gpu_util", T10, 60, 10.0), *every_minute("D", "power_w", T10, 60, 300.0)
    )
    r = row(normalize(samples, WINDOW), 10)
    assert r["energy_j"] == 300.0 * 3600
    assert r["energy_estimated"] is True
    assert r["power_avg_w"] == 300.0


def test_reading_before_window_counts_its_overlap() -> None:
    samples = frame(("D", T10 - 30_000, "gpu_util", 40.0, "", 1.0))
    r = row(normalize(samples, WINDOW), 10)
    assert (r["present_s"], r["observed_s"], r["busy_s"]) == (90, 90, 36)


def test_workloads_in_sequence_and_time_sliced() -> None:
    # 10:00–10:29 two workloads share the GPU 3:1 at 80 %; 10:30–10:59 a third holds it idle.
    samples = frame(
        *every_minute("D", "gpu_util", T10, 30, 80.0, "w1", 0.75),
        *every_minute("D", "gpu_util", T10, 30, 80.0, "w2", 0.25),
        *every_minute("D", "gpu_util", T10 + 30 * M, 30, 0.0, "w3"),
    )
    out = normalize(samples, WINDOW)
    w1, w2, w3 = row(out, 10, "w1"), row(out, 10, "w2"), row(out, 10, "w3")
    assert (w1["present_s"], w1["observed_s"], w1["busy_s"]) == (1350, 1350, 1080)
    assert (w2["present_s"], w2["observed_s"], w2["busy_s"]) == (450, 450, 360)
    assert (w3["present_s"], w3["idle_s"]) == (1800, 1800)
    assert w1["present_s"] + w2["present_s"] + w3["present_s"] == 3600


def test_label_change_mid_hour_changes_attribution_not_the_chain() -> None:
    # A pod replaced at 10:30: the reading at 10:29 still stands until 10:30.
    samples = frame(
        *every_minute("D", "gpu_util", T10, 30, 100.0, "pod-a"),
        *every_minute("D", "gpu_util", T10 + 30 * M, 30, 100.0, "pod-b"),
    )
    out = normalize(samples, WINDOW)
    assert row(out, 10, "pod-a")["observed_s"] == 1800
    assert row(out, 10, "pod-b")["observed_s"] == 1800


def test_sm_active_is_the_default_and_launch_bound_work_is_idle_by_it() -> None:
    samples = frame(
        *every_minute("D", "gpu_util", T10, 60, 90.0), *every_minute("D", "sm_active", T10, 60, 1.0)
    )
    r = row(normalize(samples, WINDOW), 10)
    assert r["default_metric"] == "sm_active"
    assert r["busy_s"] == pytest.approx(36.0)
    assert r["idle_s"] == 3600 and r["hist_1_5_s"] == 3600
    assert r["busy_s_gpu_util"] == pytest.approx(3240.0)
    assert r["idle_s_gpu_util"] == 0


def test_memory_and_temperature() -> None:
    samples = frame(
        *every_minute("D", "gpu_util", T10, 60, 50.0),
        ("D", T10, "mem_used_b", 1e9, "", 1.0),
        ("D", T10 + 30 * M, "mem_used_b", 3e9, "", 1.0),
        ("D", T10, "mem_total_b", 8e10, "", 1.0),
        ("D", T10, "temp_c", 40.0, "", 1.0),
        ("D", T10 + M, "temp_c", 70.0, "", 1.0),
    )
    window = Window(start_ms=T10, end_ms=T10 + H, max_gap_ms=H, presence_gap_ms=H)
    r = row(normalize(samples, window), 10)
    assert r["mem_used_max_b"] == 3e9
    assert r["mem_used_avg_b"] == pytest.approx(2e9)
    assert (r["mem_total_b"], r["temp_max_c"]) == (8e10, 70.0)


def test_duplicate_readings_count_once() -> None:
    samples = frame(
        *every_minute("D", "gpu_util", T10, 60, 50.0), *every_minute("D", "gpu_util", T10, 60, 50.0)
    )
    assert row(normalize(samples, WINDOW), 10)["observed_s"] == 3600


def test_conflicting_repeats_resolve_the_same_in_any_order() -> None:
    a = frame(("D", T10, "gpu_util", 10.0, "", 1.0), ("D", T10, "gpu_util", 90.0, "", 1.0))
    b = frame(("D", T10, "gpu_util", 90.0, "", 1.0), ("D", T10, "gpu_util", 10.0, "", 1.0))
    assert row(normalize(a, WINDOW), 10)["busy_s"] == row(normalize(b, WINDOW), 10)["busy_s"] == 108.0


def test_present_readings_make_a_device_present_and_unobserved() -> None:
    # An inventory-style source: "the GPU is there" every minute 10:00–10:29, nothing measured;
    # from 10:30 a utilization reading joins in.
    samples = frame(
        *every_minute("D", "present", T10, 30, 1.0),
        *every_minute("D", "gpu_util", T10 + 30 * M, 30, 40.0),
    )
    r = row(normalize(samples, WINDOW), 10)
    # Presence chains through both metrics: 30 + 30 readings × 60 s; the 10:59 reading's
    # 120 s cap is cut at 11:00.
    assert r["present_s"] == 3600
    assert r["observed_s"] == 1800 and r["busy_s"] == 1800 * 0.4 and r["idle_s"] == 0
    assert r["mem_total_b"] is None and r["power_avg_w"] is None and r["energy_j"] is None


def test_empty_batch_gives_no_rows() -> None:
    out = normalize(pl.DataFrame(schema=SAMPLE_SCHEMA), WINDOW)
    assert out.is_empty() and "present_s" in out.columns


# --- properties -----------------------------------------------------------------------------------

readings = st.lists(
    st.tuples(
        st.sampled_from(["A", "B"]),
        st.integers(min_value=-H, max_value=4 * H),  # some before the window, some after
        st.sampled_from(["gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b"]),
        st.floats(min_value=0, max_value=100, allow_nan=False),
        st.sampled_from(["", "w1", "w2"]),
        st.sampled_from([1.0, 0.5, 0.25]),
    ),
    max_size=150,
)
gaps = st.sampled_from([(30_000, 600_000), (2 * M, H), (10 * M, 10 * M)])


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=readings, gap=gaps)
def test_device_hour_invariants(rows, gap) -> None:
    window = Window(start_ms=0, end_ms=3 * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
    out = normalize(frame(*rows), window)
    per_hour = out.group_by("device_id", "hour_index").agg(
        pl.col("present_s").sum(), pl.col("observed_s").sum(), pl.col("busy_s").sum(), pl.col("idle_s").sum()
    )
    eps = 1e-6
    for r in per_hour.iter_rows(named=True):
        assert 0 <= r["hour_index"] < 3
        assert r["present_s"] <= 3600 + eps
        assert r["observed_s"] <= r["present_s"] + eps
        assert r["busy_s"] <= r["observed_s"] + eps
        assert r["idle_s"] <= r["observed_s"] + eps
    for r in out.iter_rows(named=True):
        assert sum(r[c] for c in HIST_COLUMNS) == pytest.approx(r["observed_s"], abs=eps)
        assert r["energy_j"] is None or r["energy_j"] >= 0


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=readings, gap=gaps)
def test_hour_by_hour_equals_one_long_window(rows, gap) -> None:
    samples = frame(*rows)
    whole = normalize(samples, Window(start_ms=0, end_ms=3 * H, max_gap_ms=gap[0], presence_gap_ms=gap[1]))
    parts = pl.concat(
        [
            normalize(
                samples, Window(start_ms=h * H, end_ms=(h + 1) * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
            )
            for h in range(3)
        ]
    ).sort("device_id", "hour_index", "workload_key")
    assert parts.select("device_id", "hour_index", "workload_key").equals(
        whole.select("device_id", "hour_index", "workload_key")
    )
    numeric = [c for c, t in whole.schema.items() if t == pl.Float64]
    for column in numeric:
        a, b = whole[column].fill_null(-1.0).to_list(), parts[column].fill_null(-1.0).to_list()
        assert a == pytest.approx(b, abs=1e-6), column


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=readings, gap=gaps, seed=st.integers(min_value=0, max_value=2**16))
def test_order_of_readings_does_not_matter(rows, gap, seed) -> None:
    samples = frame(*rows, *rows[: len(rows) // 3])  # some exact repeats too
    window = Window(start_ms=0, end_ms=3 * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=seed)
    assert normalize(shuffled, window).equals(normalize(samples, window))
