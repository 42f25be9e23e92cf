"""Categorical input and the fast paths give the same ledger as String input and the general paths.

Connectors may hand ``device_id``, ``metric`` and ``workload_key`` over as String, Categorical or
Enum columns (issue 13: no per-row string encoding); normalization must give identical rows for
all of them. Scrape-like input (every metric of a device at the same times, chains in order)
takes the fast paths — presence from one chain per device, no sort, no group-by of every sample —
and must give the rows the general paths give (forced here by marking the batch time-sliced).
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal as assert_frame_close

from connectors.base import SAMPLE_SCHEMA
from service.ledger import normalize as normalize_module
from service.ledger.normalize import Window, normalize

H = 3_600_000
M = 60_000
WINDOW = Window(start_ms=0, end_ms=3 * H, max_gap_ms=2 * M, presence_gap_ms=H)
METRICS = ["gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b", "temp_c"]
KEYS = ["device_id", "metric", "workload_key"]


def frame(rows: list[tuple[str, int, str, float, str | None, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def as_categorical(samples: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    return samples.with_columns(pl.col(columns).cast(pl.Categorical))


def as_enum(samples: pl.DataFrame) -> pl.DataFrame:
    """Enum columns whose categories are in another order than the strings sort, with extras."""

    def categories(column: str) -> list[str]:
        return sorted({v for v in samples[column].to_list() if v is not None} | {"zz-unused"}, reverse=True)

    return samples.with_columns(pl.col(c).cast(pl.Enum(categories(c))) for c in KEYS)


def assert_frame_equal(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    assert_frame_close(got, expected, check_exact=True)  # every float bit for bit


def general(samples: pl.DataFrame, window: Window) -> pl.DataFrame:
    """``normalize`` through the general paths only (presence by group-by, next reading by fill)."""
    order = normalize_module._order
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            normalize_module, "_order", lambda batch: dataclasses.replace(order(batch), sliced=True)
        )
        return normalize(samples, window)


# Random readings (any order, repeats, time-sliced): String, Categorical and Enum agree.
readings = st.lists(
    st.tuples(
        st.sampled_from(["B", "A", "GPU-10", "GPU-9"]),
        st.integers(min_value=-H, max_value=4 * H),
        st.sampled_from([*METRICS, "present", "bogus"]),
        st.floats(min_value=0, max_value=100, allow_nan=False),
        st.sampled_from(["", "w2", "w1", None]),
        st.sampled_from([1.0, 0.5, 0.25, None]),
    ),
    max_size=120,
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=readings, which=st.sampled_from([KEYS, ["device_id"], ["workload_key"], ["metric"]]))
def test_string_and_categorical_input_give_identical_ledgers(rows, which) -> None:
    samples = frame(rows)
    expected = normalize(samples, WINDOW)
    assert_frame_equal(normalize(as_categorical(samples, which), WINDOW), expected)
    assert_frame_equal(normalize(as_enum(samples), WINDOW), expected)


def assert_sorted_by_key(rows: pl.DataFrame) -> None:
    """Rows in (device_id, hour_index, workload_key) order, as Polars sorts the strings."""
    assert_frame_equal(rows, rows.sort("device_id", "hour_index", "workload_key"))


# ``_decode`` sorts by the packed key, not by strings: the codes must be ranks of the sorted
# strings whatever order a Categorical or Enum holds them in.
@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=readings)
def test_rows_come_sorted_by_their_strings(rows) -> None:
    samples = frame(rows)
    for variant in (samples, as_categorical(samples, KEYS), as_enum(samples)):
        assert_sorted_by_key(normalize(variant, WINDOW))


def test_rows_sorted_by_bytes_not_by_first_appearance() -> None:
    # Categorical codes follow first appearance ("é", "b", "GPU-9", ...); the rows follow the
    # strings' bytes: "GPU-10" < "GPU-9" < "a" < "b" < "é", and "" (no workload) first.
    devices = ["é", "b", "GPU-9", "a", "GPU-10"]
    owners = ["w2", None, "W1", "w10"]
    rows = [
        (device, t * M, "gpu_util", 50.0, owners[(i + t) % len(owners)], 1.0)
        for i, device in enumerate(devices)
        for t in range(0, 180, 15)
    ]
    samples = frame(rows)
    got = normalize(as_categorical(samples, KEYS), WINDOW)
    assert got["device_id"].unique(maintain_order=True).to_list() == ["GPU-10", "GPU-9", "a", "b", "é"]
    assert got.filter(pl.col("device_id") == "a", pl.col("hour_index") == 0)["workload_key"].to_list() == [
        "",
        "W1",
        "w10",
        "w2",
    ]
    assert_sorted_by_key(got)
    assert_frame_equal(got, normalize(samples, WINDOW))
    assert_frame_equal(normalize(as_enum(samples), WINDOW), got)


# Scrape-like readings: each device reports every metric at the same times, for one owner at a
# time; then some perturbation (a lost field, a repeat, a time-sliced reading, another order).
@st.composite
def scrapes(draw: st.DrawFn) -> list[tuple[str, int, str, float, str | None, float | None]]:
    rows = []
    # Half the time every device reports the same metrics at the same times: the regular layout
    # (every chain as long, each device's chains together) whose owner cuts come from positions.
    shared = draw(st.booleans())
    minutes = st.lists(st.integers(min_value=-H // M, max_value=4 * H // M), min_size=1, max_size=40)
    times = draw(minutes)
    metrics = draw(st.lists(st.sampled_from(METRICS), min_size=1, max_size=4, unique=True))
    for device in draw(
        st.lists(st.sampled_from(["GPU-2", "GPU-10", "A"]), min_size=1, max_size=3, unique=True)
    ):
        if not shared:
            times = draw(minutes)
            metrics = draw(st.lists(st.sampled_from(METRICS), min_size=1, max_size=4, unique=True))
        owners = draw(st.lists(st.sampled_from(["", "pod-a", "pod-b"]), min_size=1, max_size=3))
        for metric in metrics:
            for t in sorted(set(times)):
                value = draw(st.floats(min_value=0, max_value=100, allow_nan=False))
                rows.append((device, t * M, metric, value, owners[t % len(owners)], 1.0))
    perturb = draw(st.sampled_from(["none", "drop", "repeat", "slice", "relabel"]))
    if perturb == "drop" and len(rows) > 1:
        del rows[draw(st.integers(min_value=0, max_value=len(rows) - 1))]
    elif perturb == "repeat":
        rows.append(rows[draw(st.integers(min_value=0, max_value=len(rows) - 1))])
    elif perturb == "slice":
        d, t, m, v, _, _ = rows[draw(st.integers(min_value=0, max_value=len(rows) - 1))]
        rows.append((d, t, m, v / 2, "pod-c", 0.5))
    elif perturb == "relabel":
        i = draw(st.integers(min_value=0, max_value=len(rows) - 1))
        rows[i] = (*rows[i][:4], "pod-z", 1.0)
    return rows


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=scrapes(),
    gap=st.sampled_from([(2 * M, H), (10 * M, 10 * M), (30_000, 2 * M)]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_fast_paths_equal_the_general_paths(rows, gap, seed) -> None:
    window = Window(start_ms=0, end_ms=3 * H, max_gap_ms=gap[0], presence_gap_ms=gap[1])
    samples = frame(rows)
    expected = general(samples, window)
    assert_frame_equal(normalize(samples, window), expected)
    assert_frame_equal(normalize(as_categorical(samples, KEYS), window), expected)
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=seed)  # out of chain order: sorted first
    assert_frame_equal(normalize(shuffled, window), expected)


def test_a_scrape_takes_the_fast_paths_and_gives_the_hand_computed_rows() -> None:
    """Two metrics every minute 10:00–10:59 for pod-a, then pod-b 11:00–11:29 (max_gap 2 min)."""
    rows = [
        ("D", t * M, metric, value, "pod-a" if t < 60 else "pod-b", 1.0)
        for metric, value in (("gpu_util", 50.0), ("power_w", 300.0))
        for t in range(90)
    ]
    samples = as_categorical(frame(rows), KEYS)
    batch = normalize_module._encode(samples, WINDOW)
    ordered = normalize_module._order(batch)
    assert (ordered.repeated, ordered.sliced) == (False, False)
    aligned = normalize_module._aligned_readings(ordered.rows, ordered.starts)
    assert aligned is not None and aligned[3] is not None  # the fast presence, a regular layout
    out = normalize(samples, WINDOW)
    assert out.select("device_id", "hour_index", "workload_key").rows() == [
        ("D", 0, "pod-a"),
        ("D", 1, "pod-b"),
    ]
    first, second = out.row(0, named=True), out.row(1, named=True)
    assert (first["present_s"], first["observed_s"], first["busy_s"]) == (3600.0, 3600.0, 1800.0)
    # 11:00–11:29 read, the last reading stands for max_gap (2 min): 31 minutes, none after.
    assert (second["present_s"], second["observed_s"], second["busy_s"]) == (1860.0, 1860.0, 930.0)
    assert first["power_avg_w"] == 300.0 and first["energy_j"] == pytest.approx(300.0 * 3600)
    assert first["hist_25_50_s"] == 0.0 and first["hist_50_75_s"] == 3600.0


class _CategoricalSynthetic:
    """The synthetic fleet handing Categorical columns, as a connector may (issue 13)."""

    def __init__(self) -> None:
        from connectors.synthetic import SyntheticConfig, SyntheticConnector

        self.inner = SyntheticConnector(SyntheticConfig(name="demo", type="synthetic", period_s=300.0))
        self.sampling, self.config_model, self.kind = self.inner.sampling, self.inner.config_model, "metrics"

    def discover(self):  # type: ignore[no-untyped-def]
        return self.inner.discover()

    def collect(self, start, end):  # type: ignore[no-untyped-def]
        from connectors.base import SampleBatch

        for batch in self.inner.collect(start, end):
            samples = batch.samples.with_columns(pl.col(KEYS).cast(pl.Categorical))
            yield SampleBatch(samples, batch.devices, batch.workloads)


def test_an_ingest_of_categorical_batches_writes_the_same_ledger(engine) -> None:  # type: ignore[no-untyped-def]
    """Through the whole ingest (validation, normalization, devices, ledger rows, rollups)."""
    import datetime as dt

    from sqlalchemy import text

    from connectors.synthetic import SyntheticConfig, SyntheticConnector
    from service.ledger.ingest import ingest_window
    from service.models import LedgerHour

    start, end = dt.datetime(2025, 3, 3, tzinfo=dt.UTC), dt.datetime(2025, 3, 4, tzinfo=dt.UTC)
    columns = ", ".join(c.name for c in LedgerHour.__table__.c if c.name != "id")  # a rewrite gets new ids
    tables = {
        "ledger_hour": f"select {columns} from ledger_hour order by device_id, hour_index, workload_key",
        "device": "select device_id, metrics, first_seen, last_seen from device order by device_id",
    }
    written = []
    for connector in (
        SyntheticConnector(SyntheticConfig(name="demo", type="synthetic", period_s=300.0)),
        _CategoricalSynthetic(),
    ):
        result = ingest_window(
            engine, "demo", connector, start, end, clock=lambda: end + dt.timedelta(days=1)
        )  # type: ignore[arg-type]
        with engine.connect() as conn:
            written.append({name: conn.execute(text(sql)).fetchall() for name, sql in tables.items()})
        assert result.samples_rejected == 0 and result.ledger_rows > 2000
    assert written[0] == written[1]


def test_validation_hands_categorical_columns_on_unchanged() -> None:
    """Normalization reads the codes only if validation does not cast them back to String."""
    from service.ledger.validate import validate_samples

    samples = as_categorical(
        frame([("A", 0, "gpu_util", 5.0, "w", 1.0), ("B", 0, "gpu_util", 500.0, None, 1.0)]), KEYS
    )
    checked = validate_samples(samples, ["A", "B"])
    assert (checked.accepted.height, checked.rejected) == (1, 1)
    assert all(checked.accepted.schema[c] == pl.Categorical() for c in KEYS)
    assert checked.accepted.schema["ts_ms"] == pl.Int64 and checked.accepted.schema["share"] == pl.Float64
