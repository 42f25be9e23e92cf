"""The ledger's write-time invariants (service/ledger/invariants.py): refused loudly, and never
broken by normalization of a coherent source."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import ClassVar, Literal

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, ConnectorStatus, DeviceInfo, SampleBatch, Sampling
from service.ledger.ingest import ingest_window
from service.ledger.invariants import LedgerInvariantError, check_rows, max_board_power_w
from service.ledger.normalize import Window, normalize
from service.models import ConnectorRun, ConnectorState, LedgerHour

H = 3_600_000
T10 = 10 * H  # 1970-01-01T10:00Z, hour_index 10
WINDOW = Window(start_ms=T10, end_ms=T10 + 2 * H, max_gap_ms=30_000, presence_gap_ms=H)
H100 = "NVIDIA H100 80GB HBM3"


def rows(*items: dict[str, object]) -> pl.DataFrame:
    base = {"device_id": "GPU-a", "hour_index": 10, "workload_key": "", "present_s": 3600.0}
    base |= {"observed_s": 3600.0, "busy_s": 0.0, "idle_s": 0.0, "energy_j": None}
    schema = {k: (pl.String if k in ("device_id", "workload_key") else pl.Float64) for k in base}
    schema["hour_index"] = pl.Int64
    return pl.DataFrame([base | item for item in items], schema=schema)


def refused(frame: pl.DataFrame, devices: dict[str, DeviceInfo] | None = None) -> str:
    with pytest.raises(LedgerInvariantError) as caught:
        check_rows(frame, devices or {}, connector="dc1")
    return str(caught.value)


def test_rows_within_the_invariants_pass() -> None:
    check_rows(rows({}, {"device_id": "GPU-b", "present_s": 1200.0, "observed_s": 1200.0, "busy_s": 600.0}),
               {}, connector="dc1")  # fmt: skip
    # Two workloads of one device-hour add up to the hour exactly; rounding noise is tolerated.
    pair = rows({"workload_key": "a", "present_s": 1800.0000004, "observed_s": 1800.0000005},
                {"workload_key": "b", "present_s": 1800.0, "observed_s": 1700.0})  # fmt: skip
    check_rows(pair, {}, connector="dc1")
    check_rows(rows().clear(), {}, connector="dc1")


def test_observed_over_present_names_connector_device_hour_workload_and_numbers() -> None:
    # Issue 12 point 3's page: a pod row observed 1800 s of a device it held 1200 s.
    message = refused(rows({"workload_key": "k8s:ml/a/c", "present_s": 1200.0, "observed_s": 1800.0}))
    assert "connector 'dc1'" in message
    assert (
        "device GPU-a hour 1970-01-01T10:00Z workload 'k8s:ml/a/c': observed_s 1800.0 > present_s 1200.0"
        in (message)
    )
    assert "nothing of this batch was written" in message


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"present_s": 3700.0, "observed_s": 3600.0}, "present_s 3700.0 > 3600"),
        ({"busy_s": 3600.5}, "busy_s 3600.5 > observed_s 3600.0"),
        ({"observed_s": 100.0, "idle_s": 200.0}, "idle_s 200.0 > observed_s 100.0"),
        ({"energy_j": -1.0}, "energy_j -1.0 < 0"),
    ],
)
def test_each_row_invariant_is_refused(row: dict[str, object], expected: str) -> None:
    assert expected in refused(rows(row))


def test_per_metric_seconds_are_checked_too() -> None:
    frame = rows({}).with_columns(
        pl.lit(3600.0).alias("obs_s_sm_active"), pl.lit(3601.0).alias("busy_s_sm_active")
    )
    assert "busy_s_sm_active 3601.0 > obs_s_sm_active 3600.0" in refused(frame)


def test_workloads_of_a_device_hour_hold_at_most_the_hour() -> None:
    message = refused(rows({"workload_key": "a", "present_s": 2400.0, "observed_s": 0.0},
                           {"workload_key": "b", "present_s": 2400.0, "observed_s": 0.0}))  # fmt: skip
    assert (
        "device GPU-a hour 1970-01-01T10:00Z: present_s over its 2 workloads adds up to 4800.0 > 3600"
        in message
    )


def _instances(n: int, parent: str = "GPU-p", model: str | None = H100) -> dict[str, DeviceInfo]:
    return {
        f"MIG-{i}": DeviceInfo(f"MIG-{i}", "onprem", gpu_model=model, parent_device_id=parent,
                               mig_profile="1g.10gb", gpu_fraction=1 / 7)
        for i in range(n)
    }  # fmt: skip


def test_mig_instances_each_carrying_the_whole_gpu_are_refused() -> None:
    # Issue 12 point 1: seven 1g instances of a 420 W H100, each stored at 420 W for the hour:
    # 7 × 1,512,000 J = 10,584,000 J > 700 W × 1.1 × 3600 s = 2,772,000 J.
    devices = _instances(7)
    whole = rows(*({"device_id": d, "energy_j": 1_512_000.0} for d in devices))
    message = refused(whole, devices)
    assert (
        "device GPU-p hour 1970-01-01T10:00Z: energy_j of its 7 MIG instances adds up to 10584000.000 > "
        "700 W × 1.1 × 3600 s present = 2772000.007 J" in message  # 7 × 1 mJ of rounding slack
    )
    # Split by slice they add up to the GPU's 1,512,000 J: accepted.
    check_rows(rows(*({"device_id": d, "energy_j": 216_000.0} for d in devices)), devices, connector="dc1")


def test_mig_instances_against_a_parent_that_is_a_ledger_device() -> None:
    devices = _instances(2) | {"GPU-p": DeviceInfo("GPU-p", "onprem", gpu_model=H100)}
    parent = {"device_id": "GPU-p", "energy_j": 300_000.0}
    halves = rows(
        parent, {"device_id": "MIG-0", "energy_j": 150_000.0}, {"device_id": "MIG-1", "energy_j": 150_000.0}
    )
    check_rows(halves, devices, connector="dc1")
    doubled = rows(
        parent, {"device_id": "MIG-0", "energy_j": 300_000.0}, {"device_id": "MIG-1", "energy_j": 150_000.0}
    )
    assert "adds up to 450000.000 > the GPU's own energy_j 300000.0" in refused(doubled, devices)


def test_board_power_by_model() -> None:
    assert max_board_power_w("NVIDIA A30") == 165.0
    assert max_board_power_w("NVIDIA A100-SXM4-80GB") == 400.0
    assert max_board_power_w("NVIDIA H100 80GB HBM3") == 700.0
    assert max_board_power_w("NVIDIA GH200 480GB") == 1000.0
    assert max_board_power_w(None) == max_board_power_w("Some Future GPU") == 2000.0


# --- normalization of a coherent source never breaks them -----------------------------------------

_GAUGES = ["gpu_util", "sm_active", "power_w", "mem_used_b"]


@st.composite
def coherent_batches(draw: st.DrawFn) -> pl.DataFrame:
    """Readings of two devices at random times; each reading reports a random subset of the
    metrics, all naming the same owners (one, or several time-sliced with shares), which change
    from reading to reading at random."""
    out = []
    for device in ("GPU-a", "GPU-b"):
        times = draw(st.lists(st.integers(-H // 1000, 3 * H // 1000), min_size=1, max_size=25, unique=True))
        for t in sorted(times):
            ts = T10 + t * 1000
            metrics = draw(st.lists(st.sampled_from([*_GAUGES, "energy_j"]), min_size=1, unique=True))
            names = draw(st.lists(st.sampled_from(["", "job-1", "job-2", "job-3"]), min_size=1,
                                  max_size=3, unique=True))  # fmt: skip
            owners = [(n, draw(st.floats(0.0, 1.0))) for n in names]
            for metric in metrics:
                value = draw(st.floats(0.0, 100.0)) if metric != "energy_j" else float(ts // 1000)
                out += [(device, ts, metric, value, name, share) for name, share in owners]
    return pl.DataFrame(out, schema=SAMPLE_SCHEMA, orient="row")


def test_a_reading_lacking_a_metric_at_an_owner_change_ends_that_metric_there() -> None:
    # GPU util at 10:00:00 (job-1) and 10:00:20 (job-2); memory at 10:00:00 and 10:00:10, where
    # job-2 takes over. Util's first reading stands for 10:00:00–10:00:10 only (then the owners
    # change): job-1 observed 10 s = present 10 s; 10:00:10–10:00:20 is unobserved for util.
    samples = pl.DataFrame(
        [("D", T10, "gpu_util", 50.0, "job-1", 1.0), ("D", T10, "mem_used_b", 1.0, "job-1", 1.0),
         ("D", T10 + 10_000, "mem_used_b", 1.0, "job-2", 1.0),
         ("D", T10 + 20_000, "gpu_util", 50.0, "job-2", 1.0)],
        schema=SAMPLE_SCHEMA, orient="row",
    )  # fmt: skip
    out = normalize(samples, WINDOW).filter(pl.col("hour_index") == 10)
    got = {r["workload_key"]: (r["present_s"], r["observed_s"]) for r in out.iter_rows(named=True)}
    # job-2: present 10:00:10 → 10:00:50 (the last reading's 30 s max_gap), observed 10:00:20 → 10:00:50.
    assert got == {"job-1": (10.0, 10.0), "job-2": (40.0, 30.0)}
    check_rows(out, {}, connector="dc1")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples=coherent_batches())
def test_normalizing_a_coherent_batch_never_breaks_an_invariant(samples: pl.DataFrame) -> None:
    check_rows(normalize(samples, WINDOW), {}, connector="property")


@settings(max_examples=40, deadline=None)
@given(
    extra=st.floats(0.01, 3600.0),
    column=st.sampled_from(["observed_s", "busy_s", "idle_s", "present_s"]),
)
def test_any_row_pushed_past_its_bound_is_refused(extra: float, column: str) -> None:
    bound = {"observed_s": 1200.0, "busy_s": 1000.0, "idle_s": 1000.0, "present_s": 3600.0}[column]
    frame = rows({"present_s": 1200.0 if column != "present_s" else 3600.0, "observed_s": 1000.0,
                  "busy_s": 500.0, "idle_s": 100.0})  # fmt: skip
    with pytest.raises(LedgerInvariantError):
        check_rows(frame.with_columns(pl.lit(bound + extra).alias(column)), {}, connector="property")


# --- in the ingest: the day fails, nothing of it is written, the run is INTERNAL_ERROR -------------


class _Incoherent:
    """A source naming one owner in its utilization lines and another in its memory lines at the
    same readings (issue 12 point 3's virtual-GPU page)."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = ConnectorConfig
    sampling = Sampling(period_s=60, max_gap_s=120, presence_gap_s=1800)

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("GPU-v", "onprem")]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        t0 = int(dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC).timestamp() * 1000)
        lines = [("GPU-v", t0 + i * 60_000, "gpu_util", 50.0, "", 1.0) for i in range(60)]
        lines += [("GPU-v", t0 + i * 60_000, "mem_used_b", 1e9, "k8s:ml/p/c", 1.0) for i in range(60)]
        lo, hi = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        frame = pl.DataFrame(lines, schema=SAMPLE_SCHEMA, orient="row")
        yield SampleBatch(frame.filter(pl.col("ts_ms").is_between(lo, hi, closed="left")), self.discover())


def test_ingest_of_a_violating_batch_fails_loudly_and_writes_nothing(engine: Engine) -> None:
    start = dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC)
    with pytest.raises(LedgerInvariantError, match=r"connector 'virt'.*device GPU-v hour 2026-03-01T10:00Z"):
        ingest_window(engine, "virt", _Incoherent(), start, start + dt.timedelta(hours=1))
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(LedgerHour)).scalar_one() == 0
        run = conn.execute(select(ConnectorRun.__table__)).mappings().one()
        state = conn.execute(select(ConnectorState.__table__)).mappings().one()
    assert run["status"] == ConnectorStatus.INTERNAL_ERROR
    assert run["error"].startswith("LedgerInvariantError: connector 'virt'")
    assert "observed_s 3600.0 > present_s 1800.0" in run["error"]
    assert state["watermark"] is None
