"""``_widen`` (per-(row, metric) stats → one wide row per ledger row) places values by index in
NumPy; here it is held to the group-by with a filtered aggregation per column that it replaced
(kept below as the reference), bit for bit: nulls where a max has no value, 0 where a sum has
none, -0.0 kept, sm_active read as the default for every workload of its device-hour."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from connectors.base import SAMPLE_SCHEMA
from service.ledger import normalize as N
from service.metrics_catalog import HIST_COLUMNS, UTIL_METRICS, Metric

H = 3_600_000
WINDOW = N.Window(0, 4 * H, max_gap_ms=60_000, presence_gap_ms=H)
BATCH = N._batch(
    pl.DataFrame(schema=SAMPLE_SCHEMA), pl.Series(["a", "b", "c"]), pl.Series(["", "x", "y"]), WINDOW
)
GAUGES = [N._CODE[m] for m in ("gpu_util", "sm_active", "tensor_active", "mem_bw", "power_w", "mem_used_b",
                                "mem_total_b", "temp_c")]  # fmt: skip


def reference(per_metric: pl.DataFrame, batch: N._Batch) -> pl.DataFrame:
    """``_widen`` as a Polars group-by (before 2026-12-02's NumPy placement)."""
    dev_hour = pl.col("rk") // (1 << batch.row_key.shift_of("hour"))
    sm_hours = per_metric.filter(pl.col("metric") == N._SM).select(dev_hour.alias("dh")).unique()

    def of(metric: Metric) -> pl.Expr:
        return pl.col("metric") == N._CODE[metric.value]

    columns: list[pl.Expr] = []
    for metric in UTIL_METRICS:
        columns += [
            pl.col("w").filter(of(metric)).sum().alias(f"obs_{metric.value}"),
            (pl.col("wv") / 100.0).filter(of(metric)).sum().alias(f"busy_{metric.value}"),
            pl.col("w_idle").filter(of(metric)).sum().alias(f"idle_{metric.value}"),
        ]
    columns += [
        pl.col("wv").filter(of(Metric.POWER_W)).sum().alias("power_wms"),
        pl.col("w").filter(of(Metric.POWER_W)).sum().alias("power_ms"),
        pl.col("v_max").filter(of(Metric.MEM_USED_B)).max().alias("mem_used_max_b"),
        pl.col("wv").filter(of(Metric.MEM_USED_B)).sum().alias("mem_wms"),
        pl.col("w").filter(of(Metric.MEM_USED_B)).sum().alias("mem_ms"),
        pl.col("v_max").filter(of(Metric.MEM_TOTAL_B)).max().alias("mem_total_b"),
        pl.col("v_max").filter(of(Metric.TEMP_C)).max().alias("temp_max_c"),
    ]
    wide = per_metric.group_by("rk").agg(columns)
    wide = wide.with_columns(dev_hour.is_in(sm_hours["dh"].implode()).alias("has_sm"))
    default_code = pl.when(pl.col("has_sm")).then(pl.lit(N._SM)).otherwise(pl.lit(N._GPU))
    hist = (
        per_metric.join(wide.select("rk", "has_sm"), on="rk")
        .filter(pl.col("metric") == default_code)
        .select("rk", *[pl.col(f"h{i}").alias(col) for i, col in enumerate(HIST_COLUMNS)])
    )
    return wide.join(hist, on="rk", how="left")


values = st.one_of(st.sampled_from([0.0, -0.0, 1.5, 100.0]), st.floats(-1e6, 1e12, allow_nan=False))


@st.composite
def stats(draw: st.DrawFn) -> pl.DataFrame:
    """Distinct (row, metric) pairs of a few devices, hours and workloads, with drawn sums."""
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 2), st.sampled_from(GAUGES)),
            max_size=40,
            unique=True,
        )
    )
    key = BATCH.row_key
    rk = [int((d << key.shift_of("dev")) | (h << key.shift_of("hour")) | w) for d, h, w, _ in pairs]
    n = len(pairs)
    columns = {
        name: draw(st.lists(values, min_size=n, max_size=n)) for name in ["w", "wv", "w_idle", "v_max"]
    }
    hist = {f"h{i}": draw(st.lists(values, min_size=n, max_size=n)) for i in range(len(HIST_COLUMNS))}
    return pl.DataFrame(
        {"rk": rk, "metric": [m for *_, m in pairs], **columns, **hist},
        schema={"rk": pl.Int64, "metric": pl.Int64, **dict.fromkeys([*columns, *hist], pl.Float64)},
    )


def same(per_metric: pl.DataFrame) -> None:
    got = N._widen(per_metric, BATCH).sort("rk")
    want = reference(per_metric, BATCH).sort("rk").select(got.columns)
    assert_frame_equal(got, want, check_exact=True)
    # -0.0 and 0.0 compare equal: their signs must agree too.
    for column in got.columns[1:]:
        if got[column].dtype == pl.Float64:
            assert (got[column].to_numpy() < 0).tolist() == (want[column].to_numpy() < 0).tolist()
            signs = [str(v) for v in got[column].to_list()], [str(v) for v in want[column].to_list()]
            assert signs[0] == signs[1], column


@settings(max_examples=300, deadline=None)
@given(stats())
def test_widen_equals_the_group_by(per_metric: pl.DataFrame) -> None:
    same(per_metric)


def test_widen_by_hand() -> None:
    key = BATCH.row_key

    def rk(dev: int, hour: int, wl: int) -> int:
        return (dev << key.shift_of("dev")) | (hour << key.shift_of("hour")) | wl

    sm, gpu, power, temp = (N._CODE[m] for m in ("sm_active", "gpu_util", "power_w", "temp_c"))
    per_metric = pl.DataFrame(
        {
            # device 0 hour 1: workload 1 has sm_active, so workload 2 (gpu_util only) reads
            # sm_active as its default too and has no histogram; device 1 has gpu_util and a temperature.
            "rk": [rk(0, 1, 1), rk(0, 1, 1), rk(0, 1, 2), rk(0, 1, 2), rk(1, 0, 0), rk(1, 0, 0)],
            "metric": [sm, gpu, gpu, power, gpu, temp],
            "w": [1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0],
            "wv": [50_000.0, 100_000.0, -0.0, 1_000_000.0, 250_000.0, 1.0],
            "w_idle": [0.0, 500.0, 3000.0, 0.0, 0.0, 0.0],
            "v_max": [50.0, 50.0, 0.0, 250.0, 50.0, 71.5],
            **{f"h{i}": [float(i), 10.0 + i, 20.0 + i, 0.0, 30.0 + i, 0.0] for i in range(len(HIST_COLUMNS))},
        }
    )
    got = N._widen(per_metric, BATCH).sort("rk")
    assert got["rk"].to_list() == [rk(0, 1, 1), rk(0, 1, 2), rk(1, 0, 0)]
    assert got["has_sm"].to_list() == [True, True, False]
    assert got["obs_sm_active"].to_list() == [1000.0, 0.0, 0.0]
    assert got["obs_gpu_util"].to_list() == [2000.0, 3000.0, 5000.0]
    assert [str(v) for v in got["busy_gpu_util"].to_list()] == ["1000.0", "-0.0", "2500.0"]
    assert got["idle_gpu_util"].to_list() == [500.0, 3000.0, 0.0]
    assert got["power_wms"].to_list() == [0.0, 1_000_000.0, 0.0]
    assert got["power_ms"].to_list() == [0.0, 4000.0, 0.0]
    assert got["temp_max_c"].to_list() == [None, None, 71.5]
    assert got["mem_used_max_b"].to_list() == [None, None, None]
    assert got[HIST_COLUMNS[2]].to_list() == [2.0, None, 32.0]
    same(per_metric)


def test_busy_divided_as_polars_divides_the_column() -> None:
    # Polars divides a column by a constant as a product with its reciprocal, but a one-row frame
    # exactly; the group-by's bits, kept in both cases.
    wv = 127598648825.625
    zero = {"w": 0.0, "w_idle": 0.0, "v_max": 0.0, **{f"h{i}": 0.0 for i in range(len(HIST_COLUMNS))}}
    gpu, power = N._CODE["gpu_util"], N._CODE["power_w"]
    one = pl.DataFrame([{"rk": 0, "metric": gpu, "wv": wv, **zero}])
    two = pl.DataFrame(
        [{"rk": 0, "metric": gpu, "wv": wv, **zero}, {"rk": 0, "metric": power, "wv": 0.0, **zero}]
    )
    assert repr(N._widen(one, BATCH)["busy_gpu_util"][0]) == "1275986488.25625"  # wv / 100
    assert repr(N._widen(two, BATCH)["busy_gpu_util"][0]) == "1275986488.2562501"  # wv × 0.01
    same(one)
    same(two)
