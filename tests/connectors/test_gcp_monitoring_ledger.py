"""Generated 60 s data for every family, served over gRPC, through the real ingest, to exact ledger rows.

Project ``ml-prod-123456``, 2025-09-15, ingest window 10:00–12:00 UTC, ``period_s = 60``. Each
aligned point is stamped at the END of its minute (as the API does); the connector moves it back.

* G2 ``7308425519386201977`` (n1-standard-8 + T4, zone us-central1-b), Ops Agent: utilization 50 %
  every minute 10:00–11:59 except 10:30–10:39 (no points); memory used 4 GiB, free 11 GiB.
* A3 ``4815162342108301234`` GPU 1, DCGM v2: utilization 0.5, SM 0.25, tensor pipe 0.125 (the fp32
  pipe, 0.75, must not be read as tensor), DRAM bandwidth 0.375, 61 °C, memory used/free/reserved
  40/39/1 GiB; energy counter read raw every minute: +42,000 J per minute, reset at 11:30 (the
  counter restarts and reads 21,000 J at 11:30).
* GKE cluster ``infer-gke`` node ``gke-infer-gke-pool-1-3f2a`` with two L4 GPUs (``accelerator_id``
  is the GPU UUID, as the device plugin writes it: L4_0 at 80 %, L4_1 at 0 %), memory 6 GiB / 0 of
  24 GiB; pod ``serving/infer-a-7d9`` container ``server`` on L4_0 10:00–10:44 (duty 80, 6 GiB).
* GKE cluster ``batch-gke``: container ``batch/job-1/worker`` on ``GPU-5d1e…`` 11:00–11:29 at
  100 %, no node series: the device is still its UUID, with no node.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from sqlalchemy import Engine, select

from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

GIB = 1024**3
PROJECT = "ml-prod-123456"
H10 = dt.datetime(2025, 9, 15, 10, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)
G2, A3 = "7308425519386201977", "4815162342108301234"
NODE, CLUSTER = "gke-infer-gke-pool-1-3f2a", "infer-gke"
POD = "k8s:serving/infer-a-7d9/server"
BATCH_GPU = "GPU-5d1e0c2a-8f3b-4e6d-9a7c-1b2d3e4f5a6b"
BATCH_DEV, BATCH_WL = BATCH_GPU, "k8s:batch/job-1/worker"
L4_0, L4_1 = "GPU-0f6e1a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b", "GPU-81d2c3b4-a5f6-4e7d-8c9b-0a1f2e3d4c5b"


def _ends(first: int, last: int, skip: range = range(0)) -> list[dt.datetime]:
    """End stamps of the minutes starting first … last (minutes after 10:00), minus ``skip``."""
    return [H10 + (m + 1) * MIN for m in range(first, last + 1) if m not in skip]


def _fleet() -> list:
    out = []
    g2 = {"project_id": PROJECT, "instance_id": G2, "zone": "us-central1-b"}
    t4 = {"gpu_number": "0", "model": "Tesla T4", "uuid": "GPU-0b7e"}
    system = {"machine_type": "n1-standard-8", "name": "t4-infer-01"}
    ends = _ends(0, 119, skip=range(30, 40))
    out.append(series("agent.googleapis.com/gpu/utilization", g2, t4, ends, [50.0] * len(ends),
                      system_labels=system))  # fmt: skip
    for state, value in (("used", 4 * GIB), ("free", 11 * GIB)):
        out.append(series("agent.googleapis.com/gpu/memory/bytes_used", g2, {**t4, "memory_state": state},
                          ends, [value] * len(ends), system_labels=system))  # fmt: skip

    a3 = {"project_id": PROJECT, "instance_id": A3, "zone": "us-central1-a"}
    h100 = {"gpu_number": "1", "model": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a3a3"}
    ends = _ends(0, 119)
    w = "workload.googleapis.com/gpu.dcgm."
    for name, extra, value in (
        ("utilization", {}, 0.5),
        ("sm.utilization", {}, 0.25),
        ("pipe.utilization", {"pipe": "tensor"}, 0.125),
        ("pipe.utilization", {"pipe": "fp32"}, 0.75),
        ("memory.bandwidth_utilization", {}, 0.375),
        ("temperature", {}, 61.0),
        ("memory.bytes_used", {"state": "used"}, 40 * GIB),
        ("memory.bytes_used", {"state": "free"}, 39 * GIB),
        ("memory.bytes_used", {"state": "reserved"}, 1 * GIB),
    ):
        out.append(series(w + name, a3, {**h100, **extra}, ends, [value] * len(ends)))
    # Raw counter readings every minute 09:00 … 13:00; reset at 11:30 (a new start time).
    stamps = [H10 - 60 * MIN + k * MIN for k in range(241)]
    reset = H10 + 90 * MIN
    since = [H10 - 10 * 60 * MIN if t < reset else reset - MIN / 2 for t in stamps]
    joules = [1e9 + 42_000.0 * k if t < reset else 21_000.0 + 42_000.0 * ((t - reset) // MIN) for k, t in
              enumerate(stamps)]  # fmt: skip
    out.append(series(w + "energy_consumption", a3, h100, stamps, joules, cumulative_since=since))

    k8n = "kubernetes.io/node/accelerator/"
    node = {"project_id": PROJECT, "location": "us-central1", "cluster_name": CLUSTER, "node_name": NODE}
    for acc, duty, used in ((L4_0, 80, 6 * GIB), (L4_1, 0, 0)):
        gpu = {"make": "nvidia", "model": "NVIDIA L4", "accelerator_id": acc}
        for name, value in (("duty_cycle", duty), ("memory_used", used), ("memory_total", 24 * GIB)):
            out.append(series(k8n + name, node, gpu, ends, [value] * 120, resource_type="k8s_node"))
    k8c = "kubernetes.io/container/accelerator/"
    pod = {"project_id": PROJECT, "location": "us-central1", "cluster_name": CLUSTER,
           "namespace_name": "serving", "pod_name": "infer-a-7d9", "container_name": "server"}  # fmt: skip
    gpu = {"make": "nvidia", "model": "NVIDIA L4", "accelerator_id": L4_0}
    pod_ends = _ends(0, 44)
    for name, value in (("duty_cycle", 80), ("memory_used", 6 * GIB), ("memory_total", 24 * GIB)):
        out.append(series(k8c + name, pod, gpu, pod_ends, [value] * 45, resource_type="k8s_container"))
    batch = {"project_id": PROJECT, "location": "us-central1-c", "cluster_name": "batch-gke",
             "namespace_name": "batch", "pod_name": "job-1", "container_name": "worker"}  # fmt: skip
    gpu = {"make": "nvidia", "model": "NVIDIA A100-SXM4-40GB", "accelerator_id": BATCH_GPU}
    out.append(
        series(k8c + "duty_cycle", batch, gpu, _ends(60, 89), [100] * 30, resource_type="k8s_container")
    )
    return out


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeMetricService, str]]:
    service = FakeMetricService({PROJECT: _fleet()}, period_s=60)
    with running_fake(service) as target:
        yield service, target


def test_every_family_to_exact_ledger_rows(engine: Engine, fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    config = GcpMonitoringConfig(name="gcp", projects=[PROJECT], read_system_labels=True)
    with plain_client(target) as client, GcpMonitoringConnector(config, client=client) as connector:
        result = ingest_window(engine, "gcp", connector, H10, H10 + 120 * MIN)
    assert result.samples_rejected == 0
    with engine.connect() as conn:
        rows = {
            (r["device_id"], r["hour_start"].hour, r["workload_key"]): dict(r)
            for r in conn.execute(select(LedgerHour.__table__)).mappings()
        }
        devices = {d["device_id"]: dict(d) for d in conn.execute(select(Device.__table__)).mappings()}

    def check(key: tuple[str, int, str], **expected: object) -> None:
        for column, value in expected.items():
            assert rows[key][column] == value, (key, column, rows[key][column])

    g2, a3 = f"{G2}/gpu0", f"{A3}/gpu1"
    gke0, gke1 = L4_0, L4_1
    assert set(rows) == {(g2, 10, ""), (g2, 11, ""), (a3, 10, ""), (a3, 11, ""), (gke0, 10, POD),
                         (gke0, 10, ""), (gke0, 11, ""), (gke1, 10, ""), (gke1, 11, ""),
                         (BATCH_DEV, 11, BATCH_WL)}  # fmt: skip

    # G2: the 10-minute gap is present but unobserved: 3000 s observed at 50 % → 1500 s busy.
    mem = {"mem_used_max_b": 4.0 * GIB, "mem_total_b": 15.0 * GIB}
    check((g2, 10, ""), present_s=3600.0, observed_s=3000.0, busy_s=1500.0, idle_s=0.0, **mem)
    check((g2, 11, ""), present_s=3600.0, observed_s=3600.0, busy_s=1800.0, **mem)

    # A3 GPU 1: SM 25 % is the default metric → 900 s busy; tensor 12.5 % → 450 s (not the fp32
    # 75 %); DRAM 37.5 % → 1350 s; GR engine 50 % → 1800 s. Total memory = 40 + 39 + 1 GiB.
    # Energy: 60 deltas × 42,000 J = 2,520,000 J at 10:00; at 11:00, 29 × 42,000 + 21,000 (the
    # reset reading counts from zero) + 30 × 42,000 = 2,499,000 J.
    dcgm = {"present_s": 3600.0, "observed_s": 3600.0, "busy_s": 900.0, "default_metric": "sm_active",
            "busy_s_tensor_active": 450.0, "busy_s_mem_bw": 1350.0, "busy_s_gpu_util": 1800.0,
            "temp_max_c": 61.0, "mem_used_max_b": 40.0 * GIB, "mem_total_b": 80.0 * GIB,
            "energy_estimated": False}  # fmt: skip
    check((a3, 10, ""), energy_j=2_520_000.0, **dcgm)
    check((a3, 11, ""), energy_j=2_499_000.0, **dcgm)

    # GKE node GPU 0: the pod's readings (10:00–10:44) replace the node's own; 80 % duty.
    gke = {"mem_used_max_b": 6.0 * GIB, "mem_total_b": 24.0 * GIB, "cluster": CLUSTER, "node": NODE}
    check((gke0, 10, POD), present_s=2700.0, observed_s=2700.0, busy_s=2160.0, namespace="serving",
          workload="infer-a-7d9", **gke)  # fmt: skip
    check((gke0, 10, ""), present_s=900.0, observed_s=900.0, busy_s=720.0, **gke)
    check((gke0, 11, ""), present_s=3600.0, observed_s=3600.0, busy_s=2880.0, **gke)
    for hour in (10, 11):
        check((gke1, hour, ""), observed_s=3600.0, busy_s=0.0, idle_s=3600.0, mem_used_max_b=0.0)
    check((BATCH_DEV, 11, BATCH_WL), present_s=1800.0, observed_s=1800.0, busy_s=1800.0, namespace="batch")

    assert devices[g2]["instance_type"] == "n1-standard-8" and devices[g2]["node"] == "t4-infer-01"
    assert (devices[g2]["instance_id"], devices[g2]["region"], devices[g2]["gpu_index"]) == (
        G2,
        "us-central1",
        0,
    )
    assert devices[a3]["instance_type"] is None  # its series carry no system labels
    # GKE: no index in any label; the node from the node series of the same UUID.
    assert (devices[gke1]["instance_id"], devices[gke1]["region"], devices[gke1]["gpu_index"]) == (
        None,
        "us-central1",
        None,
    )
    assert (devices[gke0]["node"], devices[gke0]["gpu_model"], devices[gke0]["cluster"]) == (
        NODE,
        "NVIDIA L4",
        CLUSTER,
    )
    assert (devices[BATCH_DEV]["node"], devices[BATCH_DEV]["region"]) == (None, "us-central1")
    assert devices[BATCH_DEV]["cluster"] == "batch-gke"

    # Gauges are asked for aligned on the minute grid, the counter raw.
    energy = [r for r in service.requests if "energy_consumption" in r.filter]
    assert energy and all(not r.aggregation.per_series_aligner for r in energy)
    gauges = [r for r in service.requests if "energy_consumption" not in r.filter]
    assert all(r.aggregation.alignment_period == MIN for r in gauges)
    assert all(r.interval.end_time.timestamp() % 60 == 0 for r in gauges)


def test_hour_by_hour_equals_one_window(engine: Engine, fake: tuple[FakeMetricService, str]) -> None:
    _, target = fake
    config = GcpMonitoringConfig(name="gcp", projects=[PROJECT], read_system_labels=True)

    def ledger() -> dict[tuple[str, int, str], dict]:
        with engine.connect() as conn:
            rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
        return {(r["device_id"], r["hour_start"].hour, r["workload_key"]): dict(r) for r in rows}

    with plain_client(target) as client, GcpMonitoringConnector(config, client=client) as connector:
        ingest_window(engine, "gcp", connector, H10, H10 + 120 * MIN)
        once = ledger()
        for start in (H10 + 60 * MIN, H10, H10 + 60 * MIN):
            ingest_window(engine, "gcp", connector, start, start + 60 * MIN)
    again = ledger()
    assert again.keys() == once.keys() and len(once) == 10
    for key, row in once.items():
        assert {k: v for k, v in again[key].items() if k != "id"} == {
            k: v for k, v in row.items() if k != "id"
        }
