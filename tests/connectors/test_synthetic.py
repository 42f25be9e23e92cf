"""The synthetic connector: deterministic, window-independent, and the fleet it promises."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import polars as pl
import pydantic
import pytest
from polars.testing import assert_frame_equal

from connectors import synthetic
from connectors.base import SAMPLE_SCHEMA, MetricsConnector
from connectors.synthetic import CYCLE_DAYS, SyntheticConfig, SyntheticConnector
from connectors.synthetic_fleet import ABSENCES, COUNTER_RESETS, MIG, ONPREM, POOLS, Absence

UTC = dt.UTC
CYCLE = dt.datetime(2025, 11, 20, tzinfo=UTC)  # a cycle start: 20412 days since 1970-01-01, a multiple of 28


def at(day: int, hhmm: str = "00:00") -> dt.datetime:
    hours, minutes = (int(x) for x in hhmm.split(":"))
    return CYCLE + dt.timedelta(days=day, hours=hours, minutes=minutes)


def collect(connector: SyntheticConnector, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    frames = [b.samples for b in connector.collect(start, end)]
    return pl.concat(frames).sort("device_id", "metric", "ts_ms", "workload_key")


@pytest.fixture(scope="module")
def coarse() -> SyntheticConnector:
    """Five-minute samples: a day of the whole fleet in about 90,000 rows."""
    return SyntheticConnector(SyntheticConfig(period_s=300))


@pytest.fixture(scope="module")
def day(coarse: SyntheticConnector) -> pl.DataFrame:
    return collect(coarse, at(3), at(4))  # a Sunday


def devices_where(connector: SyntheticConnector, **match: object) -> list[str]:
    return [d.device_id for d in connector.discover() if all(getattr(d, k) == v for k, v in match.items())]


def test_cycle_anchor_is_a_cycle_start() -> None:
    assert (CYCLE - dt.datetime(1970, 1, 1, tzinfo=UTC)).days % CYCLE_DAYS == 0


def test_satisfies_the_metrics_protocol() -> None:
    connector = SyntheticConnector(SyntheticConfig(name="demo", type="synthetic", period_s=30))
    assert isinstance(connector, MetricsConnector)
    assert connector.kind == "metrics"
    assert connector.config_model is SyntheticConfig
    assert connector.sampling.period_s == 30 and connector.sampling.max_gap_s == 60
    with pytest.raises(pydantic.ValidationError, match="sede"):
        SyntheticConfig(name="x", type="synthetic", sede=1)  # type: ignore[call-arg]


def test_schema_bounds_and_units() -> None:
    connector = SyntheticConnector()
    start, end = at(2, "09:17"), at(2, "10:03")
    batches = list(connector.collect(start, end))
    assert batches
    for batch in batches:
        assert batch.samples.schema == pl.Schema(SAMPLE_SCHEMA)
        assert set(batch.samples["device_id"]) <= {d.device_id for d in batch.devices}
        named = set(batch.samples["workload_key"]) - {""}
        assert named == {w.workload_key for w in batch.workloads}
        assert all(w.project and w.team and w.workload for w in batch.workloads)
    frame = pl.concat([b.samples for b in batches])
    ms = frame["ts_ms"]
    assert ms.min() >= int(start.timestamp() * 1000) and ms.max() < int(end.timestamp() * 1000)
    pct = frame.filter(pl.col("metric").is_in(["gpu_util", "sm_active", "tensor_active", "mem_bw"]))["value"]
    assert pct.min() >= 0 and pct.max() <= 100
    used = frame.filter(pl.col("metric") == "mem_used_b")["value"]
    total = frame.filter(pl.col("metric") == "mem_total_b")["value"]
    assert (used.to_numpy() <= total.to_numpy()).all()
    assert frame.filter(pl.col("metric") == "power_w")["value"].min() > 0
    # One reading per (device, metric, ts, workload).
    assert frame.select("device_id", "metric", "ts_ms", "workload_key").is_duplicated().sum() == 0


def test_same_seed_same_samples_different_seed_different() -> None:
    start, end = at(7, "22:00"), at(8, "02:00")
    first = collect(SyntheticConnector(SyntheticConfig(period_s=120)), start, end)
    again = collect(SyntheticConnector(SyntheticConfig(period_s=120)), start, end)
    assert_frame_equal(first, again)
    other = collect(SyntheticConnector(SyntheticConfig(period_s=120, seed=7)), start, end)
    assert not first.equals(other)


def test_split_windows_equal_one_window() -> None:
    connector = SyntheticConnector(SyntheticConfig(period_s=120))
    a, b, c = at(7, "21:00"), at(8, "00:37") + dt.timedelta(seconds=13), at(8, "03:00")
    whole = collect(connector, a, c)
    fresh = SyntheticConnector(SyntheticConfig(period_s=120))  # no cache shared with the first
    parts = pl.concat([collect(fresh, a, b), collect(connector, b, c)]).sort(
        "device_id", "metric", "ts_ms", "workload_key"
    )
    assert_frame_equal(whole, parts)


def test_fleet_spans_every_environment(coarse: SyntheticConnector, day: pl.DataFrame) -> None:
    devices = coarse.discover()
    assert 60 <= len(devices) <= 100
    assert len({d.device_id for d in devices}) == len(devices)
    by_env = {env: [d for d in devices if d.environment == env] for env in ("onprem", "aws", "gcp", "azure")}
    assert all(by_env.values())
    assert {d.provider for d in by_env["onprem"]} == {None}
    assert all(d.device_id.startswith(("GPU-", "MIG-")) for d in by_env["onprem"])
    assert all(d.device_id == f"{d.instance_id}/gpu{d.gpu_index}" for d in by_env["aws"] + by_env["gcp"])
    assert all(d.instance_id.startswith("i-") and len(d.account) == 12 for d in by_env["aws"])  # type: ignore[union-attr]
    azure_vm = "/providers/Microsoft.Compute/virtualMachines/"
    assert all(azure_vm in (d.instance_id or "") for d in by_env["azure"])
    seen = set(day["device_id"])
    assert all(any(d.device_id in seen for d in env) for env in by_env.values())
    assert SyntheticConnector(SyntheticConfig(scale=3)).discover().__len__() == 3 * len(devices)


def test_cloud_metrics_are_cloudwatch_style_except_one_dcgm_instance(
    coarse: SyntheticConnector, day: pl.DataFrame
) -> None:
    aws = {d.device_id: d for d in coarse.discover() if d.environment == "aws"}
    metrics = (
        day.filter(pl.col("device_id").is_in(list(aws))).group_by("device_id").agg(pl.col("metric").unique())
    )
    with_sm = {r["device_id"] for r in metrics.iter_rows(named=True) if "sm_active" in r["metric"]}
    assert len({aws[d].instance_id for d in with_sm}) == 1
    assert all(
        set(r["metric"]) <= {"gpu_util", "mem_used_b", "mem_total_b", "power_w", "sm_active"}
        for r in metrics.iter_rows(named=True)
    )


def test_mig_instances_have_fractions_of_seven(coarse: SyntheticConnector, day: pl.DataFrame) -> None:
    devices = coarse.discover()
    mig = [d for d in devices if d.mig_profile]
    assert sorted((d.mig_profile, Fraction(d.gpu_fraction).limit_denominator(7)) for d in mig) == [
        ("1g.10gb", Fraction(1, 7)),
        ("1g.10gb", Fraction(1, 7)),
        ("2g.20gb", Fraction(2, 7)),
        ("3g.40gb", Fraction(3, 7)),
    ]
    parents = {d.parent_device_id for d in mig}
    assert len(parents) == 1 and next(iter(parents)).startswith("GPU-")  # type: ignore[union-attr]
    assert parents.isdisjoint({d.device_id for d in devices})
    assert all(d.device_id.startswith("MIG-") for d in mig)
    # tdp_w is the board's, as NVML reports it on an instance: the TCO estimate applies the fraction
    siblings = {d.tdp_w for d in devices if d.node == mig[0].node and not d.mig_profile}
    assert {d.tdp_w for d in mig} == siblings and len(siblings) == 1
    assert set(day["device_id"]) >= {d.device_id for d in mig}
    # NVML has no "GPU util" for a MIG instance; the GPUs beside it report everything.
    reported = day.group_by("device_id").agg(pl.col("metric").unique().sort())
    by_device = {r["device_id"]: set(r["metric"]) for r in reported.iter_rows(named=True)}
    assert all(by_device[d.device_id] == set(MIG) for d in mig)
    node = mig[0].node
    assert all(by_device[d.device_id] == set(ONPREM) for d in devices if d.node == node and not d.mig_profile)


def test_time_sliced_shares_add_to_one(day: pl.DataFrame) -> None:
    groups = day.group_by("device_id", "metric", "ts_ms").agg(
        pl.len().alias("n"),
        pl.col("share").sum().alias("total"),
        pl.col("workload_key").n_unique().alias("k"),
    )
    shared = groups.filter(pl.col("n") > 1)
    assert shared.height > 0 and shared["device_id"].n_unique() == 1
    assert (shared["k"] == 2).all() and (shared["total"] == 1.0).all()
    assert (groups.filter(pl.col("n") == 1)["total"] == 1.0).all()
    # Somebody's share is not one half: it follows their SM activity.
    assert day.filter(pl.col("share") < 1)["share"].n_unique() > 10


def test_launch_bound_job_is_busy_without_sm_activity(coarse: SyntheticConnector) -> None:
    frame = collect(coarse, at(8), at(10))
    launch = frame.filter(pl.col("workload_key").str.contains("/rl-rollout-"))
    assert launch["device_id"].n_unique() == 4
    means = launch.group_by("metric").agg(pl.col("value").mean()).rows()
    means = dict(means)
    assert means["gpu_util"] > 50 and means["sm_active"] < 5 and means["power_w"] < 200


def test_busy_training_idle_notebooks_and_free_gpus(coarse: SyntheticConnector, day: pl.DataFrame) -> None:
    def mean(frame: pl.DataFrame, metric: str) -> float:
        return float(frame.filter(pl.col("metric") == metric)["value"].mean())  # type: ignore[arg-type]

    train = day.filter(pl.col("workload_key").str.contains("/llama-70b-pretrain-"))
    assert 70 <= mean(train, "sm_active") <= 95 and mean(train, "power_w") > 550
    notebooks = day.filter(pl.col("workload_key").str.contains("/jupyter-"))
    assert mean(notebooks, "sm_active") < 5  # a Sunday: held, not used
    free = day.filter(pl.col("device_id").is_in(devices_where(coarse, node="dgx-h100-004", gpu_index=7)))
    assert set(free["workload_key"]) == {""} and mean(free, "power_w") < 90


def test_pods_are_replaced_mid_hour(coarse: SyntheticConnector) -> None:
    frame = collect(coarse, at(1), at(3)).filter(pl.col("metric") == "sm_active")
    firsts = frame.filter(pl.col("workload_key") != "").group_by("workload_key").agg(pl.col("ts_ms").min())
    assert (firsts["ts_ms"] % 3_600_000 > 60_000).sum() > 5


def test_energy_counter_is_monotone_but_for_one_reset() -> None:
    pool, node, gpu, day_no, hhmm = COUNTER_RESETS[0]
    connector = SyntheticConnector(SyntheticConfig(period_s=60))
    samples = collect(connector, at(day_no, "12:00"), at(day_no, "17:00"))
    frame = samples.filter(pl.col("metric") == "energy_j")
    steps = frame.sort("device_id", "ts_ms").with_columns(step=pl.col("value").diff().over("device_id"))
    drops = steps.filter(pl.col("step") < 0)
    reset_device = devices_where(connector, node=f"dgx-h100-{node:03d}", gpu_index=gpu)
    assert drops["device_id"].to_list() == reset_device
    at_ms = int(at(day_no, hhmm).timestamp() * 1000)
    assert at_ms <= drops["ts_ms"][0] < at_ms + 60_000 and drops["value"][0] < 60 * 700
    # Between readings the counter grows by power × time.
    power = frame.select("device_id", "ts_ms").join(
        samples.filter(pl.col("metric") == "power_w"), on=["device_id", "ts_ms"]
    )
    watts = steps.filter(pl.col("step") >= 0)["step"].mean() / 60  # type: ignore[operator]
    assert abs(watts - power["value"].mean()) / power["value"].mean() < 0.05  # type: ignore[operator]


def test_energy_counter_continues_across_windows() -> None:
    connector = SyntheticConnector(SyntheticConfig(period_s=300))
    before = collect(connector, at(27, "23:00"), at(28)).filter(pl.col("metric") == "energy_j")
    after = collect(connector, at(28), at(28, "01:00")).filter(pl.col("metric") == "energy_j")  # next cycle
    last = before.group_by("device_id").agg(pl.col("value").last().alias("last"))
    first = after.group_by("device_id").agg(pl.col("value").first().alias("first"))
    joined = last.join(first, on="device_id")
    assert joined.height > 40
    step_w = (joined["first"] - joined["last"]) / 300
    assert step_w.min() > 0 and step_w.max() < 710  # type: ignore[operator]


@pytest.mark.parametrize("outage", ABSENCES[:2], ids=lambda a: f"{a.pool}-{a.minutes}min")
def test_exporter_outages_leave_gaps(outage: Absence) -> None:
    connector = SyntheticConnector(SyntheticConfig(period_s=60))
    start = at(outage.day, outage.start)
    end = start + dt.timedelta(minutes=outage.minutes)
    pool = next(p for p in POOLS if p.key == outage.pool)
    ids = devices_where(connector, node=pool.node_name.format(n=outage.node))
    assert len(ids) >= 8  # MIG instances count as devices
    frame = collect(connector, start - dt.timedelta(minutes=10), end + dt.timedelta(minutes=10))
    mine = frame.filter(pl.col("device_id").is_in(ids))
    start_ms, end_ms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    assert mine.filter(pl.col("ts_ms").is_between(start_ms, end_ms, closed="left")).height == 0
    assert mine.filter(pl.col("ts_ms") < start_ms).height > 0
    assert mine.filter(pl.col("ts_ms") >= end_ms).height > 0
    others = frame.filter(~pl.col("device_id").is_in(ids) & pl.col("ts_ms").is_between(start_ms, end_ms))
    assert others.height > 0


def test_stopped_instance_has_no_samples(coarse: SyntheticConnector) -> None:
    stop = ABSENCES[2]
    frame = collect(coarse, at(stop.day + 1), at(stop.day + 2))
    stopped = devices_where(coarse, instance_type="g5.12xlarge", node="g5-serve-02")
    running = devices_where(coarse, instance_type="g5.12xlarge", node="g5-serve-01")
    assert frame.filter(pl.col("device_id").is_in(stopped)).height == 0
    assert frame.filter(pl.col("device_id").is_in(running)).height > 0


def test_naive_datetimes_are_refused(coarse: SyntheticConnector) -> None:
    with pytest.raises(ValueError, match="naive"):
        list(coarse.collect(dt.datetime(2025, 1, 1), dt.datetime(2025, 1, 2)))  # noqa: DTZ001


def test_nothing_comes_from_the_future() -> None:
    now = at(2, "10:31")
    connector = SyntheticConnector(SyntheticConfig(period_s=300), clock=lambda: now)
    latest = collect(connector, at(2), at(3))["ts_ms"].max()
    now_ms = int(now.timestamp() * 1000)
    assert now_ms - 300_000 <= latest < now_ms  # type: ignore[operator]
    assert list(connector.collect(at(2, "11:00"), at(3))) == []


def test_batches_split_a_pool_without_changing_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    connector = SyntheticConnector(SyntheticConfig(period_s=5))
    start, end = at(4, "16:00"), at(4, "16:10")
    small = list(connector.collect(start, end))
    # Each device has at most 2 rows per metric and timestamp (time-slicing), 120 timestamps a day here.
    assert max(b.samples.height for b in small) <= 2 * 120 / (86_400 / 5) * synthetic.ROWS_PER_BATCH
    monkeypatch.setattr(synthetic, "ROWS_PER_BATCH", 10**9)
    large = list(connector.collect(start, end))
    assert len(small) > len(large) == len(POOLS)
    key = ["device_id", "metric", "ts_ms", "workload_key"]
    whole = pl.concat([b.samples for b in large]).sort(key)
    assert_frame_equal(pl.concat([b.samples for b in small]).sort(key), whole)
