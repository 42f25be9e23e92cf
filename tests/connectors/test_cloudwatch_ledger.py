"""The ``cloudwatch`` connector against moto over the wire, through the real ingest, to exact ledger rows.

* The shared fixture (R3 ``i-05b8e2d7c4a1f9603``, g5.12xlarge, 4 × A10G, 2025-09-10 00:00–06:00,
  hourly averages) is written into moto with ``PutMetricData`` — one datapoint per hour at the
  hour's start — and read back at ``period_s = 3600``.
* Generated 1-minute data with an outage, one GPU whose instance type comes only from
  ``ec2:DescribeInstances`` and one host without ``InstanceId``.
* The resolution rule: with an injected clock, windows older than 15 / 63 days are read at 300 /
  3600 s and emitted as 1-minute readings; older than 455 days reads nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import CallLog, put_points
from sqlalchemy import Engine, select

from connectors.base import Sampling
from connectors.cloudwatch import CloudWatchConfig, CloudWatchConnector, client_factory, segments
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

FIXTURES = Path(__file__).parent.parent / "fixtures" / "aws"
MIB = 1024 * 1024
R3 = "i-05b8e2d7c4a1f9603"
H = dt.timedelta(hours=1)
M = dt.timedelta(minutes=1)


@pytest.fixture
def engine(sqlite_url: str) -> Any:
    eng = make_engine(sqlite_url)
    yield eng
    eng.dispose()


def _config(endpoint: str, **extra: Any) -> CloudWatchConfig:
    return cloudwatch_config(endpoint, **({"account_id": None} | extra))  # the account from STS


def _ledger(engine: Engine) -> dict[tuple[str, int], dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
    return {(r["device_id"], r["hour_start"].hour): dict(r) for r in rows}


def _devices(engine: Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        return {r["device_id"]: dict(r) for r in conn.execute(select(Device.__table__)).mappings()}


def test_shared_fixture_read_back_gives_24_gpu_hours_and_exact_busy_seconds(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    request = json.loads((FIXTURES / "cloudwatch_get_metric_data_request.json").read_text())
    response = json.loads((FIXTURES / "cloudwatch_get_metric_data_response.json").read_text())
    queries = {q["Id"]: q["MetricStat"]["Metric"] for q in request["MetricDataQueries"]}
    cloudwatch = aws_client("cloudwatch")
    for result in response["MetricDataResults"]:
        metric = queries[result["Id"]]
        dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        stamps = [dt.datetime.fromisoformat(t) for t in result["Timestamps"]]
        put_points(cloudwatch, metric["Namespace"], metric["MetricName"], dims, stamps, result["Values"])
    start = dt.datetime(2025, 9, 10, tzinfo=dt.UTC)
    config = _config(moto, period_s=3600, account_id="111122223333")
    with CloudWatchConnector(config, clock=lambda: start + 7 * H) as connector:
        assert connector.sampling == Sampling(period_s=3600, max_gap_s=3600, presence_gap_s=3600)
        ingest_window(engine, "aws", connector, start, start + 6 * H)

    rows = _ledger(engine)
    gpus = [f"{R3}/gpu{i}" for i in range(4)]
    assert sorted(rows) == [(g, h) for g in gpus for h in range(6)]
    # 4 GPUs × 6 hours, each hour fully covered by its hourly average: 24 GPU-hours.
    assert sum(r["observed_s"] for r in rows.values()) == 24 * 3600
    # busy = Σ util% / 100 × 3600 s per GPU (values from the fixture, summed by hand)
    busy = {g: sum(rows[(g, h)]["busy_s_gpu_util"] for h in range(6)) for g in gpus}
    assert busy == pytest.approx(
        {gpus[0]: 18_950.76, gpus[1]: 17_998.56, gpus[2]: 19_034.28, gpus[3]: 17_525.52}, abs=1e-6
    )
    assert sum(busy.values()) == pytest.approx(73_509.12, abs=1e-6)
    # hour 02:00 of GPU 0: util 96.95 %, 17,246 MiB, 206.056 W
    row = rows[(gpus[0], 2)]
    assert row["busy_s_gpu_util"] == pytest.approx(3490.2, abs=1e-9)
    assert row["mem_used_max_b"] == 17_246 * MIB == 18_083_741_696
    assert row["power_avg_w"] == pytest.approx(206.056)
    assert row["energy_j"] == pytest.approx(206.056 * 3600, abs=1e-3)
    assert row["energy_estimated"] is True or row["energy_estimated"] == 1
    assert sum(r["energy_j"] for r in rows.values()) == pytest.approx(5_224.239 * 3600, abs=1e-2)
    device = _devices(engine)[gpus[3]]
    assert (device["environment"], device["account"], device["region"]) == (
        "aws",
        "111122223333",
        "us-east-1",
    )
    assert (device["instance_id"], device["instance_type"], device["gpu_model"]) == (
        R3,
        "g5.12xlarge",
        "NVIDIA A10G",
    )
    assert (device["node"], device["gpu_index"]) == ("ip-10-0-12-34.ec2.internal", 3)


def _minutes(start: dt.datetime, minutes: list[int]) -> list[dt.datetime]:
    return [start + m * M for m in minutes]


@pytest.mark.slow
def test_one_minute_data_with_an_outage_and_an_instance_type_from_ec2(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    """GPU A (EC2 instance from moto's RunInstances, no InstanceType dimension), 10:00–12:00:
    no data 10:30–10:40; util 50 % / 1,024 MiB / 150 W / 60 °C in hour 10, then 100 % / 2,048 MiB
    / 200 W / 70 °C. GPU B (host ``gpu-box-7``, no InstanceId): util 20 %, silent from 11:45."""
    h10 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
    ec2 = aws_client("ec2")
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g5.xlarge")
    a_id = instance["Instances"][0]["InstanceId"]
    cloudwatch = aws_client("cloudwatch")
    up = [m for m in range(120) if not 30 <= m < 40]
    a_dims = {"index": "0", "InstanceId": a_id, "host": "ip-10-0-1-5.ec2.internal", "name": "NVIDIA A10G"}
    for metric, first, second in (
        ("nvidia_smi_utilization_gpu", 50, 100),
        ("nvidia_smi_memory_used", 1024, 2048),
        ("nvidia_smi_memory_total", 23028, 23028),
        ("nvidia_smi_power_draw", 150, 200),
        ("nvidia_smi_temperature_gpu", 60, 70),
        ("nvidia_smi_utilization_memory", 99, 99),  # not a ledger metric: must not show up
    ):
        values = [first if m < 60 else second for m in up]
        put_points(cloudwatch, "CWAgent", metric, a_dims, _minutes(h10, up), values)
    b_dims = {"index": "1", "host": "gpu-box-7", "name": "NVIDIA L4"}
    put_points(
        cloudwatch,
        "CWAgent",
        "nvidia_smi_utilization_gpu",
        b_dims,
        _minutes(h10, list(range(105))),
        [20] * 105,
    )

    ec2_calls = CallLog()

    def make_client(session: Any, service: str, region: str) -> Any:
        made = client_factory(config)(session, service, region)
        if service == "ec2":
            made.meta.events.register("before-parameter-build.ec2.DescribeInstances", ec2_calls._before)
        return made

    config = _config(moto, account_id="111122223333")
    with CloudWatchConnector(config, make_client=make_client, clock=lambda: h10 + 2.5 * H) as connector:
        assert connector.sampling == Sampling(period_s=60, max_gap_s=60, presence_gap_s=3600)
        discovered = {d.device_id: d for d in connector.discover()}
        ingest_window(engine, "aws", connector, h10, h10 + 2 * H)
    a, b = f"{a_id}/gpu0", "gpu-box-7/gpu1"
    assert discovered[a].instance_type == "g5.xlarge"
    assert len(ec2_calls.calls) == 1  # cached per instance across discover and collect

    rows = _ledger(engine)
    assert sorted(rows) == sorted([(a, 10), (a, 11), (b, 10), (b, 11)])
    expected = {
        (a, 10): {"observed_s": 3000.0, "busy_s_gpu_util": 1500.0, "mem_used_max_b": 1024 * MIB,
                  "mem_total_b": 23028 * MIB, "power_avg_w": 150.0, "energy_j": 450_000.0, "temp_max_c": 60.0,
                  "busy_s_mem_bw": 0.0, "obs_s_mem_bw": 0.0},
        (a, 11): {"observed_s": 3600.0, "busy_s_gpu_util": 3600.0, "mem_used_max_b": 2048 * MIB,
                  "mem_total_b": 23028 * MIB, "power_avg_w": 200.0, "energy_j": 720_000.0,
                  "temp_max_c": 70.0},
        (b, 10): {"observed_s": 3600.0, "busy_s_gpu_util": 720.0, "mem_used_max_b": None,
                  "power_avg_w": None},
        (b, 11): {"observed_s": 2700.0, "busy_s_gpu_util": 540.0},
    }  # fmt: skip
    for key, columns in expected.items():
        for column, value in columns.items():
            assert rows[key][column] == (pytest.approx(value) if value is not None else None), (key, column)
    assert rows[(a, 10)]["mem_total_b"] == 24_146_608_128
    devices = _devices(engine)
    assert (devices[a]["instance_id"], devices[a]["instance_type"], devices[a]["node"]) == (
        a_id,
        "g5.xlarge",
        "ip-10-0-1-5.ec2.internal",
    )
    assert (devices[b]["instance_id"], devices[b]["instance_type"], devices[b]["node"]) == (
        None,
        None,
        "gpu-box-7",
    )
    assert (devices[b]["gpu_model"], devices[b]["gpu_index"], devices[b]["account"]) == (
        "NVIDIA L4",
        1,
        "111122223333",
    )


def test_segments_follow_cloudwatch_retention() -> None:
    day = 86_400
    now = 1_000 * day + 1_234  # not on a period edge
    pieces = segments(now - 500 * day, now + 100, now, 60)
    # 455 days, 63 days and 15 days ago, each rounded up to the older band's period
    assert pieces == [
        (now - 455 * day + 2_366, now - 63 * day + 2_366, 3600),
        (now - 63 * day + 2_366, now - 15 * day + 266, 300),
        (now - 15 * day + 266, now + 100, 60),
    ]
    assert segments(now - 600 * day, now - 456 * day, now, 60) == []  # older than 455 days: nothing
    # sub-minute periods are kept 3 hours; 120 s becomes lcm(120, 300) = 600 beyond 15 days
    assert segments(now - 4 * 3600, now, now, 10) == [
        (now - 4 * 3600, now - 10_774, 60),
        (now - 10_774, now, 10),
    ]
    assert segments(now - 16 * day, now - 15 * day, now, 120)[0][2] == 600


def test_old_windows_are_read_at_coarser_periods_with_exact_seconds(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    """Clock 2026-03-20 00:00. 1-minute util m % 10 × 10 % (0, 10, … 90) from 03-04 23:00 to 03-05
    01:00, across the 15-day edge (03-05 00:00): before it CloudWatch answers 5-minute averages
    (20 % for minutes 0–4 of each ten, 70 % for 5–9), which the connector emits as five 1-minute
    readings each; after it, the raw minutes. Busy seconds are the same either way: 1,620 s an
    hour (Σ 0…90 = 450 % per 10 minutes → 270 s)."""
    now = dt.datetime(2026, 3, 20, tzinfo=dt.UTC)
    edge15 = now - dt.timedelta(days=15)
    cloudwatch = aws_client("cloudwatch")
    dims = {
        "index": "0",
        "InstanceId": "i-0aaa",
        "InstanceType": "g5.xlarge",
        "host": "h",
        "name": "NVIDIA A10G",
    }
    util = "nvidia_smi_utilization_gpu"
    put_points(
        cloudwatch,
        "CWAgent",
        util,
        dims,
        _minutes(edge15 - H, list(range(120))),
        [m % 10 * 10 for m in range(120)],
    )
    edge63 = now - dt.timedelta(days=63)  # 2026-01-16 00:00: one hour 64 days back, minutes 0…59
    put_points(cloudwatch, "CWAgent", util, dims, _minutes(edge63 - 24 * H, list(range(60))), list(range(60)))
    log = CallLog()
    config = _config(moto, account_id="111122223333")

    def make_client(session: Any, service: str, region: str) -> Any:
        return log.attach(client_factory(config)(session, service, region))

    with CloudWatchConnector(config, make_client=make_client, clock=lambda: now) as connector:
        samples = pl.concat([b.samples for b in connector.collect(edge15 - H, edge15 + H)])
        assert [c["MetricDataQueries"][0]["MetricStat"]["Period"] for c in log.calls] == [300, 60]
        assert samples.height == 120  # one reading a minute on both sides
        by_minute = dict(
            zip((samples["ts_ms"] - samples["ts_ms"].min()) // 60_000, samples["value"], strict=True)
        )
        assert [by_minute[m] for m in (0, 4, 5, 9, 59)] == [20.0, 20.0, 70.0, 70.0, 70.0]
        assert [by_minute[m] for m in (60, 64, 65, 69, 119)] == [0.0, 40.0, 50.0, 90.0, 90.0]

        log.calls.clear()
        old = pl.concat([b.samples for b in connector.collect(edge63 - 24 * H, edge63 - 23 * H)])
        assert [c["MetricDataQueries"][0]["MetricStat"]["Period"] for c in log.calls] == [3600]
        assert old.height == 60 and set(old["value"].to_list()) == {29.5}  # the hour's mean, every minute

        log.calls.clear()
        ancient = now - dt.timedelta(days=456)
        assert list(connector.collect(ancient, ancient + H)) == [] and log.calls == []

        ingest_window(engine, "aws", connector, edge15 - H, edge15 + H)
    rows = _ledger(engine)
    device = "i-0aaa/gpu0"
    assert rows[(device, 23)]["observed_s"] == 3600.0 and rows[(device, 0)]["observed_s"] == 3600.0
    assert rows[(device, 23)]["busy_s_gpu_util"] == pytest.approx(1620.0)
    assert rows[(device, 0)]["busy_s_gpu_util"] == pytest.approx(1620.0)
    # the histogram shows the resolution: 5-minute means 20 % / 70 % before the edge, raw minutes after
    assert (rows[(device, 23)]["hist_10_25_s"], rows[(device, 23)]["hist_50_75_s"]) == (1800.0, 1800.0)
    assert rows[(device, 0)]["hist_0_1_s"] == 360.0  # the six 0 % minutes


def test_container_insights_gpus_and_pod_attribution(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    """Cluster ``eks-gpu``, one node ``i-0c1`` (2 GPUs), 10:00–11:00, dimension sets as the agent's
    translator declares them:

    * ``node_gpu_*``: GPU 0 util 80 %, GPU 1 util 40 %; both 1e9 B used, 100 W. The CloudWatch agent
      also reports GPU 0's util as 81 %: the agent's reading wins.
    * ``container_gpu_utilization``: ``ml/train-0-7d9f/trainer`` on nvidia0 10:00–10:30;
      ``serve/a-0-7d9f/vllm`` and ``serve/b-0-7d9f/vllm`` share nvidia1 all hour (½ each). No
      performance log group exists: the one node is the sole GPU with that device (``sole_gpu``).
    * Cluster ``eks-two`` has two nodes with an nvidia0 each: its container series cannot be tied
      to one GPU, so those GPUs' time stays unattributed. Roll-ups (``{ClusterName}``) are skipped.
      (Keys use ``FullPodName``; ``PodName`` is the workload.)
    """
    h10 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
    cloudwatch = aws_client("cloudwatch")
    hour, half = _minutes(h10, list(range(60))), _minutes(h10, list(range(30)))

    def node(cluster: str, instance: str, gpu: int) -> dict[str, str]:
        return {"ClusterName": cluster, "NodeName": f"ip-{instance}", "InstanceId": instance,
                "InstanceType": "g5.12xlarge", "GpuDevice": f"nvidia{gpu}"}  # fmt: skip

    def container(cluster: str, ns: str, pod: str, name: str, gpu: int) -> dict[str, str]:
        return {"ClusterName": cluster, "Namespace": ns, "PodName": pod, "FullPodName": f"{pod}-7d9f",
                "ContainerName": name, "GpuDevice": f"nvidia{gpu}"}  # fmt: skip

    ci = "ContainerInsights"
    for gpu, util in ((0, 80), (1, 40)):
        put_points(cloudwatch, ci, "node_gpu_utilization", node("eks-gpu", "i-0c1", gpu), hour, [util] * 60)
        put_points(cloudwatch, ci, "node_gpu_memory_used", node("eks-gpu", "i-0c1", gpu), hour, [1e9] * 60)
        put_points(cloudwatch, ci, "node_gpu_power_draw", node("eks-gpu", "i-0c1", gpu), hour, [100] * 60)
    put_points(cloudwatch, ci, "node_gpu_utilization", {"ClusterName": "eks-gpu"}, hour, [60] * 60)
    agent = {
        "index": "0",
        "InstanceId": "i-0c1",
        "InstanceType": "g5.12xlarge",
        "host": "ip-i-0c1",
        "name": "NVIDIA A10G",
    }
    put_points(cloudwatch, "CWAgent", "nvidia_smi_utilization_gpu", agent, hour, [81] * 60)
    util = "container_gpu_utilization"
    put_points(cloudwatch, ci, util, container("eks-gpu", "ml", "train-0", "trainer", 0), half, [80] * 30)
    put_points(cloudwatch, ci, util, container("eks-gpu", "serve", "a-0", "vllm", 1), hour, [20] * 60)
    put_points(cloudwatch, ci, util, container("eks-gpu", "serve", "b-0", "vllm", 1), hour, [20] * 60)
    for instance in ("i-0d1", "i-0d2"):
        put_points(cloudwatch, ci, "node_gpu_utilization", node("eks-two", instance, 0), hour, [50] * 60)
    put_points(cloudwatch, ci, util, container("eks-two", "ml", "x-0", "x", 0), hour, [50] * 60)

    config = _config(moto, account_id="111122223333", container_insights=True)
    with CloudWatchConnector(config, clock=lambda: h10 + 2 * H) as connector:
        batches = list(connector.collect(h10, h10 + H))
        ingest_window(engine, "aws", connector, h10, h10 + H)
    workloads = {w.workload_key: w for b in batches for w in b.workloads}
    trainer, a0, b0 = "k8s:ml/train-0-7d9f/trainer", "k8s:serve/a-0-7d9f/vllm", "k8s:serve/b-0-7d9f/vllm"
    assert sorted(workloads) == [trainer, a0, b0]
    assert (workloads[a0].namespace, workloads[a0].workload) == ("serve", "a-0")
    assert connector.attribution.unjoined == {"ambiguous": 60 * 2}  # collect + ingest each read it
    assert connector.attribution.joined == {"sole_gpu": (30 + 60 + 60) * 2}
    assert connector.attribution.log_problems == {
        f"/aws/containerinsights/{c}/performance: ResourceNotFoundException": 2
        for c in ("eks-gpu", "eks-two")
    }

    with engine.connect() as conn:
        rows = {
            (r["device_id"], r["workload_key"]): dict(r)
            for r in conn.execute(select(LedgerHour.__table__)).mappings()
        }
    assert sorted(rows) == [
        ("i-0c1/gpu0", ""),
        ("i-0c1/gpu0", trainer),
        ("i-0c1/gpu1", a0),
        ("i-0c1/gpu1", b0),
        ("i-0d1/gpu0", ""),
        ("i-0d2/gpu0", ""),
    ]
    # GPU 0: the agent's 81 %, half an hour for train-0 and half unattributed
    assert rows[("i-0c1/gpu0", trainer)]["observed_s"] == 1800.0
    assert rows[("i-0c1/gpu0", trainer)]["busy_s_gpu_util"] == pytest.approx(1458.0)
    assert rows[("i-0c1/gpu0", "")]["busy_s_gpu_util"] == pytest.approx(1458.0)
    assert rows[("i-0c1/gpu0", "")]["power_avg_w"] == pytest.approx(100.0)
    assert rows[("i-0c1/gpu0", "")]["mem_used_max_b"] == 1e9
    # GPU 1 split evenly: 40 % × 3,600 s × ½ each
    for key in (a0, b0):
        assert rows[("i-0c1/gpu1", key)]["observed_s"] == 1800.0
        assert rows[("i-0c1/gpu1", key)]["busy_s_gpu_util"] == pytest.approx(720.0)
    assert rows[("i-0d1/gpu0", "")]["observed_s"] == 3600.0
    devices = _devices(engine)
    assert (devices["i-0c1/gpu1"]["cluster"], devices["i-0c1/gpu1"]["node"]) == ("eks-gpu", "ip-i-0c1")
    assert devices["i-0c1/gpu1"]["instance_type"] == "g5.12xlarge"
    # one GPU seen by both: the agent's fields (model) with the cluster from Container Insights
    gpu0 = devices["i-0c1/gpu0"]
    assert (gpu0["gpu_model"], gpu0["cluster"]) == ("NVIDIA A10G", "eks-gpu")
