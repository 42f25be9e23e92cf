"""Container Insights GPU semantics over the wire: the recorded-format fixture
``tests/fixtures/recorded/cloudwatch/container_insights_two_nodes.*`` (see its ``.md``) written into
moto — metrics with ``PutMetricData``, the performance log group with ``PutLogEvents`` — and read by
the ``cloudwatch`` connector's real boto3 clients through the real ingest to exact ledger rows.

moto accepts log events only from the last 14 days, so the fixture's hour (2026-03-02 10:00 UTC) is
moved by whole days to yesterday's 10:00; nothing in the rows depends on the date.
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
from awsfake.server import put_points
from sqlalchemy import Engine, select

from connectors.cloudwatch import CloudWatchConnector
from connectors.cloudwatch_ci import Attribution, ContainerRef, attach, placements
from connectors.sdk import DeviceInfo
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

FIXTURE = (
    Path(__file__).parent.parent / "fixtures" / "recorded" / "cloudwatch" / "container_insights_two_nodes"
)
RECORDED_HOUR = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
MIB = 1024 * 1024
H = dt.timedelta(hours=1)
A0 = "i-0a1b2c3d4e5f60711/gpu0"
B = "i-0b2c3d4e5f6071822/gpu{}"
TRAIN_A = "k8s:ml/train-7c9d5b6f4-x2x9k/trainer"
TRAIN_B = "k8s:ml/train-7c9d5b6f4-9qvbn/trainer"
INFER = "k8s:ml/infer-0/server"
DEBUG = "k8s:default/debug-shell/shell"


@pytest.fixture
def engine(sqlite_url: str) -> Any:
    eng = make_engine(sqlite_url)
    yield eng
    eng.dispose()


def _shift() -> dt.timedelta:
    today = dt.datetime.now(dt.UTC).replace(hour=10, minute=0, second=0, microsecond=0)
    return dt.timedelta(days=(today - RECORDED_HOUR).days - 1)


def _load(aws_client: Callable[..., Any], shift: dt.timedelta) -> None:
    cloudwatch, logs = aws_client("cloudwatch"), aws_client("logs")
    for series in json.loads(FIXTURE.with_suffix(".metrics.json").read_text()):
        dims = {d["Name"]: d["Value"] for d in series["Dimensions"]}
        stamps = [dt.datetime.fromisoformat(t) + shift for t in series["Timestamps"]]
        put_points(cloudwatch, series["Namespace"], series["MetricName"], dims, stamps, series["Values"])
    group = "/aws/containerinsights/ml-prod/performance"
    logs.create_log_group(logGroupName=group)
    streams: dict[str, list[dict[str, Any]]] = {}
    for line in FIXTURE.with_suffix(".performance.jsonl").read_text().splitlines():
        event = json.loads(line)
        ts = event["timestamp"] + int(shift.total_seconds() * 1000)
        streams.setdefault(event["logStreamName"], []).append({"timestamp": ts, "message": event["message"]})
    for stream, events in streams.items():
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        answer = logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
        assert "rejectedLogEventsInfo" not in answer


def _rows(engine: Engine) -> dict[tuple[str, str], dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
    return {(r["device_id"], r["workload_key"]): dict(r) for r in rows}


def test_two_gpu_nodes_pods_keyed_by_full_pod_name_and_joined_through_the_performance_log(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    shift = _shift()
    _load(aws_client, shift)
    start = RECORDED_HOUR + shift
    config = cloudwatch_config(moto, container_insights=True)
    with CloudWatchConnector(config, clock=lambda: start + 2 * H) as connector:
        ingest_window(engine, "aws", connector, start, start + H)

    rows = _rows(engine)
    # five GPUs; the idle one (B nvidia2) unallocated, infer-0's GPU unallocated after 10:30
    assert sorted(rows) == sorted([
        (A0, TRAIN_A), (B.format(0), TRAIN_B), (B.format(1), INFER), (B.format(1), ""),
        (B.format(2), ""), (B.format(3), DEBUG),
    ])  # fmt: skip
    # the two replicas of Deployment "train" stay apart; PodName is their workload name
    assert {k[1]: (r["namespace"], r["workload"]) for k, r in rows.items() if k[1]} == {
        TRAIN_A: ("ml", "train"),
        TRAIN_B: ("ml", "train"),
        INFER: ("ml", "infer-0"),
        DEBUG: ("default", "debug-shell"),
    }
    # hand-computed: busy = util/100 × s, tensor = ratio × s, energy = W × s (no counter: estimated)
    expected = {
        (A0, TRAIN_A): (3600, 0.90 * 3600, 0.45 * 3600, 200 * 3600, 20_000 * MIB),
        (B.format(0), TRAIN_B): (3600, 0.50 * 3600, 0.20 * 3600, 150 * 3600, 10_000 * MIB),
        (B.format(1), INFER): (1800, 0.30 * 1800, 0.10 * 1800, 120 * 1800, 8_000 * MIB),
        (B.format(1), ""): (1800, 0.0, 0.0, 60 * 1800, 0),
        (B.format(2), ""): (3600, 0.0, 0.0, 58 * 3600, 0),
        (B.format(3), DEBUG): (3600, 0.10 * 3600, 0.0, 70 * 3600, 2_000 * MIB),
    }
    for key, (observed, busy, tensor, energy, mem_max) in expected.items():
        row = rows[key]
        assert (row["present_s"], row["observed_s"]) == (observed, observed), key
        assert row["busy_s_gpu_util"] == pytest.approx(busy, abs=1e-6), key
        assert row["busy_s_tensor_active"] == pytest.approx(tensor, abs=1e-6), key
        assert row["energy_j"] == pytest.approx(energy, abs=1e-6), key
        assert row["mem_used_max_b"] == mem_max, key
        assert row["mem_total_b"] == 23_028 * MIB, key
    assert rows[(B.format(2), "")]["idle_s"] == 3600.0
    # energy per physical GPU is ∫P dt once (720 kJ + 540 + 216 + 108 + 208.8 + 252)
    assert sum(r["energy_j"] for r in rows.values()) == pytest.approx(2_044_800.0, abs=1e-6)
    # how containers were tied: the log for three containers (60 + 60 + 30 readings), nvidia3's
    # sole GPU for debug-shell; eval's ten minutes on an nvidia0 of one of two nodes, with no log
    # event, are not guessed
    assert connector.attribution.joined == {"performance_log": 150, "sole_gpu": 60}
    assert connector.attribution.unjoined == {"ambiguous": 10}
    assert not connector.attribution.log_problems

    # Without the performance log (``performance_logs = false``), nvidia0 exists on both nodes:
    # neither train replica can be placed (counted), the sole nvidia1 and nvidia3 still join.
    config = cloudwatch_config(moto, container_insights=True, performance_logs=False)
    with CloudWatchConnector(config, clock=lambda: start + 2 * H) as blind:
        batches = list(blind.collect(start, start + H))
    occupied = pl.concat([b.samples for b in batches]).filter(pl.col("workload_key") != "")
    assert sorted(occupied.select("device_id", "workload_key").unique().rows()) == [
        (B.format(1), INFER),
        (B.format(3), DEBUG),
    ]
    assert blind.attribution.unjoined == {"ambiguous": 60 + 60 + 10}
    assert blind.attribution.joined == {"sole_gpu": 30 + 60}


def test_a_statefulset_pod_that_moves_nodes_follows_its_log_events() -> None:
    """``db-0`` runs on node X's nvidia0 until 10:02, then (same name) on node Y's nvidia0: each
    minute goes to the node its latest event before the minute's end names."""
    cols = {"cluster": "c", "namespace": "ns", "full_pod": "db-0", "container": "pg", "gpu_device": "nvidia0"}
    t0 = 1_000_000 * 60_000
    events = [
        {"timestamp": t0 + m * 60_000 + 7_000, "logStreamName": node,
         "message": json.dumps({"Type": "ContainerGPU", "ClusterName": "c", "Namespace": "ns",
                                "FullPodName": "db-0", "ContainerName": "pg", "GpuDevice": "nvidia0",
                                "NodeName": node})}
        for m, node in ((0, "x"), (1, "x"), (3, "y"))
    ]  # fmt: skip
    found = placements(events, "c")
    assert found.height == 3
    ref = ContainerRef.of({"ClusterName": "c", "Namespace": "ns", "PodName": "db", "FullPodName": "db-0",
                           "ContainerName": "pg", "GpuDevice": "nvidia0"})  # fmt: skip
    assert ref is not None and ref.workload_key == "k8s:ns/db-0/pg"
    readings = pl.DataFrame(
        [
            {**cols, "gpu_index": 0, "ts_ms": t0 + m * 60_000, "workload_key": ref.workload_key}
            for m in range(5)
        ]
    )
    nodes = [
        DeviceInfo("ix/gpu0", "aws", cluster="c", node="x", gpu_index=0),
        DeviceInfo("iy/gpu0", "aws", cluster="c", node="y", gpu_index=0),
    ]
    tally = Attribution()
    placed = attach(readings, found, nodes, 60_000, tally).sort("ts_ms")
    # minute 2 has no event of its own: the latest before its end is minute 1's (node x)
    assert placed["device_id"].to_list() == ["ix/gpu0", "ix/gpu0", "ix/gpu0", "iy/gpu0", "iy/gpu0"]
    assert tally.joined == {"performance_log": 5}
